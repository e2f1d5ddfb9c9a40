"""Write a cache folder so that it is either complete or absent: never half-written.

Every cached artefact (a prepared domain, a converted model, a trained EAGLE head) is built in a
temporary sibling folder and renamed into place only once it is complete. An error, or an
interrupt, while building deletes the temporary folder and leaves any previous version alone.

A build killed outright (``kill -9``, power loss) cannot clean up: its temporaries stay. Builds
therefore run under :func:`build_lock`, an exclusive lock on the cache folder (the file
``.<folder>.lock`` beside it, so the folder holds only entries) that, once held,
removes every temporary left there (a name containing ``.tmp``: ``atomic_folder``'s hidden
``.<name>.tmp-*`` folders, ``*.tmp.npz`` and ``*.json.tmp`` files). Holding the lock means no
live build is writing them; the kernel drops the lock of a killed process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spec_adapters.store.integrity import CacheError

__all__ = ["atomic_folder", "build_lock", "sweep", "temporaries"]


@contextmanager
def atomic_folder(final: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder next to ``final``; on success it replaces ``final``.

    Parameters
    ----------
    final : str or Path
        Where the finished folder must end up. Its parent is created if needed.

    Yields
    ------
    Path
        The temporary folder to write into (same file system as ``final``, so the final
        ``rename`` is atomic).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def temporaries(folder: str | Path) -> list[Path]:
    """The temporaries of builds in ``folder`` (names containing ``.tmp``), sorted."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if ".tmp" in p.name) if folder.is_dir() else []


@contextmanager
def build_lock(folder: str | Path) -> Iterator[Path]:
    """Hold the exclusive build lock of the cache folder ``folder`` (created if needed).

    Once the lock is held, the temporaries of crashed builds are removed (see the module
    docstring). Blocks while another process holds it.

    Yields
    ------
    Path
        ``folder``.

    Raises
    ------
    CacheError
        The folder cannot be written (a read-only cache): nothing can be built there.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder.parent / f".{folder.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise CacheError(f"the cache folder {folder} cannot be written ({err.strerror}); "
                         "make it writable or use another --cache-dir") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for p in temporaries(folder):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        yield folder
    finally:
        os.close(fd)


def sweep(folder: str | Path) -> None:
    """Remove the temporaries of killed builds from ``folder`` if there are any and it can be
    written (under :func:`build_lock`); a read-only folder is left as it is."""
    if temporaries(folder):
        with contextlib.suppress(CacheError), build_lock(folder):
            pass
