"""``kill -9`` of a build: a forked child builds (the pool, a conversion, the domains) and is
killed at an injected point (just before or just after its k-th ``os.replace`` / ``os.rename``,
the commits of every cache write) or after a short, varied delay. Afterwards nothing that looks
complete may differ from a clean build, and the next load must complete the cache, to the
clean build's bytes, with no temporaries left behind."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest

from spec_adapters.app import domains as dm
from spec_adapters.app.pool.cache import build_pool, load_pool
from spec_adapters.app.pool.entries import check_entry
from spec_adapters.hf import models
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from spec_adapters.store.atomic import temporaries

from .cache_world import patch_router, world_fixture
from .test_cache_domains import DOMS, _builder, _tree


def _own_locks() -> None:
    """In a forked child: a private tqdm lock. tqdm's default one is a multiprocessing lock
    whose semaphore a forked child *shares* with pytest; killed while holding it, the child
    would leave pytest blocked forever (separate processes, as in real use, share nothing).
    Set on ``tqdm.auto``'s class too: a subclass that asked for the lock before keeps its own
    reference to the shared one (pytest hung that way in a pool build killed after 0.01 s)."""
    from tqdm import tqdm
    from tqdm.auto import tqdm as auto_tqdm

    lock = threading.RLock()
    for cls in (tqdm, auto_tqdm):
        cls.set_lock(lock)


def _run_killed(build, at: int | None = None, after: bool = False,
                delay: float | None = None, on: tuple | None = None) -> int:
    """Fork; the child runs ``build`` and is SIGKILLed at commit number ``at`` (before or
    ``after`` it), on entering the method ``on = (owner, name)``, or by the parent after
    ``delay`` seconds. Returns the child's wait status."""
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            _own_locks()
            if on is not None:
                setattr(*on, lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
            if at is not None:
                count = [0]
                for name in ("replace", "rename"):
                    real = getattr(os, name)

                    def hooked(*a, _real=real, **k):
                        count[0] += 1
                        if count[0] == at and not after:
                            os.kill(os.getpid(), signal.SIGKILL)
                        out = _real(*a, **k)
                        if count[0] == at:
                            os.kill(os.getpid(), signal.SIGKILL)
                        return out

                    setattr(os, name, hooked)
            build()
        finally:
            os._exit(0)
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _commits(build) -> int:
    """How many commits a complete ``build`` makes (counted in a child, like the kills)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _own_locks()
            n = [0]
            for name in ("replace", "rename"):
                real = getattr(os, name)
                setattr(os, name, lambda *a, _r=real, **k: (n.__setitem__(0, n[0] + 1),
                                                            _r(*a, **k))[1])
            build()
            os.write(w, str(n[0]).encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    os.close(w)
    return int(os.read(r, 32) or b"0")


def _points(n: int, k: int) -> list[tuple[int, bool]]:
    """``k`` kill points spread over ``n`` commits, alternating before / after."""
    return [(1 + (i * (n - 1)) // max(1, k - 1), bool(i % 2)) for i in range(k)]


# ------------------------------------------------------------------------------ the pool
world = world_fixture("kill-world")


def _empty_pool(world, dest):
    folder = world.copy(dest)
    shutil.rmtree(folder)
    return folder


def _pool_build(world, cache):
    return lambda: build_pool(world.model, world.tok, cache, world.cfg, progress=False)


def _assert_pool_recovers(world, folder, capsys):
    for e in world.entries(folder).values():  # nothing that looks complete is wrong
        if check_entry(e) is None:
            for f in e.files:
                assert (folder / f).read_bytes() == world.reference[f], f
    pool = load_pool(world.model, world.tok, folder.parents[1], world.cfg, progress=False)
    assert len(pool.heads) == 4 and pool.router is not None
    assert temporaries(folder) == []
    got = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
           if p.is_file() and not p.name.startswith(".")}
    assert got == world.reference


N_POINTS = 10


def test_pool_build_killed_at_commits(world, tmp_path, monkeypatch, capsys):
    patch_router(monkeypatch)
    n = _commits(_pool_build(world, _empty_pool(world, tmp_path / "count").parents[1]))
    assert n >= 2 * len(world.entries(world.folder))  # every entry: its file, its sidecar
    for i, (at, after) in enumerate(_points(n, N_POINTS)):
        folder = _empty_pool(world, tmp_path / f"c{i}")
        status = _run_killed(_pool_build(world, folder.parents[1]), at=at, after=after)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        _assert_pool_recovers(world, folder, capsys)


@pytest.mark.parametrize("delay", [0.01, 0.03, 0.05, 0.08])
def test_pool_build_killed_after_a_delay(world, tmp_path, monkeypatch, capsys, delay):
    patch_router(monkeypatch)
    folder = _empty_pool(world, tmp_path / "cache")
    _run_killed(_pool_build(world, folder.parents[1]), delay=delay)
    _assert_pool_recovers(world, folder, capsys)


# ------------------------------------------------------------------------------ the model
@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill-gguf")
    path = root / "tiny.gguf"
    write_tiny_gguf(path)
    models.load_target(path, cache_dir=root / "ref")
    (ref,) = (root / "ref" / "models").iterdir()
    return path, {p.name: p.read_bytes() for p in ref.iterdir() if p.name != models.MANIFEST}


def _tokenizer_save():
    from transformers import PreTrainedTokenizerBase

    return PreTrainedTokenizerBase, "save_pretrained"  # the weights are written by then


@pytest.mark.parametrize("how", ["before-rename", "after-rename", "mid-folder", "delay-0.02",
                                 "delay-0.08"])
def test_conversion_killed(gguf, tmp_path, how):
    path, ref = gguf
    cache = tmp_path / "cache"
    kw = {"before-rename": {"at": 1}, "after-rename": {"at": 1, "after": True},
          "mid-folder": {"on": _tokenizer_save()}}.get(how) or {"delay": float(how[6:])}
    status = _run_killed(lambda: models.load_target(path, cache_dir=cache), **kw)
    assert "delay" in how or os.WTERMSIG(status) == signal.SIGKILL
    folder = models._cache_folder(path, cache)
    if how == "mid-folder":  # the hidden temporary folder of issue 8, weights inside
        (tmp,) = temporaries(cache / "models")
        assert (tmp / "model.safetensors").is_file() and not folder.exists()
    if models._cache_problem(folder, path) is None:  # looks complete: must be right
        assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name in ref} == ref
    models.load_target(path, cache_dir=cache)
    assert [p.name for p in (cache / "models").iterdir()] == [folder.name]  # no temp folder
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name in ref} == ref


# ------------------------------------------------------------------------------ the domains
@pytest.mark.parametrize(("at", "after"), [(1, False), (2, True), (3, False)])
def test_domain_preparation_killed(tmp_path, monkeypatch, at, after):
    for d in DOMS:
        monkeypatch.setitem(dm._BUILDERS, d, _builder(d))
    monkeypatch.setattr(dm, "fetch_sources", lambda c: dm.Sources(*[tmp_path] * 6))
    dm.prepare_domains(tmp_path / "ref", DOMS, n_prompts=4)
    cache = tmp_path / "cache"
    status = _run_killed(lambda: dm.prepare_domains(cache, DOMS, n_prompts=4), at=at,
                         after=after)
    assert os.WTERMSIG(status) == signal.SIGKILL
    for d in DOMS:
        if dm._problem(cache / "domains" / d) is None:
            assert _tree(cache / "domains" / d) == _tree(tmp_path / "ref" / "domains" / d)
    dm.prepare_domains(cache, DOMS, n_prompts=4)
    assert _tree(cache) == _tree(tmp_path / "ref")
    assert temporaries(cache / "domains") == []
