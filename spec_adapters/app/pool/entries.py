"""One drafter-pool entry on disk: what it is (``kind``, ``name``) and how it is built
(``settings``); the names of its files, derived from those (a hash of the settings,
:func:`spec_adapters.store.keys.entry_key`); and its sidecar, ``<entry>.json``, holding the
size and SHA-256 of those files, written last (an entry without one is incomplete) and checked
on every load (:mod:`spec_adapters.store.integrity`). The pool layout:
:mod:`spec_adapters.app.pool.cache`."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from spec_adapters.store.integrity import CacheError, expect_digests, file_digests, verify_files
from spec_adapters.store.keys import entry_key

__all__ = ["FORMAT", "Entry", "check_entry", "remove_entry", "write_sidecar"]

FORMAT = 2  # 2: entries named by a hash of their settings; sidecars name no files of their own


@dataclass
class Entry:
    """One pool entry: what it is (``kind``, ``name``), how it is built (``settings``) and,
    derived from those, the names of its files."""

    name: str
    kind: str  # answers, ngram, extra, eagle, router
    settings: dict
    folder: Path

    @property
    def key(self) -> str:
        return entry_key(self.name, self.settings)

    @property
    def path(self) -> Path:
        return self.folder / (self.key if self.kind == "eagle" else f"{self.key}.npz")

    @property
    def sidecar(self) -> Path:
        return self.folder / f"{self.key}.json"

    @property
    def files(self) -> list[str]:
        """The entry's files, relative to the pool folder: named by the entry itself."""
        if self.kind == "eagle":
            from spec_adapters.eagle.head import CONFIG_NAME, WEIGHTS_NAME

            return [f"{self.key}/{CONFIG_NAME}", f"{self.key}/{WEIGHTS_NAME}"]
        return [self.path.name]


def write_sidecar(entry: Entry) -> None:
    """Write ``entry``'s sidecar (format, kind, name, settings, its files' digests) atomically:
    the last step of building it."""
    meta = {"format": FORMAT, "kind": entry.kind, "name": entry.name,
            "settings": entry.settings, "files": file_digests(entry.folder, entry.files)}
    tmp = entry.sidecar.with_name(entry.sidecar.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, entry.sidecar)


def check_entry(entry: Entry) -> str | None:
    """``None`` when ``entry`` is complete and its files match their checksums; else why not.
    ``"missing"`` when nothing of it is there at all."""
    if not entry.path.exists() and not entry.sidecar.exists():
        return "missing"
    try:
        meta = json.loads(entry.sidecar.read_text())
    except (OSError, ValueError) as err:
        return f"its sidecar {entry.sidecar.name} is missing or unreadable ({type(err).__name__})"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT \
            or meta.get("kind") != entry.kind or meta.get("settings") != entry.settings:
        return f"its sidecar {entry.sidecar.name} does not describe this entry"
    try:
        verify_files(entry.folder, expect_digests(meta.get("files"), entry.files, entry.sidecar))
    except CacheError as err:
        return str(err)
    return None


def remove_entry(entry: Entry) -> None:
    """Delete ``entry``'s file or folder and its sidecar (whatever of them is there)."""
    for p in (entry.path, entry.sidecar):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)

