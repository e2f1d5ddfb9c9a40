"""A tiny cache world for the fault tests: a target folder, three prepared domains and a pool
with every entry kind (answers, n-gram specialists and generalist, EAGLE heads, router), built
once as the reference that every damaged copy is compared with."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from spec_adapters.app import router as router_mod
from spec_adapters.app.pool.cache import _entries, build_pool, pool_dir
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.eagle.train_config import TrainConfig
from spec_adapters.hf.models import load_target
from spec_adapters.hf.target import output_vocab_size
from spec_adapters.store.pool_settings import NGramPoolSettings
from tests.spec_adapters.bench_fixtures import distill_answers, make_target_folder, write_domains

DOMS = ("code", "math", "news")


class KeywordEmbedder:
    """Stand-in for MiniLM: a deterministic 8-d embedding of a text's characters."""

    def __init__(self, *_a, **_k) -> None:
        pass

    def __call__(self, texts, batch_size: int = 32) -> np.ndarray:
        out = np.zeros((len(texts), 8))
        for i, t in enumerate(texts):
            for j, c in enumerate(t.encode()[:64]):
                out[i, (c + j) % 8] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def config(domains=DOMS, router: bool = True) -> PoolConfig:
    """A pool of every entry kind, tiny: n-grams with answers, EAGLE heads, the router."""
    head = TrainConfig(steps=2, batch_size=2, seq_len=16, draft_vocab_size=32, eval_every=2)
    return PoolConfig(NGramPoolSettings(domains, max_train_tokens=1500, distilled_tokens=6),
                      eagle=head, router=router)


class World:
    """``root/target`` (tiny model folder), ``root/cache`` (domains + the reference pool)."""

    def __init__(self, root: Path) -> None:
        torch.set_num_threads(1)
        self.root = root
        self.target = make_target_folder(root)
        self.cache = root / "cache"
        write_domains(self.cache, DOMS)
        self.model, self.tok = load_target(self.target)
        distill_answers(self.model, self.tok, self.cache, DOMS)
        self.cfg = config()
        build_pool(self.model, self.tok, self.cache, self.cfg, progress=False)
        self.folder = pool_dir(self.cache, self.model, self.tok)
        self.reference = {p.relative_to(self.folder).as_posix(): p.read_bytes()
                          for p in self.folder.rglob("*")
                          if p.is_file() and not p.name.startswith(".")}

    def copy(self, dest: Path) -> Path:
        """A copy of the built cache (new inodes: the fast path must re-hash); its pool folder."""
        shutil.copytree(self.cache, dest)
        return pool_dir(dest, self.model, self.tok)

    def entries(self, folder: Path) -> dict:
        return {e.name: e for e in _entries(self.cfg, folder, output_vocab_size(self.model))}


def patch_router(monkeypatch) -> None:
    monkeypatch.setattr(router_mod, "MiniLMEmbedder", KeywordEmbedder)


def world_fixture(name: str):
    """A module-scoped ``world`` fixture: a :class:`World` built in a fresh folder ``name``,
    the router's MiniLM replaced by :class:`KeywordEmbedder` while it is built (in a test
    module: ``world = world_fixture("pool-world")``)."""
    @pytest.fixture(scope="module")
    def world(tmp_path_factory):
        with pytest.MonkeyPatch.context() as mp:
            patch_router(mp)
            yield World(tmp_path_factory.mktemp(name))

    return world
