"""atomic_folder: a cache folder is complete or absent, never half-written."""

from __future__ import annotations

import pytest

from spec_adapters.store.atomic import atomic_folder


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
