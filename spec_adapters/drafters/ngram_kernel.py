"""The n-gram drafters' inner loop, compiled (numba): Witten-Bell rows and their argmax.

:class:`~spec_adapters.drafters.ngram.NGramDrafter` and
:class:`~spec_adapters.drafters.ngram.PromptLookupDrafter` spend a round predicting the next
token at a few positions of one context: per position, a binary search per order in the
corpus tables, a scan of the query's own tokens for earlier occurrences of its last ``n``
tokens, and the interpolated mixture over the union of what followed. In Python or numpy each
of these small steps costs microseconds of interpreter and call overhead, and tens of them
after a target forward has flushed the caches; compiled, a whole round of a drafter is one
call (vLLM's own n-gram proposer is numba-compiled for the same reason).

:func:`witten_bell_rows` is the model of :mod:`spec_adapters.drafters.ngram` (its docstring
has the recursion); each row's argmax is :func:`sparse_argmax`,
:meth:`~spec_adapters.core.proposal.Sparse.argmax` on the values as the tensors hold them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["NGramTables", "context_keys", "greedy_draft", "longest_match_draft", "sparse_argmax",
           "warm_up", "witten_bell_rows"]


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


class NGramTables(NamedTuple):
    """Corpus tables, orders concatenated (the layout :func:`witten_bell_rows` reads): order
    ``n``'s sorted keys are ``keys[key_at[n-1]:key_at[n]]``, context ``i`` is followed by
    ``toks[lo[i]:hi[i]]`` with ``counts``, ``totals[i]`` their sum; ``widest`` is the longest
    such row."""

    keys: np.ndarray
    key_at: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    toks: np.ndarray
    counts: np.ndarray
    totals: np.ndarray
    widest: int

    @classmethod
    def of(cls, tables: Sequence[tuple], order: int) -> NGramTables:
        """From per-order ``(keys, offsets, tokens, counts)`` (CSR; none: no corpus)."""
        keys, lo, hi, toks, counts, key_at, base = [], [], [], [], [], [0], 0
        for k, o, t, c in tables:
            keys.append(k)
            lo.append(o[:-1] + base)
            hi.append(o[1:] + base)
            toks.append(t)
            counts.append(c)
            key_at.append(key_at[-1] + k.size)
            base += t.size
        key_at += [key_at[-1]] * (order + 1 - len(key_at))

        def cat(parts, dtype):
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        lo, hi, counts = cat(lo, np.int64), cat(hi, np.int64), cat(counts, np.float64)
        totals = np.add.reduceat(counts, lo) if lo.size else np.zeros(0)
        return cls(cat(keys, np.uint64), np.array(key_at, np.int64), lo, hi,
                   cat(toks, np.int64), counts, totals, int((hi - lo).max(initial=0)))

    def order_table(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Order ``n``'s ``(keys, offsets, tokens, counts)`` (CSR, as :meth:`of` takes)."""
        a, b = self.key_at[n - 1], self.key_at[n]
        start, end = (self.lo[a], self.hi[b - 1]) if b > a else (0, 0)
        offsets = np.append(self.lo[a:b], end) - start
        return self.keys[a:b], offsets, self.toks[start:end], self.counts[start:end]


@njit(cache=True)
def sparse_argmax(tokens: np.ndarray, values: np.ndarray, lam: float, base: np.ndarray,
                  top: int) -> int:
    """:meth:`Sparse.argmax` of one row in compiled code (numba), on the values as a float32
    tensor holds them: the best support token (``tokens`` increasing, so a tie keeps the
    lowest id) against the float32 ``base``'s top token ``top`` weighted by ``lam``; -1 for
    the zero row (no tokens, ``lam = 0``)."""
    best_t, best_v = -1, np.float32(-1.0)
    for s in range(tokens.size):
        v = np.float32(values[s])
        if v > best_v:
            best_t, best_v = tokens[s], v
    off = np.float32(lam) * base[top]  # float32 times float32, as the tensors compute it
    if off > best_v or (off == best_v and top < best_t):
        best_t = top
    if lam == 0.0 and tokens.size == 0:
        return -1
    return best_t


@njit(cache=True)
def _find(keys: np.ndarray, lo: int, hi: int, key: np.uint64) -> int:
    """Index of ``key`` in the sorted ``keys[lo:hi]``, or -1 (never past ``hi``: the next
    order's keys follow, and a key of another length can equal this one)."""
    end = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < end and keys[lo] == key else -1


@njit(cache=True)
def _same_window(ctx: np.ndarray, a: int, b: int, n: int) -> bool:
    """``ctx[a:a+n] == ctx[b:b+n]``, the last token first (it rarely matches)."""
    for j in range(n - 1, -1, -1):  # noqa: SIM110 - numba compiles loops, not generators
        if ctx[a + j] != ctx[b + j]:
            return False
    return True


@njit(cache=True)
def witten_bell_rows(ctx: np.ndarray, ends: np.ndarray, order: int, hash_base: np.uint64,
                     keys: np.ndarray, key_at: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     toks: np.ndarray, counts: np.ndarray, totals: np.ndarray,
                     own_weight: float, abstain: bool, base: np.ndarray, top: int,
                     scratch: np.ndarray, stamp: np.ndarray, out_tok: np.ndarray,
                     out_val: np.ndarray, out_n: np.ndarray, out_lam: np.ndarray,
                     out_top: np.ndarray) -> None:
    """Witten-Bell rows of one drafter after ``ctx[:ends[r]]``, for every ``r``.

    Parameters
    ----------
    ctx : int64 array
        The context (prompt, verified tokens, and drafts when proposing).
    ends : int64 array
        ``m`` context lengths to predict after.
    order : int
        Longest context length ``n`` used.
    hash_base : uint64
        ``V + 1``: order-``n`` contexts hash to ``sum_j t_j base^(n-1-j)`` (mod 2^64).
    keys, key_at, lo, hi, toks, counts, totals
        The corpus tables, orders concatenated: order ``n``'s sorted keys are
        ``keys[key_at[n-1]:key_at[n]]``; context ``i`` is followed by ``toks[lo[i]:hi[i]]``
        with ``counts``, their sum ``totals[i]``. Empty tables: no corpus.
    own_weight : float
        Weight of one occurrence in ``ctx`` itself (0: the corpus alone).
    abstain : bool
        A position matched at no order is the zero row (else the base alone).
    base, top
        The float32 base distribution and its top token.
    scratch, stamp
        Work arrays: ``V`` float64 zeros (left as found) and ``V + 1`` int64 stamps (the last
        one the running stamp).
    out_tok, out_val, out_n, out_lam, out_top
        Per row: support (sorted, first ``out_n[r]`` entries of ``(m, S)``), values (float64,
        the base term included), ``lam`` and argmax (:func:`sparse_argmax`).

    The levels follow the module docstring of :mod:`spec_adapters.drafters.ngram`: order
    ``n`` counts while its context is found in the corpus or in ``ctx`` (each source stops at
    its first miss), the longest order's factors weigh the shorter ones.
    """
    cap = out_tok.shape[1]  # >= every row's entries: order * (longest stored row + len(ctx))
    lvl_tok = np.empty(cap, np.int64)
    lvl_cnt = np.empty(cap, np.float64)
    lvl_start = np.zeros(order + 1, np.int64)
    lvl_T = np.zeros(order, np.float64)
    lvl_C = np.zeros(order, np.float64)
    tick = stamp[-1]  # the last entry keeps the running stamp
    for r in range(ends.size):
        E = ends[r]
        key = np.uint64(0)
        power = np.uint64(1)
        corpus_alive = keys.size > 0
        own_alive = own_weight > 0
        levels = 0
        for n in range(1, min(order, E) + 1):
            key = key + np.uint64(ctx[E - n]) * power
            power = power * hash_base
            at = -1
            if corpus_alive:
                at = _find(keys, key_at[n - 1], key_at[n], key)
                corpus_alive = at >= 0
            w = lvl_start[levels]
            distinct, total, own_found = 0, 0.0, False
            tick += 1
            if corpus_alive:
                for s in range(lo[at], hi[at]):
                    lvl_tok[w] = toks[s]
                    lvl_cnt[w] = counts[s]
                    stamp[toks[s]] = tick
                    w += 1
                distinct += hi[at] - lo[at]
                total += totals[at]
            if own_alive:
                for i in range(n, E):  # earlier windows ctx[i-n:i] equal to the last n tokens
                    if _same_window(ctx, i - n, E - n, n):
                        t = ctx[i]
                        lvl_tok[w] = t
                        lvl_cnt[w] = own_weight
                        w += 1
                        total += own_weight
                        own_found = True
                        if stamp[t] != tick:
                            stamp[t] = tick
                            distinct += 1
                own_alive = own_found
            if not corpus_alive and not own_alive:
                break
            lvl_T[levels], lvl_C[levels] = distinct, total
            levels += 1
            lvl_start[levels] = w
        # the mixture: the longest order first (mu_n needs the factors above it)
        factor, S = 1.0, 0
        tick += 1
        for lv in range(levels - 1, -1, -1):
            scale = lvl_C[lv] + lvl_T[lv]
            w = factor / scale
            for s in range(lvl_start[lv], lvl_start[lv + 1]):
                t = lvl_tok[s]
                if stamp[t] != tick:
                    stamp[t] = tick
                    out_tok[r, S] = t
                    S += 1
                scratch[t] += lvl_cnt[s] * w
            factor *= lvl_T[lv] / scale
        lam = 0.0 if (abstain and levels == 0) else factor
        row = np.sort(out_tok[r, :S])
        for s in range(S):
            t = row[s]
            out_tok[r, s] = t
            out_val[r, s] = lam * base[t] + scratch[t]
            scratch[t] = 0.0
        out_n[r] = S
        out_lam[r] = lam
        out_top[r] = sparse_argmax(row, out_val[r, :S], lam, base, top)
    stamp[-1] = tick


@njit(cache=True)
def greedy_draft(ctx: np.ndarray, n: int, k: int, order: int, hash_base: np.uint64,
                 keys: np.ndarray, key_at: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 toks: np.ndarray, counts: np.ndarray, totals: np.ndarray, own_weight: float,
                 abstain: bool, base: np.ndarray, top: int, scratch: np.ndarray,
                 stamp: np.ndarray, out_tok: np.ndarray, out_val: np.ndarray) -> int:
    """Greedy drafting in one call: up to ``k`` tokens, each the argmax of the row after
    ``ctx[:n + j]`` (:func:`witten_bell_rows`), written to ``ctx[n:n + j]``; stops where the
    drafter abstains. Returns the number drafted. ``ctx`` needs room for ``n + k`` tokens;
    ``out_tok`` / ``out_val`` are one row of work space as wide as the widest row."""
    ends = np.empty(1, np.int64)
    out_n = np.empty(1, np.int64)
    out_lam = np.empty(1, np.float64)
    out_top = np.empty(1, np.int64)
    for j in range(k):
        ends[0] = n + j
        witten_bell_rows(ctx, ends, order, hash_base, keys, key_at, lo, hi, toks, counts,
                         totals, own_weight, abstain, base, top, scratch, stamp, out_tok,
                         out_val, out_n, out_lam, out_top)
        if out_top[0] < 0:
            return j
        ctx[n + j] = out_top[0]
    return k


@njit(cache=True)
def longest_match_draft(ctx: np.ndarray, n0: int, k: int, order: int, hash_base: np.uint64,
                        keys: np.ndarray, key_at: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                        toks: np.ndarray, counts: np.ndarray, own_weight: float,
                        scratch: np.ndarray, touched: np.ndarray, confidence: np.ndarray) -> int:
    """The vLLM proposer's n-gram rule, compiled: up to ``k`` tokens after ``ctx[:n0]``, each
    the most frequent continuation (lowest id on ties) at the longest order ``n`` whose last
    ``n`` tokens occur in the corpus or earlier in the context (the corpus counts plus
    ``own_weight`` per earlier occurrence), written to ``ctx[n0:]``; stops where no order
    matches. ``confidence[j]`` gets the drafted token's share of the counts it was chosen from
    (the count ratio). Returns the number drafted. ``scratch`` is ``V`` float64 zeros (left as
    found), ``touched`` int64 work space of ``widest row + len(ctx)`` entries."""
    for j in range(k):
        L = n0 + j
        drafted = False
        for n in range(min(order, L), 0, -1):
            key = np.uint64(0)
            for i in range(n):
                key = key * hash_base + np.uint64(ctx[L - n + i])
            at = _find(keys, key_at[n - 1], key_at[n], key) if keys.size > 0 else -1
            m = 0
            if at >= 0:
                for s in range(lo[at], hi[at]):
                    if scratch[toks[s]] == 0.0:
                        touched[m] = toks[s]
                        m += 1
                    scratch[toks[s]] += counts[s]
            if own_weight > 0:
                for s in range(L - n):  # earlier windows ctx[s:s+n] equal to the last n tokens
                    if _same_window(ctx, s, L - n, n):
                        t = ctx[s + n]
                        if scratch[t] == 0.0:
                            touched[m] = t
                            m += 1
                        scratch[t] += own_weight
            if m == 0:
                continue
            best_t, best_v, total = -1, -1.0, 0.0
            for s in range(m):
                t = touched[s]
                total += scratch[t]
                if scratch[t] > best_v or (scratch[t] == best_v and t < best_t):
                    best_t, best_v = t, scratch[t]
                scratch[t] = 0.0
            ctx[L] = best_t
            confidence[j] = best_v / total
            drafted = True
            break
        if not drafted:
            return j
    return k


_WARM = False


def warm_up() -> None:
    """Compile (or load from numba's cache) every kernel of this module now, once per process.

    The drafters call it when built, so the first draft of a query is not the one that pays
    the compilation (seconds on a fresh install): a cost-aware learner measuring drafting time
    would otherwise charge that drafter for it over many rounds."""
    global _WARM
    if _WARM:
        return
    ctx = np.zeros(4, np.int64)
    keys, at = np.zeros(0, np.uint64), np.zeros(2, np.int64)
    rows, none = np.zeros(0, np.int64), np.zeros(0)
    base = np.ones(2, np.float32) / 2
    work = (np.zeros(2), np.zeros(3, np.int64), np.full((1, 8), -1, np.int64), np.zeros((1, 8)))
    witten_bell_rows(ctx, np.array([2]), 1, np.uint64(3), keys, at, rows, rows, rows, none, none,
                     1.0, True, base, 0, *work, np.zeros(1, np.int64), np.zeros(1),
                     np.zeros(1, np.int64))
    greedy_draft(ctx, 2, 1, 1, np.uint64(3), keys, at, rows, rows, rows, none, none, 1.0, True,
                 base, 0, *work)
    longest_match_draft(ctx, 2, 1, 1, np.uint64(3), keys, at, rows, rows, rows, none, 1.0,
                        np.zeros(2), np.zeros(8, np.int64), np.zeros(1))
    _WARM = True
