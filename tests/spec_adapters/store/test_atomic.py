"""atomic_folder: a cache folder is complete or absent, never half-written; build_lock: one
builder at a time, and the leftovers of killed builds removed."""

from __future__ import annotations

import os

import pytest

from spec_adapters.store import CacheError
from spec_adapters.store.atomic import atomic_folder, build_lock, temporaries


def test_success_replaces_the_old_folder(tmp_path):
    final = tmp_path / "a" / "entry"
    final.mkdir(parents=True)
    (final / "old.txt").write_text("old")
    with atomic_folder(final) as tmp:
        assert tmp.parent == final.parent and tmp != final
        (tmp / "new.txt").write_text("new")
        assert (final / "old.txt").exists()  # untouched until the block succeeds
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in final.parent.iterdir()) == ["entry"]  # no temporary left


def test_an_error_keeps_the_old_folder_and_removes_the_partial_one(tmp_path):
    final = tmp_path / "entry"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_folder(final) as tmp:
        (tmp / "half.txt").write_text("half")
        raise KeyboardInterrupt
    assert sorted(p.name for p in final.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_build_lock_removes_what_killed_builds_left(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir()
    for name in (".entry.tmp-123", "ngram-code.npz.tmp.npz", "x.json.tmp"):
        (folder / name).mkdir() if name.startswith(".") else (folder / name).write_text("half")
    (folder / ".entry.tmp-123" / "weights").write_bytes(b"\0" * 1024)
    (folder / "ngram-code.npz").write_text("complete")
    assert [p.name for p in temporaries(folder)] == [".entry.tmp-123", "ngram-code.npz.tmp.npz",
                                                     "x.json.tmp"]
    with build_lock(folder) as held:
        assert held == folder and temporaries(folder) == []
    assert sorted(p.name for p in folder.iterdir()) == ["ngram-code.npz"]
    assert (tmp_path / ".pool.lock").is_file()  # beside the folder, not in it


def test_build_lock_on_an_unwritable_folder_is_a_cache_error(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)  # root ignores chmod: refuse the open instead
    with pytest.raises(CacheError, match=r"pool cannot be written \(Permission denied\)"), \
            build_lock(tmp_path / "pool"):
        pass
