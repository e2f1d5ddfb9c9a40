"""A read-only cache. Tests run as root, whom ``chmod`` does not stop, so the file system is
made read-only by monkeypatching every write primitive (``os.open`` for writing, ``open`` in a
writing mode, ``os.replace`` / ``rename`` / ``mkdir`` / ``unlink`` / ``rmdir``) to fail with
EROFS. A valid cache must still load; a corrupt entry must be one ``CacheError`` line naming
it, never a traceback from deep inside a build and never a silent use."""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os

import pytest

from spec_adapters.app import domains as dm
from spec_adapters.app.pool.cache import PoolCorruptError, load_pool
from spec_adapters.hf.models import load_target
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from spec_adapters.store import CacheError

from .cache_world import world_fixture
from .damage import FILE_FAULTS

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _erofs(*args, **_kw):
    raise OSError(errno.EROFS, "Read-only file system", str(args[0]) if args else None)


@contextlib.contextmanager
def read_only(monkeypatch):
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, flags, *a, **k):
        return _erofs(path) if flags & _WRITE_FLAGS else real_os_open(path, flags, *a, **k)

    def py_open(file, mode="r", *a, **k):
        return _erofs(file) if set(mode) & set("wax+") else real_open(file, mode, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(os, "open", os_open)
        m.setattr(builtins, "open", py_open)
        m.setattr(io, "open", py_open)
        for name in ("replace", "rename", "mkdir", "unlink", "remove", "rmdir"):
            m.setattr(os, name, _erofs)
        yield


world = world_fixture("ro-world")


def _snapshot(root):
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


def test_a_valid_read_only_cache_loads_and_is_left_untouched(world, tmp_path, monkeypatch):
    folder = world.copy(tmp_path / "cache")  # new inodes: every file is hashed, none stamped
    (folder / ".ngram-code-x.tmp-1").mkdir()  # a crashed build's leftover: left alone
    before = _snapshot(tmp_path)
    with read_only(monkeypatch):
        pool = load_pool(world.model, world.tok, tmp_path / "cache", world.cfg, progress=False)
        again = load_pool(world.model, world.tok, tmp_path / "cache", world.cfg, build=False)
        dom = dm.load_domain("math", tmp_path / "cache")
    assert pool.names == again.names and len(pool.heads) == 4 and dom.train
    assert _snapshot(tmp_path) == before


def test_a_corrupt_entry_in_a_read_only_pool_is_one_clear_error(world, tmp_path, monkeypatch):
    folder = world.copy(tmp_path / "cache")
    entry = world.entries(folder)["ngram-news"]
    FILE_FAULTS["flip64"](entry.path)
    with read_only(monkeypatch), pytest.raises(PoolCorruptError) as err:
        load_pool(world.model, world.tok, tmp_path / "cache", world.cfg, progress=False)
    msg = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in msg
    assert entry.key in msg and "checksum" in msg and "cannot be written" in msg


def test_a_corrupt_domain_in_a_read_only_cache_is_one_clear_error(world, tmp_path,
                                                                  monkeypatch):
    world.copy(tmp_path / "cache")
    FILE_FAULTS["flip64"](tmp_path / "cache" / "domains" / "news" / "train.jsonl")
    with read_only(monkeypatch), pytest.raises(CacheError) as err:
        dm.prepare_domains(tmp_path / "cache", ["news"])
    assert "'news' cannot be prepared" in str(err.value) and "train.jsonl" in str(err.value)
    assert "cannot be written" in str(err.value)


def test_a_corrupt_conversion_in_a_read_only_cache_is_one_clear_error(tmp_path, monkeypatch):
    gguf = tmp_path / "t.gguf"
    write_tiny_gguf(gguf)
    load_target(gguf, cache_dir=tmp_path / "cache")
    (folder,) = (tmp_path / "cache" / "models").iterdir()
    with read_only(monkeypatch):
        load_target(gguf, cache_dir=tmp_path / "cache")  # valid: loads
    FILE_FAULTS["truncate"](folder / "model.safetensors")
    with read_only(monkeypatch), pytest.raises(CacheError) as err:
        load_target(gguf, cache_dir=tmp_path / "cache")
    assert str(err.value).startswith(f"model cache {folder} cannot be rebuilt (")
    assert "model.safetensors has" in str(err.value) and "cannot be written" in str(err.value)
