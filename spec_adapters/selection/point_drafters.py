"""Model-free point-mass drafters over a request's token buffer (numpy; the n-gram rule compiled).

An engine that verifies a draft without probabilities treats it as a point mass (``q(x) = 1``;
vLLM's ``custom_class`` proposers, the llama.cpp engine). A *point-mass drafter* is a
deterministic function ``draft(history, k) -> tokens`` (possibly shorter than ``k``: no
continuation known). Being deterministic, its draft from any past context can be recomputed
and scored against the verified continuation, which is what the learner's full-information
feedback needs (:class:`spec_adapters.selection.book.RoundBook` with the round's drafts).

- :class:`PromptLookup` (Saxena 2023; vLLM's ``ngram`` method): the most recent earlier
  occurrence of the last ``n`` tokens; the draft copies what followed it.
- :class:`CorpusNGram` (REST-style retrieval): the pool's n-gram tables (the ``.npz`` written
  by ``spec_adapters.drafters.ngram.NGramDrafter.save``), read directly; the draft follows, one
  token at a time, the most frequent continuation of the longest context found in the corpus.
- :class:`SuffixDraft` (SuffixDecoding; vLLM's ``suffix`` method): the most frequent kept
  continuation of the longest suffix matched in the request's buffer or in the global memory
  of finished requests (:class:`~spec_adapters.selection.suffix_index.SuffixIndex`, the same
  index and rule as the torch :class:`~spec_adapters.drafters.suffix.SuffixDrafter`); its
  memory grows only through :meth:`SuffixDraft.commit`, so between commits it is deterministic
  like the others.

These are not the torch drafters of :mod:`spec_adapters.drafters` (``PromptLookupDrafter``,
``NGramDrafter``, ``SuffixDrafter``), which propose distributions for the transformers loop;
the names here end without ``Drafter`` for that reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import numpy as np

from spec_adapters.selection.ngram_kernel import NGramTables, longest_match_draft, warm_up
from spec_adapters.selection.suffix_index import MAX_DEPTH, MAX_TOKENS, SuffixIndex, SuffixRule

__all__ = ["CorpusNGram", "PointDrafter", "PromptLookup", "SuffixDraft"]


class PointDrafter(Protocol):
    """A deterministic drafter: ``draft(history, k)`` returns at most ``k`` int64 tokens."""

    name: str

    def draft(self, history: np.ndarray, k: int) -> np.ndarray: ...


class PromptLookup:
    """Copy the continuation of the most recent earlier occurrence of the last ``n`` tokens.

    Parameters
    ----------
    n : int
        Length of the matched suffix (>= 1).
    """

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"prompt-lookup n-gram size must be an integer >= 1, got {n!r}")
        self.n = int(n)
        self.name = f"prompt-lookup-{self.n}"

    def draft(self, history: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` tokens (int64); empty when the suffix never occurred before.

        Complexity: ``O(L n)`` vectorised comparisons for a history of ``L`` tokens.
        """
        h = np.asarray(history)
        L, n = len(h), self.n
        if n >= L or k < 1:
            return np.zeros(0, np.int64)
        suffix = h[L - n:]
        # windows h[s : s + n] for s = 0 .. L - n - 1 (the suffix itself excluded)
        hit = np.ones(L - n, dtype=bool)
        for j in range(n):
            hit &= h[j:L - n + j] == suffix[j]
        starts = np.flatnonzero(hit)
        if starts.size == 0:
            return np.zeros(0, np.int64)
        after = int(starts[-1]) + n
        return h[after:after + k].astype(np.int64)


class CorpusNGram:
    """Most frequent continuation of the longest matched context, from saved n-gram tables
    and (``context_weight > 0``) the request's own tokens.

    At each draft position the longest order ``n`` whose last ``n`` tokens occur in the corpus
    or earlier in the request (prompt, output, drafts so far) decides: the next-token counts
    of the corpus plus ``context_weight`` times those of the request, argmax (ties: the lowest
    id). This is the greedy form of ``NGramDrafter(context_weight=...)``'s interpolation at its
    longest matched order; it runs compiled
    (:func:`spec_adapters.selection.ngram_kernel.longest_match_draft`).

    Parameters
    ----------
    tables : list of (keys, offsets, next_tokens, counts)
        Per order ``n = 1..order``: sorted uint64 context keys, CSR offsets, next tokens and
        their counts (the layout of ``NGramDrafter``).
    vocab_size : int
        The vocabulary the tables were counted in; keys hash with base ``vocab_size + 1``.
    name : str
    context_weight : float, default 0
        Weight of one occurrence in the request against one in the corpus (saved with the
        drafter); 0: the corpus alone.
    """

    def __init__(self, tables, vocab_size: int, name: str, context_weight: float = 0.0
                 ) -> None:
        if not 0 <= context_weight < float("inf"):
            raise ValueError(f"context_weight must be finite and >= 0, got {context_weight!r}")
        self.context_weight = float(context_weight)
        self.tables = NGramTables.of([(np.asarray(k, np.uint64), np.asarray(o, np.int64),
                                       np.asarray(t, np.int64), np.asarray(c, np.float64))
                                      for k, o, t, c in tables], len(tables))
        self.order = len(tables)
        self.vocab_size = int(vocab_size)
        self.name = name
        self._scratch = np.zeros(self.vocab_size)
        warm_up()  # compiled at engine start, not within the first request's timed steps

    @classmethod
    def load(cls, path: str | Path) -> CorpusNGram:
        """Read one saved ``NGramDrafter`` ``.npz``; ``ValueError`` when it is not one."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                tables = [(z[f"keys{n}"], z[f"offsets{n}"], z[f"tokens{n}"], z[f"counts{n}"])
                          for n in range(1, int(meta["order"]) + 1)]
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{path} is not a saved n-gram drafter: {err}") from err
        return cls(tables, int(meta["vocab_size"]), str(meta.get("name", Path(path).stem)),
                   float(meta.get("context_weight", 0.0)))

    def draft(self, history: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` tokens; stops where no context of any order is in the corpus (nor, with
        ``context_weight``, earlier in the request).

        Complexity per token: a binary search per order, plus ``O(L n)`` comparisons over the
        request's ``L`` tokens with ``context_weight`` (compiled).
        """
        h = np.asarray(history, dtype=np.int64)
        if self.context_weight == 0:
            h = h[-self.order:]  # the corpus alone needs no more
        k = max(int(k), 0)
        ctx = np.empty(len(h) + k, np.int64)
        ctx[:len(h)] = h
        tb = self.tables
        touched = np.empty(tb.widest + len(ctx) + 1, np.int64)
        j = longest_match_draft(ctx, len(h), k, self.order, np.uint64(self.vocab_size + 1),
                                tb.keys, tb.key_at, tb.lo, tb.hi, tb.toks, tb.counts,
                                self.context_weight, self._scratch, touched)
        return ctx[len(h):len(h) + j].copy()


class SuffixDraft:
    """Greedy suffix drafting over a request's buffer and a memory shared by all requests.

    Each draft token is :meth:`SuffixRule.greedy` of
    :meth:`SuffixIndex.continuations` after the buffer plus the drafts so far; the draft stops
    where the rule abstains or after :meth:`SuffixRule.budget` tokens of the match at its
    start.

    Parameters
    ----------
    max_tokens : int, default 200_000
        The memory's cap (tokens; the oldest requests are evicted).
    max_depth : int, default 24
    min_match, min_prob, spec_factor
        See :class:`~spec_adapters.drafters.suffix.SuffixRule`.
    name : str, default "suffix"
    """

    def __init__(self, max_tokens: int = MAX_TOKENS, max_depth: int = MAX_DEPTH, min_match: int = 1,
                 min_prob: float = 0.1, spec_factor: float = 1.0, name: str = "suffix") -> None:
        self.index = SuffixIndex(max_tokens, max_depth)
        self.rule = SuffixRule(min_match, min_prob, spec_factor)
        self.name = name

    def commit(self, history: np.ndarray) -> None:
        """Add a finished request's tokens (prompt + output) to the memory."""
        self.index.commit(history)

    def draft(self, history: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` tokens (int64); empty where nothing matches.

        Complexity: ``min(k, budget)`` queries, each ``O(L)`` over the buffer plus the
        memory's anchor search (:meth:`SuffixIndex.continuations`).
        """
        h = np.asarray(history)
        n = len(h)
        ctx = np.empty(n + max(k, 0), np.int64)
        ctx[:n] = h
        budget = k
        for j in range(max(k, 0)):
            found = self.index.continuations(ctx[:n + j])
            if j == 0:
                budget = min(k, self.rule.budget(found.length))
            nxt = self.rule.greedy(found) if j < budget else None
            if nxt is None:
                return ctx[n:n + j].copy()
            ctx[n + j] = nxt
        return ctx[n:].copy()
