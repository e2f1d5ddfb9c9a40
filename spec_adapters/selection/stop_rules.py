"""Stop rules as experts: (drafter, stop rule) pairs, each scored for free from a round's window.

A drafter's draft of up to ``K`` tokens comes with a confidence ``c_j`` per token
(:mod:`spec_adapters.drafters.point`). A *stop rule* ``r = (theta, cap)`` keeps the
longest prefix whose running confidence stays at or above the threshold, at most ``cap``
tokens:

.. math:: k_i(r) = \\max \\{ j \\le \\min(\\text{cap}, |d_i|) :
                           \\textstyle\\prod_{l \\le j} c_{il} \\ge \\theta \\},

so ``theta = 0`` is the fixed length ``min(cap, |d_i|)`` and rule ``(0, 0)`` a plain step:
the expert family ``(i, r)`` contains every ``(drafter, k)`` expert of
:mod:`spec_adapters.selection.experts`, and with ``thresholds = (0,)`` it *is* that family
(same experts, same indices). SuffixDecoding's own rule is ``(0.1, budget)`` on its tree's
probabilities; here the learner finds which threshold pays, per drafter, from the stream.

Why a rule costs nothing to score. ``k_i(r)`` is a function of the context at the round's
start (the drafter's own draft and confidences), not of the outcome, so the rule's draft is
a prefix of the drafter's draft of length ``k_i(r)`` and its counterfactual acceptance
length and cost are those of the ``(i, k_i(r))`` expert, which the window already scores
(Theorem 3 truncated at ``k``; exact when greedy, unbiased when sampling, checked for rules
by ``python -m proofs_check --only stoprules``). The loss vector over ``(i, r)`` is a gather
of the ``(i, k)`` loss matrix at the round's rule lengths (:func:`rule_losses`). Losses stay
in ``[0, 1]``, so Hedge's bound holds over the ``N R`` experts: against the best fixed
``(drafter, rule)``, itself at least as good as the best fixed ``(drafter, k)``, the regret
gains only ``ln R / ln (K + 1)`` under the root (docs/theory.md, "Stop rules as experts").

Expert index ``e = i R + r``; rule 0 is ``(0, 0)``, then ``(theta, cap)`` for each threshold
in order, ``cap = 1 .. K``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["THRESHOLDS", "StopRules"]

THRESHOLDS = (0.0, 0.25, 0.5, 0.75)


class StopRules:
    """The rule set ``{(0, 0)} + {(theta, cap) : theta in thresholds, cap = 1 .. K}``.

    Parameters
    ----------
    max_k : int
        ``K``, the longest draft.
    thresholds : sequence of float, default (0, 0.25, 0.5, 0.75)
        In ``[0, 1)``, distinct, starting with 0 (the fixed lengths, so the family contains
        the ``(drafter, k)`` experts).

    Raises
    ------
    ValueError
        ``max_k < 1``; thresholds empty, not starting at 0, outside ``[0, 1)`` or repeated.
    """

    def __init__(self, max_k: int, thresholds: Sequence[float] = THRESHOLDS) -> None:
        if isinstance(max_k, bool) or int(max_k) != max_k or max_k < 1:
            raise ValueError(f"max_k must be an integer >= 1, got {max_k!r}")
        listed = tuple(thresholds) if isinstance(thresholds, Sequence) else (None,)
        th = tuple(float(t) for t in listed if isinstance(t, int | float)
                   and not isinstance(t, bool))
        if len(th) != len(listed) or not th or th[0] != 0.0 or len(set(th)) != len(th) \
                or not all(0.0 <= t < 1.0 for t in th):
            raise ValueError("stop-rule thresholds must be distinct numbers in [0, 1) starting "
                             f"with 0 (the fixed lengths), got {thresholds!r}")
        self.K, self.thresholds = int(max_k), th
        caps = np.arange(1, self.K + 1)
        self.theta = np.concatenate([[0.0], np.repeat(th, self.K)])  # (R,)
        self.cap = np.concatenate([[0], np.tile(caps, len(th))])     # (R,)

    def __len__(self) -> int:
        """``R``, the number of rules."""
        return len(self.cap)

    def __repr__(self) -> str:
        return f"StopRules(max_k={self.K}, thresholds={list(self.thresholds)})"

    def describe(self, r: int) -> str:
        """``"k<=cap"`` for a fixed length, ``"conf>=theta,k<=cap"`` otherwise."""
        theta, cap = float(self.theta[r]), int(self.cap[r])
        return f"k<={cap}" if theta == 0.0 else f"conf>={theta:g},k<={cap}"

    def lengths(self, confidence: np.ndarray) -> np.ndarray:
        """Every drafter's draft length under every rule, ``(N, R)`` int.

        Parameters
        ----------
        confidence : numpy.ndarray
            ``(N, K)`` float, drafter ``i``'s confidence in its ``j``-th token, ``NaN`` from
            where it drafted nothing.
        """
        c = np.asarray(confidence, np.float64)
        drafted = np.cumprod(~np.isnan(c), axis=1).astype(bool)  # a token at j and before it
        running = np.cumprod(np.where(drafted, c, 0.0), axis=1)
        # kept[i, r, j]: a token at j, within rule r's cap, its running confidence holding
        kept = drafted[:, None, :] \
            & (running[:, None, :] >= self.theta[None, :, None]) \
            & (np.arange(1, c.shape[1] + 1)[None, None, :] <= self.cap[None, :, None])
        # the running product is nonincreasing, so the kept positions are a prefix
        return kept.sum(axis=2)

    def length(self, confidence: np.ndarray, r: int) -> int:
        """One drafter's draft length under rule ``r`` alone: :meth:`lengths`'s entry for
        one ``(K,)`` row of confidences, without its arrays (what a round that is not scored
        needs: the played rule's cut, once per request per step)."""
        theta, cap = float(self.theta[r]), int(self.cap[r])
        running, k = 1.0, 0
        for c in confidence[:cap].tolist():
            running *= c
            if c != c or running < theta:  # NaN: nothing drafted from here
                break
            k += 1
        return k

    def losses(self, length_losses: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The loss of every ``(drafter, rule)`` expert, ``(N R,)``: expert ``(i, r)`` gets the
        loss of ``(i, lengths[i, r])``.

        Parameters
        ----------
        length_losses : numpy.ndarray
            ``(N (K + 1),)`` the ``(drafter, k)`` losses of one window
            (:func:`~spec_adapters.selection.experts.window_losses`).
        lengths : numpy.ndarray
            ``(N, R)`` the round's :meth:`lengths`.
        """
        by_length = np.asarray(length_losses).reshape(len(lengths), self.K + 1)
        return np.take_along_axis(by_length, lengths, axis=1).reshape(-1)
