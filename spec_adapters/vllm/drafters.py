"""Model-free point-mass drafters over a request's token buffer (numpy only).

vLLM hands a custom proposer token buffers, not distributions, and verifies a draft that has
no probabilities as a point mass (``q(x) = 1``). A *point-mass drafter* is a deterministic
function ``draft(history, k) -> tokens`` (possibly shorter than ``k``: no continuation known).
Being deterministic, its draft from any past context can be recomputed and scored against the
verified continuation, which is what the learner's full-information feedback needs
(:mod:`spec_adapters.vllm.feedback`).

- :class:`PromptLookup` (Saxena 2023; vLLM's ``ngram`` method): the most recent earlier
  occurrence of the last ``n`` tokens; the draft copies what followed it.
- :class:`CorpusNGram` (REST-style retrieval): the pool's n-gram tables (the ``.npz`` written
  by ``spec_adapters.drafters.ngram.NGramDrafter.save``), read directly; the draft follows, one
  token at a time, the most frequent continuation of the longest context found in the corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["CorpusNGram", "PromptLookup", "load_pool_folder"]

_MASK64 = (1 << 64) - 1


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
    """Most frequent continuation of the longest matched context, from saved n-gram tables.

    Parameters
    ----------
    tables : list of (keys, offsets, next_tokens, counts)
        Per order ``n = 1..order``: sorted uint64 context keys, CSR offsets, next tokens and
        their counts (the layout of ``NGramDrafter``).
    vocab_size : int
        The vocabulary the tables were counted in; keys hash with base ``vocab_size + 1``.
    name : str
    """

    def __init__(self, tables, vocab_size: int, name: str) -> None:
        self.tables = [(np.asarray(k, np.uint64), np.asarray(o, np.int64),
                        np.asarray(t, np.int64), np.asarray(c, np.float64))
                       for k, o, t, c in tables]
        self.order = len(self.tables)
        self.vocab_size = int(vocab_size)
        self.base = self.vocab_size + 1
        self.name = name
        # the most frequent next token of every stored context, per order (ties: lowest id)
        self._best = [self._argmax_rows(o, t, c) for _k, o, t, c in self.tables]

    @staticmethod
    def _argmax_rows(offsets: np.ndarray, toks: np.ndarray, counts: np.ndarray) -> np.ndarray:
        best = np.empty(len(offsets) - 1, np.int64)
        for r in range(len(best)):
            a, b = offsets[r], offsets[r + 1]
            best[r] = toks[a + int(np.argmax(counts[a:b]))]  # toks sorted within a context
        return best

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
        return cls(tables, int(meta["vocab_size"]), str(meta.get("name", Path(path).stem)))

    def _key(self, context) -> np.uint64:
        key = 0
        for t in context:
            key = (key * self.base + int(t)) & _MASK64
        return np.uint64(key)

    def _next(self, context: list[int]) -> int | None:
        for n in range(min(self.order, len(context)), 0, -1):
            keys = self.tables[n - 1][0]
            key = self._key(context[-n:])
            i = int(np.searchsorted(keys, key))
            if i < len(keys) and keys[i] == key:
                return int(self._best[n - 1][i])
        return None

    def draft(self, history: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` tokens; stops where no context of any order is in the corpus."""
        context = [int(t) for t in np.asarray(history)[-self.order:]]
        out: list[int] = []
        while len(out) < k:
            nxt = self._next(context)
            if nxt is None:
                break
            out.append(nxt)
            context = [*context[1:], nxt] if len(context) >= self.order else [*context, nxt]
        return np.asarray(out, np.int64)


def load_pool_folder(folder: str | Path, vocab_size: int) -> list[CorpusNGram]:
    """Every ``ngram-*.npz`` of a pool folder (specialists and generalist), sorted by name.

    Raises
    ------
    ValueError
        The folder does not exist, holds no ``ngram-*.npz``, a file is not a saved n-gram
        drafter, or one was counted over a vocabulary other than the target's ``vocab_size``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"pool folder {folder} does not exist")
    paths = sorted(folder.glob("ngram-*.npz"))
    if not paths:
        raise ValueError(f"pool folder {folder} holds no ngram-*.npz drafter")
    drafters = []
    for p in paths:
        d = CorpusNGram.load(p)
        if d.vocab_size != vocab_size:
            raise ValueError(f"drafter {p} has vocabulary size {d.vocab_size}, the target's "
                             f"is {vocab_size}: it was built for another model")
        d.name = p.stem
        drafters.append(d)
    return drafters
