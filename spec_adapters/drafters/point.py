"""Model-free point-mass drafters over a request's token buffer (numpy; the n-gram rule compiled).

An engine that verifies a draft without probabilities treats it as a point mass (``q(x) = 1``;
vLLM's ``custom_class`` proposers, the llama.cpp engine). A *point-mass drafter* is a
deterministic function ``propose(history, k) -> Proposal(tokens, confidence)`` (possibly
shorter than ``k``: no continuation known). Being deterministic, its draft from any past
context can be recomputed and scored against the verified continuation, which is what the
learner's full-information feedback needs (:class:`spec_adapters.selection.book.RoundBook`
with the round's drafts).

Each drafted token comes with the drafter's *confidence* ``c_j`` in ``(0, 1]``, its own
estimate of the chance that the token is right given that the ones before it are: the
stop rules (:mod:`spec_adapters.selection.stop_rules`) cut a draft where the running product
``prod_{l<=j} c_l`` falls below a threshold, and the learner finds out which threshold to
trust (the confidences need not be calibrated). Per drafter:

- prompt lookup: the rule of succession on the match, ``c_j = (m + j) / (m + j + 1)``
  (``j = 0, 1, ..``), ``m`` the length of the longest common suffix of the history and the
  text before the copied occurrence (at least ``n``, at most 64); a copy that has held for
  ``m`` tokens holds ``k`` more with estimated probability ``m / (m + k)``;
- corpus n-gram: the drafted token's share of the counts it was chosen from;
- suffix: the node's empirical continuation probability (count / total; SuffixDecoding's
  score, whose running product it stops below 0.1).

- :class:`PromptLookup` (Saxena 2023; vLLM's ``ngram`` method): the most recent earlier
  occurrence of the last ``n`` tokens; the draft copies what followed it.
- :class:`CorpusNGram` (REST-style retrieval): the pool's n-gram tables (the ``.npz`` written
  by ``spec_adapters.drafters.ngram.NGramDrafter.save``), read directly; the draft follows, one
  token at a time, the most frequent continuation of the longest context found in the corpus.
- :class:`SuffixDraft` (SuffixDecoding; vLLM's ``suffix`` method): the most frequent kept
  continuation of the longest suffix matched in the request's buffer or in the global memory
  of finished requests (:class:`~spec_adapters.drafters.suffix_index.SuffixIndex`, the same
  index and rule as the torch :class:`~spec_adapters.drafters.suffix.SuffixDrafter`); its
  memory grows only through :meth:`SuffixDraft.commit`, so between commits it is deterministic
  like the others.

These are not the torch drafters of :mod:`spec_adapters.drafters` (``PromptLookupDrafter``,
``NGramDrafter``, ``SuffixDrafter``), which propose distributions for the transformers loop;
the names here end without ``Drafter`` for that reason.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spec_adapters.drafters.ngram_kernel import NGramTables, longest_match_draft, warm_up
from spec_adapters.drafters.suffix_index import MAX_DEPTH, MAX_TOKENS, SuffixIndex, SuffixRule
from spec_adapters.drafters.vote import majority_path

__all__ = ["Consensus", "CorpusNGram", "PointDrafter", "PromptLookup", "Proposal", "SuffixDraft",
           "consensus_rows", "propose_all", "solo_seconds"]

MAX_MATCH = 64  # prompt lookup's match length is counted up to this many tokens


class Proposal(NamedTuple):
    """A point-mass draft: ``tokens`` (int64) and each one's ``confidence`` (float64, in
    ``(0, 1]``, the same length; module docstring)."""

    tokens: np.ndarray
    confidence: np.ndarray


_EMPTY = Proposal(np.zeros(0, np.int64), np.zeros(0))


class PointDrafter(ABC):
    """A deterministic drafter: :meth:`propose` returns at most ``k`` tokens and their
    confidences; ``name`` names it in statistics."""

    name: str

    @abstractmethod
    def propose(self, history: np.ndarray, k: int) -> Proposal:
        """Up to ``k`` tokens after ``history`` with their confidences."""

    def draft(self, history: np.ndarray, k: int) -> np.ndarray:
        """The tokens of :meth:`propose` alone."""
        return self.propose(history, k).tokens


def propose_all(drafters: Sequence[PointDrafter], history: np.ndarray, k: int,
                rows: Iterable[int] | None = None, members: dict[int, list[int]] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A round's draft table: ``(tokens, confidence, seconds)``, the first two ``(N, k)``, row
    ``i`` drafter ``i``'s :meth:`~PointDrafter.propose` (tokens ``-1`` and confidence ``NaN``
    from where it drafted nothing), ``seconds`` ``(N,)`` each drafter's proposal time, for the
    drafters in ``rows`` (default all; the others' rows stay empty, their seconds ``NaN``).

    A :class:`Consensus` row is voted from its members' rows, which are drafted for it when
    ``rows`` leaves them out (their rows and seconds then filled too); its own seconds are
    the vote's alone (:func:`solo_seconds`: what drafting with it alone costs). ``members``:
    :func:`consensus_rows` of ``drafters``, where the caller keeps it."""
    tokens = np.full((len(drafters), k), -1, np.int64)
    confidence = np.full((len(drafters), k), np.nan)
    seconds = np.full(len(drafters), np.nan)
    wanted = set(range(len(drafters)) if rows is None else rows)
    members = consensus_rows(drafters) if members is None else members
    voters = {i: members[i] for i in sorted(wanted) if i in members}
    for voting in voters.values():
        wanted.update(voting)
    for i in sorted(wanted.difference(voters)):
        start = time.perf_counter()
        got = drafters[i].propose(history, k)
        seconds[i] = time.perf_counter() - start
        tokens[i, :len(got.tokens)] = got.tokens
        confidence[i, :len(got.tokens)] = got.confidence
    for i, voting in voters.items():
        start = time.perf_counter()
        got = Consensus.vote(tokens[voting])
        seconds[i] = time.perf_counter() - start
        tokens[i, :len(got.tokens)] = got.tokens
        confidence[i, :len(got.tokens)] = got.confidence
    return tokens, confidence, seconds


def solo_seconds(drafters: Sequence[PointDrafter], seconds: np.ndarray,
                 members: dict[int, list[int]] | None = None) -> np.ndarray:
    """Each drafter's price of drafting alone from per-drafter proposal ``seconds`` (as
    :func:`propose_all` measures them; ``NaN``: not measured, counted 0): its own, plus its
    members' for a :class:`Consensus`. ``members``: :func:`consensus_rows` of the pool, where
    the caller keeps it (an engine step is cheaper without finding them again)."""
    solo = np.asarray(seconds, np.float64)
    solo = np.where(np.isnan(solo), 0.0, solo)
    for i, rows in (consensus_rows(drafters) if members is None else members).items():
        solo[i] += solo[rows].sum()
    return solo


def consensus_rows(drafters: Sequence[PointDrafter]) -> dict[int, list[int]]:
    """The pool's :class:`Consensus` rows and each one's member rows."""
    return {i: d.member_rows(drafters) for i, d in enumerate(drafters)
            if isinstance(d, Consensus)}


class Consensus(PointDrafter):
    """The pool's majority draft: the path most of the other drafters' drafts agree on.

    The rule is :func:`~spec_adapters.drafters.vote.majority_path` over the members' drafts
    (depth by depth the most voted token among the members still on the path; ties: the
    earliest member's); the confidence of a token is its share of that depth's votes, so a
    stop rule's running product is the share of the first depth's voters behind the path.

    Why. Drafters that agree are right more often than any one of them: on 35 held-out
    prompts (SmolLM2-135M, K = 4, a decode simulated against the target's own answers) this
    draft's mean accepted tokens per round were 1.92 greedy and 1.60 at T = 0.7 against the
    best single drafter's 1.82 and 1.50 (``benchmarks/pool_votes.py``). A vote costs no
    target work and, where every drafter drafts anyway (a scored round), no drafting either.

    Parameters
    ----------
    members : sequence of PointDrafter
        The drafters it votes over, in tie-breaking order; each must also be in the pool
        (:func:`propose_all` reads their rows from the round's table).
    name : str, default "consensus"
    """

    def __init__(self, members: Sequence[PointDrafter], name: str = "consensus") -> None:
        self.members = list(members)
        if not self.members:
            raise ValueError("a consensus needs at least one member drafter")
        if any(isinstance(m, Consensus) for m in self.members):
            raise ValueError("a consensus cannot vote over another consensus")
        self.name = name

    def member_rows(self, drafters: Sequence[PointDrafter]) -> list[int]:
        """The rows of the members in the pool ``drafters`` (``ValueError`` if one is not)."""
        ids = {id(d): i for i, d in enumerate(drafters)}
        missing = [m.name for m in self.members if id(m) not in ids]
        if missing:
            raise ValueError(f"consensus members {missing} are not in the pool")
        return [ids[id(m)] for m in self.members]

    def propose(self, history: np.ndarray, k: int) -> Proposal:
        """Every member drafts, then :meth:`vote` (standalone use; in a pool
        :func:`propose_all` votes from the round's table)."""
        return self.vote(propose_all(self.members, history, k)[0])

    @staticmethod
    def vote(tokens: np.ndarray) -> Proposal:
        """The majority path of the members' draft table ``tokens`` ``(M, k)`` (``-1``: no
        draft there; the members' own confidences are not read: their scales differ)."""
        return Proposal(*majority_path(tokens))


class PromptLookup(PointDrafter):
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

    def propose(self, history: np.ndarray, k: int) -> Proposal:
        """Up to ``k`` tokens; empty when the suffix never occurred before. Confidence: the
        rule of succession on the match length (module docstring).

        Complexity: ``O(L n)`` vectorised comparisons for a history of ``L`` tokens.
        """
        h = np.asarray(history)
        L, n = len(h), self.n
        if n >= L or k < 1:
            return _EMPTY
        suffix = h[L - n:]
        # windows h[s : s + n] for s = 0 .. L - n - 1 (the suffix itself excluded)
        hit = np.ones(L - n, dtype=bool)
        for j in range(n):
            hit &= h[j:L - n + j] == suffix[j]
        starts = np.flatnonzero(hit)
        if starts.size == 0:
            return _EMPTY
        after = int(starts[-1]) + n
        tokens = h[after:after + k].astype(np.int64)
        w = min(MAX_MATCH, after)  # the common suffix of h[:after] and h, read backwards
        same = h[after - w:after][::-1] == h[L - w:][::-1]
        m = w if same.all() else int(np.argmin(same))
        j = np.arange(len(tokens))
        return Proposal(tokens, (m + j) / (m + j + 1.0))


class CorpusNGram(PointDrafter):
    """Most frequent continuation of the longest matched context, from saved n-gram tables
    and (``context_weight > 0``) the request's own tokens.

    At each draft position the longest order ``n`` whose last ``n`` tokens occur in the corpus
    or earlier in the request (prompt, output, drafts so far) decides: the next-token counts
    of the corpus plus ``context_weight`` times those of the request, argmax (ties: the lowest
    id). This is the greedy form of ``NGramDrafter(context_weight=...)``'s interpolation at its
    longest matched order; it runs compiled
    (:func:`spec_adapters.drafters.ngram_kernel.longest_match_draft`).

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

    def propose(self, history: np.ndarray, k: int) -> Proposal:
        """Up to ``k`` tokens; stops where no context of any order is in the corpus (nor, with
        ``context_weight``, earlier in the request). Confidence: the count ratio.

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
        confidence = np.empty(k)
        j = longest_match_draft(ctx, len(h), k, self.order, np.uint64(self.vocab_size + 1),
                                tb.keys, tb.key_at, tb.lo, tb.hi, tb.toks, tb.counts,
                                self.context_weight, self._scratch, touched, confidence)
        return Proposal(ctx[len(h):len(h) + j].copy(), confidence[:j])


class SuffixDraft(PointDrafter):
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

    def propose(self, history: np.ndarray, k: int) -> Proposal:
        """Up to ``k`` tokens; empty where nothing matches. Confidence: each node's empirical
        continuation probability.

        Complexity: ``min(k, budget)`` queries, each ``O(L)`` over the buffer plus the
        memory's anchor search, in one compiled call (:meth:`SuffixIndex.greedy_draft`).
        """
        return Proposal(*self.index.greedy_draft(history, k, self.rule))
