"""Ways to damage a cached file, each the way a disk, a user or a crashed tool would."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def flip_bytes(path: Path, n: int = 64) -> None:
    """XOR ``n`` bytes in the middle of the file (in place, like a bad sector)."""
    data = bytearray(path.read_bytes())
    mid = max(0, len(data) // 2 - n // 2)
    for i in range(mid, min(len(data), mid + n)):
        data[i] ^= 0x5A
    with open(path, "r+b") as fh:
        fh.write(data)


def flip_one_bit_keep_mtime(path: Path) -> None:
    """Flip one bit and restore the old mtime (``cp -p``-like): only ctime betrays it."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def truncate(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def empty(path: Path) -> None:
    path.write_bytes(b"")


def delete(path: Path) -> None:
    path.unlink()


def overwrite_with(path: Path, other: Path) -> None:
    """``cp other path``: the other file's content in this file's place."""
    shutil.copyfile(other, path)


FILE_FAULTS = {"flip64": flip_bytes, "flip1-keep-mtime": flip_one_bit_keep_mtime,
               "truncate": truncate, "empty": empty, "delete": delete}


def on(file_name: str, damage):
    """``damage`` applied to ``folder / file_name``: a fault of a folder artefact."""
    return lambda folder: damage(folder / file_name)
