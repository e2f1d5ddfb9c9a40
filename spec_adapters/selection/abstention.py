"""Batch-aware abstention: draft only where the expected gain pays the step's marginal cost.

A request's learner plays an expert ``(i, k)``: drafter ``i``, ``k`` tokens. Whether those
``k`` tokens pay depends on the load: in a step of ``B`` requests each drafted token adds
``b_D`` seconds to the *whole* step (:class:`spec_adapters.selection.costs.StepTimeModel`), and an
accepted token saves the batch ``tau`` seconds (its time per generated token). Under the
Dinkelbach linearisation of :mod:`spec_adapters.selection.costs` drafting ``k`` tokens with drafter
``i`` beats not drafting iff

.. math:: \\text{gain}_i(k) = \\tau\\, \\hat A_i(k) - b_D\\, \\hat D_i(k) - f_i > 0
          \\quad (k > 0),

``A_i(k)`` the tokens it gets accepted (``AL_i(k) - 1``, point masses: the matched prefix,
exact under greedy decoding, unbiased at a temperature), ``D_i(k) = min(k, |draft_i|)`` the
tokens it drafts and ``f_i`` the price of drafting at all with drafter ``i``: its own proposal
time; a drafter whose expected gain does not cover it is not run. (The step's price of
speculating at all, ``c`` of :class:`~spec_adapters.selection.costs.StepTimeModel`, is paid once
by a step in which any row drafts: the vLLM proposer weighs it against the step's rows' gains
together.) ``A`` and ``D`` are means over the request's *evaluated* rounds
(every drafter's draft scored on a coin drawn before the outcome, so an unbiased sample),
shrunk towards the stream's means with the weight of ``m`` rounds (``prior_rounds``): a
request that starts mid-stream decides from the stream's evidence at once instead of
exploring from nothing,

.. math:: \\hat A_i(k) = (S^A_i(k) + m \\bar A_i(k)) / (n + m).

The proposer plays ``k* = argmax_{k' <= k} gain_i(k')`` (``gain_i(0) = 0``): the learner's
drafter with the longest draft up to the learner's ``k`` that is expected to pay, nothing when
none does. A request none of whose experts pays (no drafter, no length) abstains, and its
round's counterfactual drafting is skipped too except on a ``probe`` share of such rounds (the
estimates must still see a request turn repetitive); when no request's draft pays, the step
drafts nothing at all.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AcceptanceBook", "expected_gains", "paying_k", "step_pays"]


class AcceptanceBook:
    """Counterfactual accepted and drafted tokens of every expert ``(drafter, k)``, summed over
    evaluated rounds (one per request, one for the stream).

    Parameters
    ----------
    n_drafters, max_k : int
    """

    def __init__(self, n_drafters: int, max_k: int) -> None:
        self.rounds = 0
        self.accepted = np.zeros((n_drafters, max_k + 1))
        self.drafted = np.zeros((n_drafters, max_k + 1))

    def add(self, accepted: np.ndarray, drafted: np.ndarray) -> None:
        """One evaluated round: ``(N, K + 1)`` tokens accepted and drafted by each expert."""
        self.rounds += 1
        self.accepted += accepted
        self.drafted += drafted

    def estimate(self, prior: AcceptanceBook | None, weight: int
                 ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(A_hat, D_hat)``, each ``(N, K + 1)``: this book's means shrunk towards
        ``prior``'s with the weight of ``weight`` rounds (module docstring); ``None`` without
        any evidence (no round here, none or no weight in the prior)."""
        m = weight if prior is not None and prior.rounds > 0 else 0
        if self.rounds + m == 0:
            return None
        acc, dr = self.accepted.copy(), self.drafted.copy()
        if m:
            acc += m * prior.accepted / prior.rounds
            dr += m * prior.drafted / prior.rounds
        return acc / (self.rounds + m), dr / (self.rounds + m)


def expected_gains(accepted: np.ndarray, drafted: np.ndarray, tau: float,
                   draft_s: float | np.ndarray, fixed_s: float | np.ndarray = 0.0
                   ) -> np.ndarray:
    """``gain_i(k) = tau A_i(k) - draft_s D_i(k) - fixed_s_i`` of every expert,
    ``(N, K + 1)``, with ``gain_i(0) = 0`` (not drafting is the reference).

    Parameters
    ----------
    accepted, drafted : numpy.ndarray
        ``(N, K + 1)`` ``A_hat`` and ``D_hat`` (:meth:`AcceptanceBook.estimate`).
    tau : float
        Seconds per generated token of the batch.
    draft_s : float or numpy.ndarray
        Seconds one drafted token adds to a step (:meth:`StepTimeModel.draft_seconds`); or
        ``(K + 1,)`` seconds that a round drafting ``d = 0 .. K`` tokens adds to a plain step,
        interpolated at ``D_hat`` (an engine that prices its rows one by one: in llama.cpp a
        second row may cost nothing and a third most of a step).
    fixed_s : float or numpy.ndarray, default 0
        Seconds that drafting at all costs (``k > 0``), for every drafter or ``(N,)`` one
        each: proposal time.
    """
    extra = draft_s * drafted if np.ndim(draft_s) == 0 else \
        np.interp(drafted, np.arange(len(draft_s)), draft_s)
    gain = tau * accepted - extra - np.reshape(fixed_s, (-1, 1))
    gain[:, 0] = 0.0
    return gain


def step_pays(gains: list[np.ndarray], price: float) -> bool:
    """Whether a batch step should speculate at all: its rows' best expected gains
    (:func:`expected_gains`, each row's ``(N, K + 1)``; not drafting is 0) added up exceed
    ``price``, the step's price of speculating, paid once if any row drafts (``c`` of
    :class:`~spec_adapters.selection.costs.StepTimeModel`; docs/theory.md, "The step's price
    of speculating at all")."""
    return sum(max(float(g.max()), 0.0) for g in gains) > price


def paying_k(gain: np.ndarray, k: int) -> int:
    """The draft length in ``0 .. k`` with the largest expected gain (one drafter's row of
    :func:`expected_gains`): ``0`` when none is positive; ties go to the shorter."""
    return int(np.argmax(gain[:k + 1]))
