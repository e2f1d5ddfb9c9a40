"""The suffix index of SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975; vLLM's ``suffix``
method) and its drafting rule, numpy only (the match loop compiled with numba).

:class:`SuffixIndex` keeps a *global memory*: the full sequences (prompt + answer) of finished
requests, the most recent first to stay, at most ``max_tokens`` tokens in all (the oldest whole
sequences are evicted). A query :meth:`SuffixIndex.continuations` takes the live request's
context and returns the longest suffix of it (at most ``max_depth`` tokens) that occurred
earlier *with a next token*, in the context itself or in the memory, and the counts of the
tokens that followed every occurrence of that suffix.

The two sources are **pooled**, as if one suffix tree held the memory and the live context: the
longest match wins whichever source holds it, and where both hold a match of that length every
occurrence counts once, wherever it is. So the request's own text dominates exactly where it
matches longer, and a phrase the stream repeated often outweighs a single occurrence in the
prompt (SuffixDecoding keeps two trees and takes the better-scored draft; pooling is the
single-distribution form of the same idea, and the one a brute-force reference can check).
Matches never cross a sequence boundary; an occurrence at the very end of a sequence (no next
token) does not count. A match of length 0 returns nothing (no unigram fallback).

:class:`SuffixRule` is the drafting rule shared by the torch
:class:`~spec_adapters.drafters.suffix.SuffixDrafter` and the point-mass
:class:`~spec_adapters.drafters.point.SuffixDraft`: abstain where the match is shorter
than ``min_match``; prune the continuations whose empirical probability is below ``min_prob``
(abstain when none is left, i.e. when the top one is below it); draft at most
``max(1, floor(spec_factor * match_len))`` tokens, ``match_len`` the match at the draft's start
(SuffixDecoding's adaptive speculation length; vLLM's ``max_spec_factor``).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections import deque
from itertools import pairwise
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["MAX_DEPTH", "MAX_TOKENS", "Continuations", "SuffixIndex", "SuffixRule", "check_int"]

MAX_TOKENS = 200_000  # default memory cap: 2.4 MB at 12 bytes a token
MAX_DEPTH = 24  # default longest match (vLLM's max_tree_depth)

_SEP = -1  # separates the sequences of the memory; equals no token
_MAX_ID = np.iinfo(np.int32).max


def check_int(name: str, value, low: int) -> int:
    """``value`` as an ``int``, or ``ValueError`` naming ``name`` unless an integer >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _as_tokens(tokens, what: str) -> np.ndarray:
    """``tokens`` as a 1-D int32 array of ids in ``[0, 2**31 - 1)``."""
    t = np.asarray(tokens)
    if t.ndim != 1 or not (t.size == 0 or np.issubdtype(t.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-D sequence of integer token ids")
    if t.size and (int(t.min()) < 0 or int(t.max()) >= _MAX_ID):
        raise ValueError(f"{what} has token ids outside [0, {_MAX_ID})")
    return t.astype(np.int32, copy=False)


class Continuations(NamedTuple):
    """What followed the longest matched suffix: its ``length`` (0: no match), the distinct
    next ``tokens`` (sorted, int64) and how often each followed (``counts``, int64)."""

    length: int
    tokens: np.ndarray
    counts: np.ndarray


_NONE = Continuations(0, np.zeros(0, np.int64), np.zeros(0, np.int64))


@njit(cache=True)
def _longest(text: np.ndarray, ends: np.ndarray, rev: np.ndarray) -> tuple[int, np.ndarray]:
    """Backward extension: among the positions ``ends`` (each ``text[e] == rev[0]``), the
    longest ``l <= len(rev)`` with ``text[e - j] == rev[j]`` for every ``j < l`` (and
    ``e - j >= 0``).

    Returns that longest length (0 for no ``ends``) and the positions matching that long, in
    the order of ``ends``. Compiled (numba): one comparison per matched token, where numpy
    needed several calls per depth.
    """
    depth = rev.size
    best, n = 0, 0
    out = np.empty(ends.size, np.int64)
    for e in ends:
        m = 1
        while m < depth and e - m >= 0 and text[e - m] == rev[m]:
            m += 1
        if m > best:
            best, n = m, 0
        if m == best:
            out[n] = e
            n += 1
    return best, out[:n]


@njit(cache=True)
def _matches(flat: np.ndarray, keys: np.ndarray, order: np.ndarray, c: np.ndarray,
             max_depth: int) -> tuple[int, np.ndarray]:
    """The longest suffix of ``c`` (at most ``max_depth``) matched in the memory or in ``c``
    itself, pooled, and the next token of each of its occurrences (unsorted, repeated):
    :meth:`SuffixIndex.continuations` before the counting."""
    L = c.size
    if L == 0:
        return 0, np.empty(0, np.int32)
    rev = c[max(L - max_depth, 0):][::-1].copy()
    last = rev[0]
    lo = np.searchsorted(keys, last, side="left")
    hi = np.searchsorted(keys, last, side="right")
    g_len, g_at = _longest(flat, order[lo:hi], rev)
    o_len, o_at = _longest(c, np.flatnonzero(c[:-1] == last), rev)
    length = max(g_len, o_len)
    nxt = np.empty(g_at.size + o_at.size, np.int32)
    n = 0
    if length > 0 and g_len == length:
        for e in g_at:
            nxt[n] = flat[e + 1]
            n += 1
    if length > 0 and o_len == length:
        for e in o_at:
            nxt[n] = c[e + 1]
            n += 1
    return length, nxt[:n]


@njit(cache=True)
def _greedy_draft(flat: np.ndarray, keys: np.ndarray, order: np.ndarray, history: np.ndarray,
                  k: int, max_depth: int, min_match: int, min_prob: float,
                  spec_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``k`` tokens, each :meth:`SuffixRule.greedy` of the continuations after
    ``history`` plus the drafts so far, with its confidence; the draft stops where the rule
    abstains or past :meth:`SuffixRule.budget` of the first match. One compiled call for
    :meth:`~spec_adapters.drafters.point.SuffixDraft.propose` (its Python form took ~0.25 ms
    a draft, most of the proposer's drafting; the two are tested equal)."""
    n = history.size
    ctx = np.empty(n + k, np.int32)
    ctx[:n] = history
    confidence = np.empty(k)
    budget = k
    for j in range(k):
        length, nxt = _matches(flat, keys, order, ctx[:n + j], max_depth)
        if j == 0:
            budget = min(k, max(1, math.floor(spec_factor * length)))
        if j >= budget or length < min_match or nxt.size == 0:
            return ctx[n:n + j].astype(np.int64), confidence[:j].copy()
        s = np.sort(nxt)
        best, count, i = -1, 0, 0
        while i < s.size:  # the most frequent next token, the lowest id on ties
            m = i
            while m < s.size and s[m] == s[i]:
                m += 1
            if m - i > count:
                best, count = s[i], m - i
            i = m
        p = count / s.size
        if p < min_prob:  # pruned: the top continuation is below min_prob, so all are
            return ctx[n:n + j].astype(np.int64), confidence[:j].copy()
        ctx[n + j], confidence[j] = best, p
    return ctx[n:].astype(np.int64), confidence


@functools.cache
def _warm_up() -> None:
    """Compile (or load from numba's cache) the index's kernels now, once per process, not
    within a query's first timed round."""
    text = np.zeros(2, np.int32)
    for ends in (np.zeros(1, np.int32), np.zeros(1, np.int64)):
        _longest(text, ends, text)
    _greedy_draft(text, np.zeros(0, np.int32), np.zeros(0, np.int32), text, 2, 4, 1, 0.1, 1.0)


class SuffixIndex:
    """The global memory of finished sequences, and longest-suffix-match queries against it and
    the live request's context.

    Layout (numpy, int32): ``flat``, every stored sequence followed by a separator (``-1``),
    after one leading separator; and an *anchor index* over the positions that have a next
    token in their sequence, sorted by their token (``keys``) with the positions (``order``).
    12 bytes per stored token (:attr:`nbytes`). A query finds the occurrences of the context's
    last token by binary search in ``keys``, then extends them backwards one token at a time
    in compiled code (:func:`_longest`); the context's own occurrences come from one vectorised
    scan of it. Commits and evictions rewrite the arrays in ``O(N)`` vectorised work (merging
    the new sequence's sorted positions in; no re-sort).

    Parameters
    ----------
    max_tokens : int, default 200_000
        Cap on the stored tokens; committing past it evicts the oldest whole sequences (a
        sequence longer than the cap keeps its last ``max_tokens`` tokens).
    max_depth : int, default 24
        Longest suffix matched (vLLM's ``max_tree_depth`` default); matches are counted at most
        this long.
    """

    def __init__(self, max_tokens: int = MAX_TOKENS, max_depth: int = MAX_DEPTH) -> None:
        self.max_tokens = check_int("max_tokens", max_tokens, 1)
        self.max_depth = check_int("max_depth", max_depth, 1)
        self.reset()
        _warm_up()

    def __repr__(self) -> str:
        return (f"SuffixIndex(max_tokens={self.max_tokens}, max_depth={self.max_depth}, "
                f"sequences={self.n_sequences}, tokens={self.n_tokens})")

    def reset(self) -> None:
        """Forget every stored sequence."""
        self._flat = np.full(1, _SEP, np.int32)
        self._keys = np.zeros(0, np.int32)
        self._order = np.zeros(0, np.int32)
        self._lengths: deque[int] = deque()
        self.n_tokens = 0

    @property
    def n_sequences(self) -> int:
        return len(self._lengths)

    @property
    def nbytes(self) -> int:
        """Bytes held by the memory's arrays: ``4 (n_tokens + n_sequences + 1)`` for the text
        and separators, ``8 (n_tokens - n_sequences)`` for the anchor index (a sequence's last
        token has no next token), so at most ``12 max_tokens + 4`` (plus a small deque of
        sequence lengths)."""
        return self._flat.nbytes + self._keys.nbytes + self._order.nbytes

    def sequences(self) -> list[np.ndarray]:
        """The stored sequences, oldest first (copies)."""
        ends = np.flatnonzero(self._flat == _SEP)
        return [self._flat[a + 1:b].copy() for a, b in pairwise(ends)]

    def commit(self, sequence) -> None:
        """Store a finished sequence (prompt + answer) as the newest, evicting the oldest whole
        sequences while more than ``max_tokens`` tokens would be stored.

        Raises
        ------
        ValueError
            ``sequence`` is not a 1-D sequence of token ids in ``[0, 2**31 - 1)`` (nothing
            changes).
        """
        seq = _as_tokens(sequence, "sequence")[-self.max_tokens:]
        m = len(seq)
        if m == 0:
            return
        cut = 0
        while self.n_tokens + m > self.max_tokens:
            n = self._lengths.popleft()
            self.n_tokens -= n
            cut += n + 1
        flat, keys, order = self._flat, self._keys, self._order
        if cut:
            keep = order >= cut
            flat, keys, order = flat[cut:], keys[keep], order[keep] - cut
        at = len(flat)
        new_pos = np.arange(at, at + m - 1, dtype=np.int32)  # the tokens with a next token
        new_keys = seq[:-1]
        by_key = np.argsort(new_keys, kind="stable")
        new_keys, new_pos = new_keys[by_key], new_pos[by_key]
        where = np.searchsorted(keys, new_keys, side="right")
        self._keys = np.insert(keys, where, new_keys)
        self._order = np.insert(order, where, new_pos)
        self._flat = np.concatenate([flat, seq, np.full(1, _SEP, np.int32)])
        self._lengths.append(m)
        self.n_tokens += m

    def continuations(self, context) -> Continuations:
        """The longest suffix of ``context`` that occurred before with a next token, in
        ``context`` itself or in the memory (pooled; see the module docstring), and what
        followed its occurrences.

        Parameters
        ----------
        context : 1-D array-like of int
            The live request's context (prompt + verified tokens, plus any pending drafts).

        Returns
        -------
        Continuations
            ``length`` in ``[0, min(max_depth, len(context) - 1)]`` for the own context,
            ``<= max_depth`` for the memory; the next tokens of every occurrence matching
            ``length`` tokens (all at least ``max_depth`` long when capped).

        Complexity: ``O(log N)`` to find the anchor occurrences in the memory, ``O(L)`` to scan
        the context, then at most ``max_depth`` compiled comparisons per occurrence.
        """
        c = np.asarray(context, dtype=np.int32)  # the memory's dtype: one compiled kernel
        length, nxt = _matches(self._flat, self._keys, self._order, c, self.max_depth)
        if length == 0:
            return _NONE
        tokens, counts = np.unique(nxt.astype(np.int64), return_counts=True)
        return Continuations(int(length), tokens, counts.astype(np.int64))

    def greedy_draft(self, history, k: int, rule: SuffixRule) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``k`` tokens after ``history``, each ``rule.greedy`` of
        :meth:`continuations` after the history plus the drafts so far, stopping where the
        rule abstains or after ``rule.budget`` tokens of the first match; and each token's
        confidence (its count over the continuations' total). One compiled call."""
        return _greedy_draft(self._flat, self._keys, self._order,
                             np.asarray(history, dtype=np.int32), max(int(k), 0),
                             self.max_depth, rule.min_match, rule.min_prob, rule.spec_factor)


class SuffixRule:
    """When and how far a suffix drafter drafts from a :class:`Continuations`.

    Parameters
    ----------
    min_match : int, default 1
        Abstain where the longest match is shorter.
    min_prob : float, default 0.1
        Continuations whose empirical probability (count / total) is below it are pruned
        (vLLM's ``min_token_prob``); abstain where none is left. In ``[0, 1]``.
    spec_factor : float, default 1.0
        A draft stops after ``max(1, floor(spec_factor * match_len))`` tokens, ``match_len``
        the match at the draft's start (vLLM's ``max_spec_factor``); > 0.
    """

    def __init__(self, min_match: int = 1, min_prob: float = 0.1, spec_factor: float = 1.0
                 ) -> None:
        self.min_match = check_int("min_match", min_match, 1)
        if isinstance(min_prob, bool) or not isinstance(min_prob, numbers.Real) \
                or not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"min_prob must be a number in [0, 1], got {min_prob!r}")
        if isinstance(spec_factor, bool) or not isinstance(spec_factor, numbers.Real) \
                or not 0.0 < spec_factor < math.inf:
            raise ValueError(f"spec_factor must be a finite number > 0, got {spec_factor!r}")
        self.min_prob, self.spec_factor = float(min_prob), float(spec_factor)

    def __repr__(self) -> str:
        return (f"SuffixRule(min_match={self.min_match}, min_prob={self.min_prob}, "
                f"spec_factor={self.spec_factor})")

    def budget(self, match_len: int) -> int:
        """Tokens a draft starting at a match of ``match_len`` may hold."""
        return max(1, math.floor(self.spec_factor * match_len))

    def distribution(self, found: Continuations) -> tuple[np.ndarray, np.ndarray] | None:
        """The kept continuations (sorted tokens) and their renormalised empirical
        probabilities, or ``None`` where the drafter abstains."""
        if found.length < self.min_match:
            return None
        p = found.counts / found.counts.sum()
        keep = p >= self.min_prob
        if not keep.any():
            return None
        kept = found.counts[keep]
        return found.tokens[keep], kept / kept.sum()

    def greedy(self, found: Continuations) -> tuple[int, float] | None:
        """The most frequent kept continuation (lowest id on ties) and its empirical
        probability among all continuations (count / total, before pruning: SuffixDecoding's
        score of the node), or ``None``."""
        dist = self.distribution(found)
        if dist is None:
            return None
        best = int(np.argmax(dist[1]))
        token = int(dist[0][best])
        return token, float(found.counts[found.tokens == token][0] / found.counts.sum())
