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
continuations of the longest suffix match" (He et al. 2024) in distributional form.

:class:`NGramDrafter` stores, per order ``n``, the sorted hashed contexts with the (token, count)
lists that follow them (CSR layout, numpy arrays), built by one sort per order: ~1 M tokens take
about a second. A lookup is a binary search per order plus work linear in the continuations
found (nothing of the vocabulary's size).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from spec_adapters.core.proposal import Base, Sparse, cat_rows
from spec_adapters.drafters.base import sample_draft

if TYPE_CHECKING:
    from spec_adapters.core.proposal import Proposal
    from spec_adapters.core.sampling import SamplingConfig

__all__ = ["NGramDrafter", "PromptLookupDrafter", "context_keys"]

_MASK64 = (1 << 64) - 1


def context_keys(tokens: np.ndarray, n: int, base: int) -> np.ndarray:
    """Hash every length-``n`` window ``tokens[i : i + n]`` to a uint64 key.

    ``key = sum_j tokens[i + j] * base ** (n - 1 - j)  (mod 2**64)``: exact (collision free)
    while ``base ** n < 2**64`` (e.g. ``n <= 4`` for a 50k vocabulary), a multiplicative hash
    beyond. Returns ``len(tokens) - n + 1`` keys.
    """
    t = np.asarray(tokens, dtype=np.uint64)
    m = len(t) - n + 1
    key = np.zeros(max(m, 0), dtype=np.uint64)
    b = np.uint64(base)
    with np.errstate(over="ignore"):
        for j in range(n):
            key = key * b + t[j:j + m]
    return key


def _key_of(context: Sequence[int], base: int) -> int:
    """The :func:`context_keys` hash of one context (same wrap-around arithmetic)."""
    k = 0
    for t in context:
        k = (k * base + int(t)) & _MASK64
    return k


def _mixture(base: Base, matches: Iterable[tuple[np.ndarray, np.ndarray]]
             ) -> tuple[Sparse, bool]:
    """The interpolated Witten-Bell recursion (see the module docstring) in closed form, in
    sparse form, computed in numpy over the support only.

    ``matches`` yields, for n = 1, 2, ... while the context is found, the tokens following the
    order-``n`` context and their counts ``c_n`` (a token may appear more than once: its counts
    add up), with ``C_n`` their total and ``T_n`` the number of distinct tokens. Unrolling the
    recursion from the longest matched order ``N`` down,

        P_N(x) = lam_N b(x) + sum_n mu_n c_n(x),   lam_n = prod_{i<=n} T_i / (C_i + T_i),
        mu_n = 1 / (C_n + T_n) * prod_{n<i<=N} T_i / (C_i + T_i),

    so the support is the union of the tokens seen and one pass adds every order's counts.
    Returns the one-row mixture and whether any order matched; cost ``O(S log S)`` for ``S``
    continuations in all, nothing of the vocabulary's size.
    """
    levels = list(matches)
    toks = np.concatenate([t for t, _ in levels]) if levels else np.zeros(0, np.int64)
    support, inv = np.unique(toks, return_inverse=True)
    lam, weights = 1.0, []
    for t, c in reversed(levels):  # the longest order first: mu_n needs the factors above it
        types = np.unique(t).size
        scale = float(c.sum()) + types
        weights.append(c * (lam / scale))
        lam *= types / scale
    w = np.concatenate(weights[::-1]) if levels else np.zeros(0)
    values = lam * base.array[support] + np.bincount(inv, weights=w, minlength=support.size)
    dtype = base.probs.dtype
    return Sparse(torch.from_numpy(support)[None], torch.from_numpy(values).to(dtype)[None],
                  torch.tensor([lam], dtype=dtype), base), bool(levels)


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
    ids = torch.as_tensor(ids).view(-1)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{what} has token ids outside [0, {vocab_size})")
    return [int(t) for t in ids.tolist()]


class _ContextCounts:
    """n-gram counts (n = 1..max_n) of the verified context, updated one token at a time, and
    the lookup of a trailing n-gram among them *and* among the pending drafts."""

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.counts: list[dict] = [defaultdict(lambda: defaultdict(int)) for _ in range(max_n)]

    def observe(self, context: list[int]) -> None:
        """``context[-1]`` was just appended: count it after each n-gram ending before it."""
        L = len(context) - 1
        token = context[-1]
        for n in range(1, min(self.max_n, L) + 1):
            self.counts[n - 1][tuple(context[L - n:L])][token] += 1

    def lookup(self, context: list[int], committed: int, n: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """Continuations of ``context[-n:]`` and their counts (int64, float64 arrays; empty
        when none): counted ones plus those whose next token is one of the drafts
        ``context[committed:]`` (so a draft can continue a copy)."""
        key = tuple(context[-n:])
        found = dict(self.counts[n - 1].get(key, {}))
        for end in range(max(committed, n), len(context)):
            if tuple(context[end - n:end]) == key:
                found[context[end]] = found.get(context[end], 0) + 1
        return (np.fromiter(found, np.int64, len(found)),
                np.fromiter(found.values(), np.float64, len(found)))


class _ContextDrafter:
    """Shared propose/extend on top of ``_matches(context)`` and a :class:`Base`."""

    name: str
    vocab_size: int
    abstain: bool
    _base: Base

    def __init__(self) -> None:
        self._context: list[int] | None = None

    def _matches(self, context: list[int]):  # pragma: no cover - abstract
        raise NotImplementedError

    def _observe(self, token: int) -> None:
        """Hook: a verified token was appended to the context."""

    def _predict(self, context: list[int]) -> Sparse | None:
        """The mixture after ``context``; ``None`` where the drafter abstains."""
        q, matched = _mixture(self._base, self._matches(context))
        return q if matched or not self.abstain else None

    def _require_started(self, verb: str) -> list[int]:
        if self._context is None:
            raise RuntimeError(f"{type(self).__name__}.{verb} called before start()")
        return self._context

    def start(self, prompt_ids: torch.LongTensor) -> None:
        """Reset to a new query whose verified context is the 1-D ``prompt_ids``."""
        if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 1 \
                or prompt_ids.numel() == 0:
            raise ValueError("prompt_ids must be a non-empty 1-D tensor")
        self._context = []
        for t in _check_ids(prompt_ids, self.vocab_size, "prompt_ids"):
            self._context.append(t)
            self._observe(t)

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None = None
                ) -> Proposal:
        """Draft up to ``k`` tokens, each sampled from the warped smoothed n-gram distribution
        given the context plus the drafts so far (stopping where the drafter abstains);
        nothing is committed.

        Returns tokens ``(j,)`` int64 and their warped rows ``q``: a point mass when greedy,
        the sparse mixture under temperature, dense rows under top-k / top-p.
        """
        context = self._require_started("propose")
        return sample_draft(k, sampling, generator,
                            lambda drafts: self._predict(context + drafts.tolist()),
                            self.vocab_size)

    def extend(self, tokens: torch.LongTensor) -> Sparse:
        """Append verified tokens; return the unwarped mixtures (``m`` rows), row ``j`` given
        the context plus ``tokens[:j]`` (a zero row where the drafter would have abstained)."""
        context = self._require_started("extend")
        rows = []
        for t in _check_ids(tokens, self.vocab_size, "tokens"):
            rows.append(self._predict(context) or Sparse.nothing(self._base))
            context.append(t)
            self._observe(t)
        return cat_rows(rows) if rows else Sparse.nothing(self._base, 0)


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
        self._ctx_counts: _ContextCounts | None = None
        unigram = np.asarray(unigram, dtype=np.float64)
        if unigram.shape != (vocab_size,):
            raise ValueError(f"unigram must have shape ({vocab_size},), got {unigram.shape}")
        self.vocab_size = int(vocab_size)
        self.name = name
        self.alpha = float(alpha)
        self.order = len(tables)
        self.base = self.vocab_size + 1  # one more than any id: the document separator
        self.tables = []
        for k, o, t, c in tables:
            o, t, c = np.asarray(o, np.int64), np.asarray(t, np.int64), np.asarray(c, np.float64)
            if max_continuations is not None:
                o, t, c = _prune(o, t, c, max_continuations)
            self.tables.append((np.asarray(k, np.uint64), o, t, c))
        u = unigram + self.alpha
        self._unigram = torch.as_tensor(u / u.sum(), dtype=torch.float32)
        self._base = Base(self._unigram)
        self.n_tokens = round(float(unigram.sum()))  # weighted

    def __repr__(self) -> str:
        return (f"NGramDrafter({self.name!r}, vocab_size={self.vocab_size}, order={self.order}, "
                f"tokens={self.n_tokens}, context_weight={self.context_weight}, "
                f"abstain={self.abstain}, max_continuations={self.max_continuations})")

    def start(self, prompt_ids: torch.LongTensor) -> None:
        self._ctx_counts = _ContextCounts(self.order) if self.context_weight > 0 else None
        super().start(prompt_ids)

    def _observe(self, token: int) -> None:
        if self._ctx_counts is not None:
            self._ctx_counts.observe(self._context)

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
    def _corpus_match(self, context: list[int], n: int):
        keys, offsets, toks, counts = self.tables[n - 1]
        key = np.uint64(_key_of(context[-n:], self.base))
        i = int(np.searchsorted(keys, key))
        if i == len(keys) or keys[i] != key:
            return None
        a, b = int(offsets[i]), int(offsets[i + 1])
        return toks[a:b], counts[a:b]

    def _matches(self, context: list[int]):
        # a longer context can only match where its suffix did: stop at the first miss
        own = self._ctx_counts if self._context is not None else None
        corpus_alive, own_alive = True, own is not None
        for n in range(1, min(self.order, len(context)) + 1):
            hit = self._corpus_match(context, n) if corpus_alive else None
            found = own.lookup(context, len(self._context), n) if own_alive else None
            corpus_alive, own_alive = hit is not None, found is not None and found[0].size > 0
            if not own_alive:
                if not corpus_alive:
                    return
                yield hit
            elif not corpus_alive:
                yield found[0], self.context_weight * found[1]
            else:
                yield (np.concatenate([hit[0], found[0]]),
                       np.concatenate([hit[1], self.context_weight * found[1]]))

    def log_probs(self, context: Sequence[int]) -> torch.Tensor:
        """Smoothed next-token log-probabilities (V,) after ``context`` (dense: a reference;
        the decoders never build it), from the corpus alone (the query's own n-grams, when
        ``context_weight > 0``, enter only via the Drafter verbs)."""
        saved, self._context = self._context, None
        try:
            q, _ = _mixture(self._base, self._matches([int(t) for t in context]))
        finally:
            self._context = saved
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
        self.max_ngram = int(max_ngram)
        self.name = name
        self._counts: _ContextCounts | None = None

    def __repr__(self) -> str:
        return (f"PromptLookupDrafter(vocab_size={self.vocab_size}, max_ngram={self.max_ngram}, "
                f"abstain={self.abstain})")

    def start(self, prompt_ids: torch.LongTensor) -> None:
        self._counts = _ContextCounts(self.max_ngram)
        super().start(prompt_ids)

    def _observe(self, token: int) -> None:
        self._counts.observe(self._context)

    def _matches(self, context: list[int]):
        for n in range(1, min(self.max_ngram, len(context)) + 1):
            found = self._counts.lookup(context, len(self._context), n)
            if not found[0].size:
                return
            yield found
