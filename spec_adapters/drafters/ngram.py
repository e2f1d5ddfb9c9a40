"""Training-free drafters: a corpus n-gram (REST-style retrieval) model and prompt lookup.

Both implement the :class:`~spec_adapters.drafters.Drafter` protocol with *proper* next-token
distributions over the full target vocabulary, so the same acceptance and gamma code serves
them and model drafters alike. A distribution is never built densely: it is a
:class:`~spec_adapters.core.proposal.Sparse` mixture (the matched continuations, plus ``lam``
times the base off them), which greedy decoding turns into a point mass at its argmax and
temperature keeps sparse in closed form (see :func:`~spec_adapters.core.proposal.warp`).
``log_probs`` gives the dense log-probabilities (a reference).

Abstention (``abstain=True``, the default of :class:`PromptLookupDrafter`, as transformers'
prompt lookup): where the context matches at no order, the drafter proposes nothing (its
draft stops there) and its prediction in ``extend`` is the zero measure, so counterfactual
evaluation gives it ``gamma = rho = 0`` there, as it would not have drafted.

Smoothing (both drafters): interpolated Witten-Bell backoff (Witten & Bell 1991; Chen &
Goodman 1998, eq. 16). With ``c(h, x)`` the count of ``x`` after context ``h`` (the last ``n``
tokens), ``C(h) = sum_x c(h, x)`` and ``T(h)`` the number of distinct ``x`` seen after ``h``:

    P_n(x | h_n) = (c(h_n, x) + T(h_n) P_{n-1}(x | h_{n-1})) / (C(h_n) + T(h_n)),

and ``P_n = P_{n-1}`` for an unseen context. The recursion bottoms out in a base distribution
with full support (add-``alpha`` unigram for :class:`NGramDrafter`, uniform for
:class:`PromptLookupDrafter`), so every token has nonzero mass and sampling at temperature > 0
can propose anything. The longest matched context dominates, which is REST's "retrieve the
continuations of the longest suffix match" (He et al. 2024) in distributional form. Unrolled
from the longest matched order ``N`` down, the recursion is a sparse mixture:

    P_N(x) = lam_N b(x) + sum_n mu_n c_n(x),   lam_N = prod_{i<=N} T_i / (C_i + T_i),
    mu_n = 1 / (C_n + T_n) * prod_{n<i<=N} T_i / (C_i + T_i),

whose support is the union of the tokens seen at the matched orders. Order ``n`` counts while
its context is found (each source, the corpus and the query's own tokens, stops at its first
miss: a longer context only occurs where its suffix does).

:class:`NGramDrafter` stores, per order ``n``, the sorted hashed contexts with the (token, count)
lists that follow them (CSR layout, numpy arrays), built by one sort per order: ~1 M tokens take
about a second. A prediction is a binary search per order, a scan of the query's tokens (with
``context_weight``) and work linear in the continuations found, nothing of the vocabulary's
size; both drafters run it compiled (:mod:`spec_adapters.drafters.ngram_kernel`), one call per
``extend`` and, greedy, one per ``propose``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from spec_adapters.core.proposal import Base, PointMass, Proposal, Sparse
from spec_adapters.drafters.base import check_k, sample_draft
from spec_adapters.drafters.ngram_kernel import (
    NGramTables,
    context_keys,
    greedy_draft,
    warm_up,
    witten_bell_rows,
)

if TYPE_CHECKING:
    from spec_adapters.core.sampling import SamplingConfig

__all__ = ["NGramDrafter", "PromptLookupDrafter"]


def _prune(offsets: np.ndarray, toks: np.ndarray, counts: np.ndarray, keep: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One order's CSR table with each context's ``keep`` most frequent continuations (ties:
    the lowest id), still in token order within a context."""
    sizes = np.diff(offsets)
    if sizes.max(initial=0) <= keep:
        return offsets, toks, counts
    row = np.repeat(np.arange(sizes.size), sizes)
    by_count = np.lexsort((toks, -counts, row))  # per context: most frequent first
    rank = np.arange(toks.size) - offsets[row[by_count]]
    kept = np.sort(by_count[rank < keep])
    return np.append(0, np.cumsum(np.minimum(sizes, keep))), toks[kept], counts[kept]


def _check_ids(ids: torch.Tensor, vocab_size: int, what: str) -> list[int]:
    ids = torch.as_tensor(ids)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{what} must hold integer token ids, got dtype {ids.dtype}")
    out = ids.view(-1).tolist()
    if out and (min(out) < 0 or max(out) >= vocab_size):
        raise ValueError(f"{what} has token ids outside [0, {vocab_size})")
    return out


@functools.cache
def _work_arrays(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's work arrays for a vocabulary (shared: it leaves them as it found them)."""
    return np.zeros(vocab_size), np.zeros(vocab_size + 1, np.int64)


class _ContextDrafter:
    """Shared state and verbs of the context drafters: the query's tokens in a growing buffer,
    every prediction a call of the compiled :func:`witten_bell_rows` over it."""

    name: str
    vocab_size: int
    abstain: bool
    order: int
    _base: Base
    _tables: NGramTables
    _own_weight: float

    def __init__(self) -> None:
        self._buf: np.ndarray | None = None  # tokens [0, _n) verified, drafts after them
        self._n = 0
        self._work: tuple | None = None  # extend_argmax's output arrays, grown when too small
        warm_up()  # compiled now, not within the first query's timed rounds

    def _model(self, own_weight: float | None = None) -> tuple:
        """The kernels' arguments that describe this drafter (after the context ones)."""
        tb = self._tables
        return (self.order, np.uint64(self.vocab_size + 1), tb.keys, tb.key_at, tb.lo, tb.hi,
                tb.toks, tb.counts, tb.totals,
                self._own_weight if own_weight is None else own_weight, self.abstain,
                self._base.numpy, self._base.top, *_work_arrays(self.vocab_size))

    def _width(self, length: int) -> int:
        """An upper bound on the entries of a row after ``length`` tokens."""
        return max(1, self.order * (self._tables.widest + length))

    def _rows(self, ends: np.ndarray, own_weight: float | None = None) -> Sparse:
        """The unwarped mixtures after ``_buf[:e]`` for each ``e`` in ``ends``."""
        m, cap = len(ends), self._width(int(ends.max(initial=0)))
        tok = np.full((m, cap), -1, np.int64)
        val, lam = np.zeros((m, cap)), np.zeros(m)
        n, top = np.zeros(m, np.int64), np.zeros(m, np.int64)
        witten_bell_rows(self._buf, ends, *self._model(own_weight), tok, val, n, lam, top)
        width = int(n.max(initial=0))
        return Sparse.from_arrays(tok[:, :width], val[:, :width], lam, top, self._base)

    def _require_started(self, verb: str) -> int:
        if self._buf is None:
            raise RuntimeError(f"{type(self).__name__}.{verb} called before start()")
        return self._n

    def _reserve(self, size: int) -> None:
        if size > len(self._buf):
            grown = np.zeros(max(size, 2 * len(self._buf)), np.int64)
            grown[:self._n] = self._buf[:self._n]
            self._buf = grown

    def start(self, prompt_ids: torch.LongTensor) -> None:
        """Reset to a new query whose verified context is the 1-D ``prompt_ids``."""
        if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 1 \
                or prompt_ids.numel() == 0:
            raise ValueError("prompt_ids must be a non-empty 1-D tensor")
        ids = _check_ids(prompt_ids, self.vocab_size, "prompt_ids")
        self._buf = np.zeros(2 * len(ids) + 64, np.int64)
        self._buf[:len(ids)] = ids
        self._n = len(ids)

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None = None
                ) -> Proposal:
        """Draft up to ``k`` tokens, each sampled from the warped smoothed n-gram distribution
        given the context plus the drafts so far (stopping where the drafter abstains);
        nothing is committed.

        Returns tokens ``(j,)`` int64 and their warped rows ``q``: a point mass when greedy,
        the sparse mixture under temperature, dense rows under top-k / top-p.
        """
        n = self._require_started("propose")
        check_k(k)
        self._reserve(n + k)
        if sampling.greedy:  # each token the argmax: the whole draft in one compiled call
            cap = self._width(n + k)
            j = greedy_draft(self._buf, n, k, *self._model(), np.full((1, cap), -1, np.int64),
                             np.zeros((1, cap)))
            tokens = torch.from_numpy(self._buf[n:n + j].copy())
            return Proposal(tokens, PointMass(tokens, self.vocab_size))

        def predict_after(drafts: torch.LongTensor) -> Sparse | None:
            j = drafts.numel()
            if j:
                self._buf[n + j - 1] = int(drafts[-1])  # past the verified tokens: uncommitted
            q = self._rows(np.array([n + j]))
            return None if q._top[0] < 0 else q

        return sample_draft(k, sampling, generator, predict_after, self.vocab_size)

    def extend(self, tokens: torch.LongTensor) -> Sparse:
        """Append verified tokens; return the unwarped mixtures (``m`` rows), row ``j`` given
        the context plus ``tokens[:j]`` (a zero row where the drafter would have abstained)."""
        return self._rows(self._append(_check_ids(tokens, self.vocab_size, "tokens")))

    def extend_argmax(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`extend`, returning only each row's argmax (``-1`` where the drafter abstains):
        what greedy evaluation reads, without building the rows' arrays and tensors."""
        ends = self._append(_check_ids(tokens, self.vocab_size, "tokens"))
        m, cap = len(ends), self._width(int(ends.max(initial=0)))
        if self._work is None or self._work[0].shape[1] < cap or len(self._work[2]) < m:
            self._work = (np.full((max(m, 8), 2 * cap), -1, np.int64),
                          np.zeros((max(m, 8), 2 * cap)), np.zeros(max(m, 8), np.int64),
                          np.zeros(max(m, 8)), np.zeros(max(m, 8), np.int64))
        tok, val, n, lam, top = self._work
        witten_bell_rows(self._buf, ends, *self._model(), tok, val, n, lam, top)
        return top[:m].copy()

    def _append(self, ids: list[int]) -> np.ndarray:
        """Commit verified ``ids``; the context lengths ``n .. n + m - 1`` that predicted them."""
        n = self._require_started("extend")
        self._reserve(n + len(ids))
        self._buf[n:n + len(ids)] = ids
        self._n = n + len(ids)
        return np.arange(n, n + len(ids))


class NGramDrafter(_ContextDrafter):
    """A corpus n-gram drafter (REST-style retrieval with Witten-Bell smoothing).

    Build with :meth:`from_corpus` (token ids) or :meth:`from_texts` (a tokenizer); persist with
    :meth:`save` / :meth:`load` (one ``.npz``).

    Parameters
    ----------
    vocab_size : int
        The target's vocabulary size ``V`` (number of logits).
    tables : list of (keys, offsets, next_tokens, counts)
        Per order ``n = 1..order``: sorted unique context keys (uint64, ``(U,)``), CSR offsets
        ``(U + 1,)`` into the int64 ``next_tokens`` and ``counts`` arrays.
    unigram : np.ndarray
        Counts ``(V,)`` of every token in the corpus.
    alpha : float
        Add-``alpha`` smoothing of the unigram base (every token gets mass).
    name : str
    context_weight : float, default 0
        When > 0, the n-grams of the current query's own context (and pending drafts) are
        counted too, each occurrence weighing ``context_weight`` corpus occurrences: REST's
        datastore and prompt lookup in one distribution. 0 is pure corpus retrieval.
    abstain : bool, default False
        Propose nothing where the context matches at no order (instead of drafting from the
        bare unigram base); see the module docstring.
    max_continuations : int or None, default 32
        Each stored context keeps its ``max_continuations`` most frequent continuations (ties:
        the lowest id); the model is Witten-Bell on those counts. A lookup then costs
        ``O(order * max_continuations)`` however large the corpus (a common token has
        thousands of continuations at order 1, each a sliver of mass). ``None`` keeps all.
    """

    def __init__(self, vocab_size: int, tables, unigram: np.ndarray, alpha: float = 0.1,
                 name: str = "ngram", context_weight: float = 0.0, abstain: bool = False,
                 max_continuations: int | None = 32) -> None:
        super().__init__()
        self.abstain = bool(abstain)
        if vocab_size < 1 or alpha <= 0 or context_weight < 0:
            raise ValueError("need vocab_size >= 1, alpha > 0 and context_weight >= 0")
        if max_continuations is not None and max_continuations < 1:
            raise ValueError(f"max_continuations must be >= 1 or None, got {max_continuations}")
        self.max_continuations = max_continuations
        self.context_weight = float(context_weight)
        unigram = np.asarray(unigram, dtype=np.float64)
        if unigram.shape != (vocab_size,):
            raise ValueError(f"unigram must have shape ({vocab_size},), got {unigram.shape}")
        self.vocab_size = int(vocab_size)
        self.name = name
        self.alpha = float(alpha)
        self.order = len(tables)
        self.base = self.vocab_size + 1  # one more than any id: the document separator
        kept = []
        for k, o, t, c in tables:
            o, t, c = np.asarray(o, np.int64), np.asarray(t, np.int64), np.asarray(c, np.float64)
            if max_continuations is not None:
                o, t, c = _prune(o, t, c, max_continuations)
            kept.append((np.asarray(k, np.uint64), o, t, c))
        self._tables = NGramTables.of(kept, self.order)
        self._own_weight = self.context_weight
        u = unigram + self.alpha
        self._unigram = torch.as_tensor(u / u.sum(), dtype=torch.float32)
        self._base = Base(self._unigram)
        self.n_tokens = round(float(unigram.sum()))  # weighted

    def __repr__(self) -> str:
        return (f"NGramDrafter({self.name!r}, vocab_size={self.vocab_size}, order={self.order}, "
                f"tokens={self.n_tokens}, context_weight={self.context_weight}, "
                f"abstain={self.abstain}, max_continuations={self.max_continuations})")

    @property
    def tables(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Per order ``n = 1..order``: ``(keys, offsets, next_tokens, counts)`` as kept (see
        the class's ``tables``)."""
        return [self._tables.order_table(n) for n in range(1, self.order + 1)]

    # ---------------------------------------------------------------- building
    @classmethod
    def from_corpus(cls, documents: Sequence[Sequence[int]] | np.ndarray, vocab_size: int, *,
                    order: int = 4, alpha: float = 0.1, name: str = "ngram",
                    context_weight: float = 0.0, weights: Sequence[float] | None = None,
                    abstain: bool = False, max_continuations: int | None = 32
                    ) -> NGramDrafter:
        """Count every n-gram (n = 1..order contexts) of a tokenised corpus.

        Parameters
        ----------
        documents : sequence of token-id sequences, or one 1-D array
            N-grams never cross a document boundary.
        vocab_size : int
        order : int
            Longest context length used (>= 1).
        alpha, name, context_weight, abstain, max_continuations
            See the class.
        weights : sequence of float, optional
            One weight > 0 per document: each of its n-grams counts ``weight`` times (e.g. the
            target's own answers weighted above a raw corpus). Default 1.

        Complexity: one ``O(L log L)`` sort per order for ``L`` corpus tokens.
        """
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        if isinstance(documents, np.ndarray) and documents.ndim == 1:
            documents = [documents]
        documents = list(documents)
        if weights is None:
            weights = [1.0] * len(documents)
        weights = [float(w) for w in weights]
        if len(weights) != len(documents) or any(not w > 0 for w in weights):
            raise ValueError("weights must hold one positive number per document")
        sep = vocab_size
        parts, wparts = [], []
        for doc, w in zip(documents, weights, strict=True):
            d = np.asarray(doc, dtype=np.int64).reshape(-1)
            if d.size and (d.min() < 0 or d.max() >= vocab_size):
                raise ValueError(f"corpus has token ids outside [0, {vocab_size})")
            parts += [d, np.array([sep], np.int64)]
            wparts.append(np.full(d.size + 1, w))
        flat = np.concatenate(parts) if parts else np.array([sep], np.int64)
        wflat = np.concatenate(wparts) if wparts else np.ones(1)  # weight of each position
        unigram = np.bincount(flat[flat != sep], weights=wflat[flat != sep],
                              minlength=vocab_size)
        is_sep = (flat == sep).astype(np.int64)
        seps_before = np.concatenate([[0], np.cumsum(is_sep)])  # seps in flat[:i]
        tables = []
        for n in range(1, order + 1):
            keys = context_keys(flat, n, vocab_size + 1)[:-1]  # windows followed by a token
            nxt = flat[n:]
            starts = np.arange(len(nxt))
            ok = (seps_before[starts + n + 1] - seps_before[starts]) == 0  # no sep in window
            keys, nxt, w = keys[ok], nxt[ok], wflat[n:][ok]
            order_idx = np.lexsort((nxt, keys))
            keys, nxt, w = keys[order_idx], nxt[order_idx], w[order_idx]
            new_pair = np.ones(len(keys), bool)
            new_pair[1:] = (keys[1:] != keys[:-1]) | (nxt[1:] != nxt[:-1])
            pair_at = np.flatnonzero(new_pair)
            counts = np.add.reduceat(w, pair_at) if len(w) else np.zeros(0)
            pkeys, ptoks = keys[pair_at], nxt[pair_at]
            new_ctx = np.ones(len(pkeys), bool)
            new_ctx[1:] = pkeys[1:] != pkeys[:-1]
            ctx_at = np.flatnonzero(new_ctx)
            offsets = np.append(ctx_at, len(pkeys))
            tables.append((pkeys[ctx_at], offsets, ptoks, counts))
        return cls(vocab_size, tables, unigram, alpha=alpha, name=name,
                   context_weight=context_weight, abstain=abstain,
                   max_continuations=max_continuations)

    @classmethod
    def from_texts(cls, texts: Iterable[str], tokenizer, *, vocab_size: int | None = None,
                   **kwargs) -> NGramDrafter:
        """Tokenise ``texts`` (one document each, no special tokens) and call
        :meth:`from_corpus`. ``vocab_size`` defaults to ``len(tokenizer)``; pass the target's
        number of logits when it differs."""
        texts = list(texts)
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        return cls.from_corpus(ids, vocab_size or len(tokenizer), **kwargs)

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write one ``.npz`` (atomically: a temporary file renamed into place)."""
        path = Path(path)
        arrays = {"unigram": self._unigram.numpy(), "meta": np.array(json.dumps({
            "vocab_size": self.vocab_size, "order": self.order, "alpha": self.alpha,
            "name": self.name, "n_tokens": self.n_tokens, "format": 1,
            "context_weight": self.context_weight,
            "max_continuations": self.max_continuations}))}
        for n, (k, o, t, c) in enumerate(self.tables, start=1):
            arrays |= {f"keys{n}": k, f"offsets{n}": o, f"tokens{n}": t,
                       f"counts{n}": c.astype(np.float32)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, max_continuations: int | None = 32) -> NGramDrafter:
        """Read a file written by :meth:`save` (``ValueError`` when it is not one), keeping
        ``max_continuations`` per context (see the class; a file saved with fewer keeps
        its own)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                tables = [(z[f"keys{n}"], z[f"offsets{n}"], z[f"tokens{n}"], z[f"counts{n}"])
                          for n in range(1, meta["order"] + 1)]
                unigram_p = z["unigram"].astype(np.float64)
        except (OSError, KeyError, ValueError) as err:
            raise ValueError(f"{path} is not a saved NGramDrafter: {err}") from err
        obj = cls(meta["vocab_size"], tables, np.ones(meta["vocab_size"]), alpha=meta["alpha"],
                  name=meta["name"], context_weight=meta.get("context_weight", 0.0),
                  max_continuations=max_continuations)
        obj._unigram = torch.as_tensor(unigram_p, dtype=torch.float32)
        obj._base = Base(obj._unigram)
        obj.n_tokens = int(meta["n_tokens"])
        return obj

    # ---------------------------------------------------------------- the model
    def log_probs(self, context: Sequence[int]) -> torch.Tensor:
        """Smoothed next-token log-probabilities (V,) after ``context`` (dense: a reference;
        the decoders never build it), from the corpus alone (the query's own n-grams, when
        ``context_weight > 0``, enter only via the Drafter verbs)."""
        ids = [int(t) for t in context]
        if any(not 0 <= t < self.vocab_size for t in ids):
            raise ValueError(f"context has token ids outside [0, {self.vocab_size})")
        saved, self._buf = self._buf, np.array(ids, np.int64)
        try:
            q = self._rows(np.array([len(ids)]), own_weight=0.0)
        finally:
            self._buf = saved
        return q.dense()[0].log()


class PromptLookupDrafter(_ContextDrafter):
    """Prompt lookup decoding (Saxena 2023) as a distribution: an n-gram model of the current
    context itself.

    The trailing ``n``-gram (``n = 1..max_ngram``) of the verified context plus drafts is
    looked up among its earlier occurrences in the same context; the tokens that followed them
    are counted, and the counts are smoothed by the Witten-Bell recursion over a uniform base.
    Greedy drafting therefore copies the most frequent continuation of the longest repeated
    suffix, as prompt lookup does; with no match it abstains (proposes nothing), or, with
    ``abstain=False``, its distribution is uniform.

    Parameters
    ----------
    vocab_size : int
    max_ngram : int, default 3
    name : str, default "prompt-lookup"
    abstain : bool, default True
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3, name: str = "prompt-lookup",
                 abstain: bool = True) -> None:
        super().__init__()
        if vocab_size < 1 or max_ngram < 1:
            raise ValueError("vocab_size and max_ngram must be >= 1")
        self.abstain = bool(abstain)
        self.vocab_size = int(vocab_size)
        self._base = Base(torch.full((self.vocab_size,), 1.0 / self.vocab_size))
        self.max_ngram = self.order = int(max_ngram)
        self.name = name
        self._tables = NGramTables.of([], self.order)
        self._own_weight = 1.0

    def __repr__(self) -> str:
        return (f"PromptLookupDrafter(vocab_size={self.vocab_size}, max_ngram={self.max_ngram}, "
                f"abstain={self.abstain})")
