"""OnArrival: one base learner, each loss applied as soon as it arrives."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import SingleLearnerReduction

__all__ = ["OnArrival"]


class OnArrival(SingleLearnerReduction):
    r"""Apply each loss to a single learner as soon as it arrives.

    Round :math:`t` is played from :math:`p_t`, the base learner's distribution given the losses
    that have arrived before round :math:`t`, in arrival order. Censored rounds are never
    applied.

    Bound (Hedge with fixed :math:`\eta`; derived in docs/delayed.md). Let :math:`d_t` be the
    number of rounds :math:`s < t` whose loss is still missing when :math:`p_t` is formed
    (outstanding or censored), :math:`D = \sum_t d_t`. Then for every loss sequence in
    :math:`[0,1]^{T \times N}`

    .. math::

        R_T \le \frac{\ln N}{\eta} + \frac{\eta T}{8} + \sum_t \tanh\frac{\eta d_t}{4}
            \le \frac{\ln N}{\eta} + \frac{\eta T}{8} + \tanh\frac{\eta}{4} D,

    which implies the form :math:`\ln N/\eta + \eta T/8 + (e^\eta - 1) D / 2` of
    REFERENCES.md (about twice looser). Proof: compare :math:`p_t` with the undelayed Hedge
    :math:`q_t` (PLG Thm 2.2 for :math:`\sum_t \langle q_t, l_t\rangle`); :math:`q_t` is
    :math:`p_t` tilted by :math:`e^{-\eta x}` with :math:`x \in [0, d_t]^N`, so
    :math:`\langle p_t - q_t, l_t\rangle \le \mathrm{TV}(p_t, q_t) \le \tanh(\eta d_t / 4)`.

    Parameters
    ----------
    learner : Learner
        The base learner; it is updated in place and available as ``self.learner``.

    Notes
    -----
    For bandit base learners whose update importance-weights the loss with the *current*
    probability of the arm (Exp3, Exp3-IX), a delayed loss is weighted with the probability at
    arrival, not at play time, which biases the estimate; use :class:`BOLD` for those (a copy's
    state does not move while it waits). Cost: O(1) plus one base update per feed.
    """

    @property
    def weights(self) -> np.ndarray:
        """The base learner's current distribution, from which :meth:`play` samples."""
        return self.learner.weights

    def _play(self, rid: int, rng: np.random.Generator) -> int:
        return int(self.learner.sample(rng))

    def _feed(self, rid: int, arm: int, value: Any) -> None:
        self._update_learner(self.learner, arm, value)
