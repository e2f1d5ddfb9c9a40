"""Suffix drafting behind the :class:`~spec_adapters.drafters.Drafter` protocol (SuffixDecoding,
Oliaro et al. 2024; vLLM's ``suffix`` method).

The index and the rule are :mod:`spec_adapters.drafters.suffix_index` (numpy; shared with the
point-mass :class:`~spec_adapters.drafters.point.SuffixDraft` of the engines without
distributions). :class:`SuffixDrafter` learns from the stream: at ``start`` of a new query the
previous query's full context (prompt + verified tokens) is committed to the memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from spec_adapters.core.proposal import Base, Sparse
from spec_adapters.drafters.base import check_k, sample_draft
from spec_adapters.drafters.ngram_kernel import sparse_argmax
from spec_adapters.drafters.suffix_index import (
    MAX_DEPTH,
    MAX_TOKENS,
    Continuations,
    SuffixIndex,
    SuffixRule,
    check_int,
)

if TYPE_CHECKING:
    from spec_adapters.core.proposal import Proposal
    from spec_adapters.core.sampling import SamplingConfig

__all__ = ["SuffixDrafter"]


class SuffixDrafter:
    """A suffix drafter behind the :class:`~spec_adapters.drafters.Drafter` protocol.

    Its next-token distribution after a context is the empirical distribution of the kept
    continuations of the longest matched suffix (:class:`SuffixRule` over
    :meth:`SuffixIndex.continuations`), a :class:`~spec_adapters.core.proposal.Sparse` row with
    ``lam = 0`` (no mass off the continuations; the uniform base only fixes the vocabulary):
    greedy decoding warps it to the point mass at the most frequent continuation, temperature
    keeps it sparse (tempered in closed form), top-k / top-p make it dense. Where the rule
    abstains, ``propose`` stops and ``extend`` gives a zero row (``gamma = rho = 0``).

    ``propose`` stops after ``SuffixRule.budget`` tokens (the adaptive draft length). ``extend``
    cannot express that stop: its row ``j`` is the prediction given the context plus
    ``tokens[:j]`` whatever position ``j`` holds in a draft, i.e. what the drafter would
    propose *first* from there. Counterfactual gamma past the budget is therefore that of a
    drafter without the length cap (optimistic for this drafter at positions beyond
    ``budget``), and equals what ``propose`` drew from at every position within it.

    Parameters
    ----------
    vocab_size : int
    max_tokens, max_depth : int
        The memory's cap and match depth (:class:`SuffixIndex`).
    min_match, min_prob, spec_factor
        The drafting rule (:class:`SuffixRule`).
    name : str, default "suffix"
    index : SuffixIndex, optional
        Share a memory between drafters (e.g. one per worker); default a new one. Given,
        ``max_tokens`` and ``max_depth`` must be left unset.
    learn : bool, default True
        Commit each query's context to the memory at the next ``start``. ``False`` freezes
        the memory (only ``index.commit`` changes it): the same query then always gets the same
        drafts (reproducible benchmarks; the protocol's "start resets" holds exactly).
    """

    def __init__(self, vocab_size: int, *, max_tokens: int | None = None,
                 max_depth: int | None = None, min_match: int = 1, min_prob: float = 0.1,
                 spec_factor: float = 1.0, name: str = "suffix",
                 index: SuffixIndex | None = None, learn: bool = True) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, 1)
        if index is not None and (max_tokens is not None or max_depth is not None):
            raise ValueError("index is given: max_tokens and max_depth are the index's own")
        if index is not None and not isinstance(index, SuffixIndex):
            raise ValueError(f"index must be a SuffixIndex, got {type(index).__name__}")
        self.rule = SuffixRule(min_match, min_prob, spec_factor)
        if index is None:
            index = SuffixIndex(MAX_TOKENS if max_tokens is None else max_tokens,
                                MAX_DEPTH if max_depth is None else max_depth)
        self.index = index
        if not isinstance(learn, bool):
            raise ValueError(f"learn must be True or False, got {learn!r}")
        self.learn = learn
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        self._base = Base(torch.full((self.vocab_size,), 1.0 / self.vocab_size))
        self._buf = np.zeros(0, np.int32)  # the verified context, then scratch for drafts
        self._n: int | None = None  # verified tokens in _buf; None before start

    def __repr__(self) -> str:
        return (f"SuffixDrafter({self.name!r}, vocab_size={self.vocab_size}, {self.rule}, "
                f"{self.index}, learn={self.learn})")

    def reset_memory(self) -> None:
        """Forget the stream (the global memory); the current query keeps its context."""
        self.index.reset()

    # ------------------------------------------------------------------ context buffer
    def _ids(self, tokens, what: str) -> np.ndarray:
        t = torch.as_tensor(tokens).view(-1).cpu()
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"{what} must hold integer token ids, got dtype {t.dtype}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.vocab_size):
            raise ValueError(f"{what} has token ids outside [0, {self.vocab_size})")
        return t.numpy().astype(np.int32)

    def _reserve(self, n: int) -> None:
        if len(self._buf) < n:
            grown = np.zeros(max(n, 2 * len(self._buf)), np.int32)
            grown[:len(self._buf)] = self._buf
            self._buf = grown

    def _require_started(self, verb: str) -> int:
        if self._n is None:
            raise RuntimeError(f"SuffixDrafter.{verb} called before start()")
        return self._n

    def _rows(self, found: list[Continuations]) -> Sparse:
        """The unwarped rows of ``found`` (a zero row where the rule abstains)."""
        dists = [self.rule.distribution(f) for f in found]
        width = max((d[0].size for d in dists if d is not None), default=0)
        support = np.full((len(found), width), -1, np.int64)
        values, top = np.zeros((len(found), width)), np.full(len(found), -1, np.int64)
        for r, d in enumerate(dists):
            if d is not None:
                support[r, :d[0].size], values[r, :d[0].size] = d
                top[r] = sparse_argmax(d[0], d[1], 0.0, self._base.numpy, self._base.top)
        return Sparse.from_arrays(support, values, np.zeros(len(found)), top, self._base)

    def _row(self, found: Continuations) -> Sparse | None:
        """The unwarped row of ``found``, or ``None`` (abstain)."""
        q = self._rows([found])
        return None if q.argmax()[0] < 0 else q

    def _after(self, end: int) -> Continuations:
        return self.index.continuations(self._buf[:end])

    # ------------------------------------------------------------------ the protocol
    def start(self, prompt_ids: torch.LongTensor) -> None:
        """Commit the previous query's context (prompt + verified tokens) to the memory (when
        ``learn``), then reset to the 1-D ``prompt_ids``."""
        if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 1 \
                or prompt_ids.numel() == 0:
            raise ValueError("prompt_ids must be a non-empty 1-D tensor")
        prompt = self._ids(prompt_ids, "prompt_ids")
        if self._n and self.learn:
            self.index.commit(self._buf[:self._n])
        self._reserve(len(prompt) + 1)
        self._buf[:len(prompt)] = prompt
        self._n = len(prompt)

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None = None
                ) -> Proposal:
        """Draft up to ``min(k, budget)`` tokens, each sampled from the warped continuation
        distribution after the context plus the drafts so far; stops where the rule abstains.
        Nothing is committed."""
        n = self._require_started("propose")
        check_k(k)
        self._reserve(n + k)
        budget = 0

        def predict_after(drafts: torch.LongTensor) -> Sparse | None:
            nonlocal budget
            j = drafts.numel()
            if j == 0:
                found = self._after(n)
                budget = self.rule.budget(found.length)
                return self._row(found)
            if j >= budget:
                return None
            self._buf[n + j - 1] = int(drafts[-1])
            return self._row(self._after(n + j))

        return sample_draft(k, sampling, generator, predict_after, self.vocab_size)

    def extend(self, tokens: torch.LongTensor) -> Sparse:
        """Append verified tokens; row ``j`` is the unwarped prediction given the context plus
        ``tokens[:j]`` (a zero row where the drafter abstains; no positional stop, see the
        class)."""
        return self._rows(self._append(self._ids(tokens, "tokens")))

    def extend_argmax(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`extend`, returning only each row's argmax, the most frequent kept
        continuation (``-1`` where the rule abstains): what greedy evaluation reads."""
        found = self._append(self._ids(tokens, "tokens"))
        top = np.full(len(found), -1, np.int64)
        for r, f in enumerate(found):
            d = self.rule.distribution(f)
            if d is not None:  # as _rows rounds it (the values as float32 holds them)
                top[r] = sparse_argmax(d[0], d[1], 0.0, self._base.numpy, self._base.top)
        return top

    def _append(self, ids: np.ndarray) -> list[Continuations]:
        """Commit verified ``ids``; what the memory and context held before each of them."""
        n = self._require_started("extend")
        self._reserve(n + len(ids))
        found = []
        for t in ids:
            found.append(self._after(n))
            self._buf[n] = t
            n += 1
        self._n = n
        return found
