"""Which weight type makes HedgeSpec fastest on this machine, within a quality budget.

In llama.cpp the weight type sets both the price of a plain step and what each extra row of a
speculative round adds (docs/benchmark.md, "What a row costs, per weight type"): on the 2-core
AVX2 EPYC the shipped Q4_1 SmolLM2 decodes 1 / 2 / 5 rows in 9.1 / 15.0 / 31.4 ms, its Q4_K_M
re-quantization in 9.6 / 13.6 / 26.7 ms. For each candidate type ``t`` the engine's own decode
of ``n = 1 .. K + 1`` rows is timed here (:meth:`~spec_adapters.llamacpp.GGUFTarget.row_prices`,
``T_t(n)``); with a per-position acceptance ``alpha`` of the drafts (the probability that a
drafted token is accepted given the ones before it were), a ``k``-token draft yields
``1 + alpha + ... + alpha^k`` tokens a round, so HedgeSpec's seconds per token at its best
fixed length are predicted as

.. math:: s_t = \\min_{k = 0..K} \\frac{T_t(k + 1)\\,(1 - \\alpha)}{1 - \\alpha^{k + 1}}

(``k = 0``: plain decoding). Re-quantizing changes the model (see
:mod:`spec_adapters.llamacpp.quantize`): a type is a candidate only if its perplexity on
held-out text is within ``budget`` of the source file's, and if a row's logits do not depend
on the rows decoded beside it (:attr:`~spec_adapters.llamacpp.GGUFTarget.rows_invariant`:
else HedgeSpec's greedy text could differ from llama.cpp's one-token decoding; F16 and BF16
fail it, llamafile's tiled matmul summing a batch in another order). Chosen: the candidate
with the least ``s_t``, if it beats the source file's by ``margin`` (5%) in every round of the
timing (the source's own type is not re-written). The types are timed together
(:func:`row_prices_together`): in rounds, each type once per round, so a virtual machine whose
speed drifts by tens of per cent over minutes slows every type of a round alike, and a type
replaces the source only where it is faster by the margin in each round, not by a median
that a near tie puts on either side of it (timed one type after the other, then compared by
medians, the choice flipped between two runs of the command). The
prediction prices rows and nothing else (no per-round overhead,
the learner's choice per round instead of one fixed length); ``hedgespec bench --engine
llamacpp --target`` measures the chosen file against plain decoding of the same file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

__all__ = ["ALPHA", "BUDGET", "MARGIN", "Candidate", "RowTimer", "choose", "row_prices_together",
           "seconds_per_token"]

# per-position acceptance of the model-free pool's drafts on the held-out chat stream: the best
# fixed drafter's accepted tokens for k = 1..4 measured 0.48 / 0.79 / 1.00 / 1.17 (SmolLM2, 35
# prompts, greedy, 128 tokens, every round scored), a geometric 0.5's 0.50 / 0.75 / 0.88 / 0.94
ALPHA = 0.5
BUDGET = 0.05  # a type may raise held-out perplexity by 5 % at most
MARGIN = 0.05  # and must be predicted 5 % faster than the source


@dataclass(frozen=True)
class Candidate:
    """One weight type, measured: ``row_seconds`` for ``1 .. K + 1`` rows (the median over the
    timing's rounds), held-out ``perplexity``, whether its rows are ``lossless`` (alone =
    batched), ``rounds`` (each round's row seconds, optional); and (:func:`choose`) the
    predicted ``seconds_per_token`` at ``best_k``, whether it is ``within_budget``, and
    ``vs_source``, its predicted time over the source's in each round."""

    name: str
    row_seconds: tuple[float, ...]
    perplexity: float
    lossless: bool = True
    rounds: tuple[tuple[float, ...], ...] = ()
    seconds_per_token: float = float("nan")
    best_k: int = 0
    within_budget: bool = False
    vs_source: tuple[float, ...] = ()


class RowTimer(Protocol):
    """What :func:`row_prices_together` times (:class:`~spec_adapters.llamacpp.GGUFTarget`)."""

    def row_prices(self, rows: int, context: int = ..., repeats: int = ...) -> np.ndarray:
        """Seconds of a decode of ``1 .. rows`` rows after ``context`` cached tokens."""


def row_prices_together(targets: Sequence[RowTimer], rows: int, context: int = 300,
                        rounds: int = 5, repeats: int = 3) -> np.ndarray:
    """Every target's seconds for ``1 .. rows`` rows in each round, ``(rounds, len(targets),
    rows)``: each round times every target once (the median of ``repeats`` decodes per row
    count), in alternating order (forward, then backward: none always runs first). Timings of
    one round are seconds apart, so a drift of the machine's speed moves them alike; the
    median over rounds outvotes one disturbed round.

    Raises
    ------
    ValueError
        No target, or ``rounds`` / ``repeats`` / ``rows`` below 1.
    """
    if not targets or min(rows, rounds, repeats) < 1:
        raise ValueError(f"need targets and rows, rounds, repeats >= 1, got {len(targets)} "
                         f"targets, {rows}, {rounds}, {repeats}")
    out = np.empty((rounds, len(targets), rows))
    for r in range(rounds):
        order = range(len(targets)) if r % 2 == 0 else reversed(range(len(targets)))
        for i in order:
            out[r, i] = targets[i].row_prices(rows, context=context, repeats=repeats)
    return out


def seconds_per_token(row_seconds: Sequence[float], alpha: float) -> tuple[float, int]:
    """``(s, k)``: the least predicted seconds per token (module docstring) and the draft
    length that reaches it, from ``row_seconds`` of ``1 .. K + 1`` rows.

    Raises
    ------
    ValueError
        ``alpha`` outside [0, 1), no row price, or a price that is not finite and positive.
    """
    t = np.asarray(row_seconds, np.float64)
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha!r}")
    if t.ndim != 1 or not t.size or not np.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"row_seconds must be finite seconds > 0, got {t.tolist()}")
    tokens = (1 - alpha ** np.arange(1, t.size + 1)) / (1 - alpha)  # 1 + alpha + ... alpha^k
    per = t / tokens
    k = int(np.argmin(per))
    return float(per[k]), k


def choose(candidates: Sequence[Candidate], reference_perplexity: float,
           alpha: float = ALPHA, budget: float = BUDGET, margin: float = MARGIN
           ) -> tuple[Candidate, list[Candidate]]:
    """The fastest lossless candidate within the budget among those predicted ``margin``
    faster than the first candidate (the source file) in every round of the timing (by the
    medians where a candidate has no rounds), else the source; and every candidate with its
    prediction.

    Raises
    ------
    ValueError
        No lossless candidate within ``budget`` of ``reference_perplexity``.
    """
    def per_round(c: Candidate) -> np.ndarray:
        return np.array([seconds_per_token(r, alpha)[0] for r in c.rounds or (c.row_seconds,)])

    source_rounds = per_round(candidates[0])
    source_s = seconds_per_token(candidates[0].row_seconds, alpha)[0]
    scored = []
    for c in candidates:
        s, k = seconds_per_token(c.row_seconds, alpha)
        own = per_round(c)  # against the source round by round, else median against median
        ratio = own / source_rounds if len(own) == len(source_rounds) else np.array([s / source_s])
        ok = c.perplexity <= (1 + budget) * reference_perplexity
        scored.append(replace(c, row_seconds=tuple(c.row_seconds), seconds_per_token=s,
                              best_k=k, within_budget=ok, vs_source=tuple(ratio.tolist())))
    allowed = [c for c in scored if c.within_budget and c.lossless]
    if not allowed:
        raise ValueError(f"no weight type within {budget:.0%} of the reference perplexity "
                         f"{reference_perplexity:.2f} whose rows do not depend on their batch")
    source = scored[0]
    if source not in allowed:
        return min(allowed, key=lambda c: c.seconds_per_token), scored
    clearly = [c for c in allowed[1:] if max(c.vs_source) < 1 - margin]
    return min(clearly, key=lambda c: c.seconds_per_token, default=source), scored
