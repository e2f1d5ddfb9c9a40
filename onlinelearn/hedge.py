"""Hedge (exponentially weighted average forecaster) with fixed, horizon-tuned or anytime eta."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Self

import numpy as np

from .base import (
    Int,
    Learner,
    OrNone,
    Real,
    Vector,
    check_at_most,
    check_losses,
    fields,
    softmin_weights,
)


def check_cumulative_losses(values: dict[str, Any]) -> None:
    """Require ``0 <= L_i <= t`` for the finite cumulative losses ``values['L']`` (each loss is
    in [0, 1]; ``L >= 0`` is its kind's check); ``ValueError`` naming ``state['L']`` if not."""
    L = values["L"]
    check_at_most(L[np.isfinite(L)], values["t"], "state['L']",
                  "L_i <= t (each loss is at most 1)")


class TunedRate(Learner):
    r"""A learning rate that is fixed, tuned for a known horizon, or anytime (Hedge, EXP3).

    One of three schedules (``eta`` and ``horizon`` are exclusive):

    .. math::

        \eta_t = \eta, \qquad
        \eta_t = \sqrt{\frac{c_T \ln n}{T m}}, \qquad
        \eta_t = \sqrt{\frac{c_1 \ln n}{t m}},

    for ``eta`` given, ``horizon=T`` given, or neither (round :math:`t = 1, 2, \dots`), with
    :math:`m = 1` under full information and :math:`m = n` under bandit feedback. Subclasses
    set the constants ``horizon_c`` (:math:`c_T`) and ``anytime_c`` (:math:`c_1`).

    Parameters
    ----------
    n : int
        Number of experts / arms, ``n >= 1``.
    eta : float, optional
        Fixed learning rate, finite and ``> 0``. Exclusive with ``horizon``.
    horizon : int, optional
        Known number of rounds ``T >= 1``.

    Raises
    ------
    ValueError
        On a bad ``n``, ``eta`` or ``horizon``, or if both ``eta`` and ``horizon`` are given.
    """

    horizon_c: ClassVar[float]
    anytime_c: ClassVar[float]
    hyper_fields = fields(eta=OrNone(Real(positive=True)), horizon=OrNone(Int(low=1)))

    def __init__(self, n: int, eta: float | None = None, horizon: int | None = None,
                 **hyper: Any) -> None:
        super().__init__(n, eta=eta, horizon=horizon, **hyper)

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        if values["eta"] is not None and values["horizon"] is not None:
            raise ValueError("give at most one of eta and horizon, not both")
        return values

    def learning_rate(self, t: int | None = None) -> float:
        """The learning rate used to form ``p_t`` (``t`` defaults to the next round)."""
        if self.eta is not None:
            return self.eta
        log_n, m = math.log(self.n), 1 if self.full_information else self.n
        if self.horizon is not None:
            return math.sqrt(self.horizon_c * log_n / (self.horizon * m))
        t = self.t + 1 if t is None else t
        return math.sqrt(self.anytime_c * log_n / (t * m))


class Hedge(TunedRate):
    r"""Hedge / exponentially weighted average forecaster (PLG Section 2.1).

    With cumulative losses :math:`L_{t-1,i} = \sum_{s<t} \ell_{s,i}` the forecaster plays

    .. math:: p_{t,i} = \frac{\exp(-\eta_t L_{t-1,i})}{\sum_j \exp(-\eta_t L_{t-1,j})},

    computed as ``exp(-eta (L - min L))`` from the stored cumulative losses (the multiplied
    weights are never stored, so nothing underflows to zero forever).

    Learning rate (:class:`TunedRate` with :math:`c_T = c_1 = 8`), in order of precedence:

    - ``eta`` given: fixed :math:`\eta`; for losses in [0, 1],
      :math:`R_T \le \ln N / \eta + \eta T / 8` (PLG Theorem 2.2, via Hoeffding's lemma);
    - ``horizon=T`` given: :math:`\eta = \sqrt{8 \ln N / T}`, so
      :math:`R_T \le \sqrt{(T/2) \ln N}` (PLG Theorem 2.2, tuned);
    - neither: anytime :math:`\eta_t = \sqrt{8 \ln N / t}` at round :math:`t = 1, 2, \dots`, and
      :math:`R_T \le 2\sqrt{(T/2)\ln N} + \sqrt{\ln N / 8}` for every :math:`T`
      (PLG Theorem 2.3).

    See :mod:`onlinelearn.bounds` for the bounds as functions.

    Parameters
    ----------
    n : int
        Number of experts, ``n >= 1``.
    eta : float, optional
        Fixed learning rate, finite and ``> 0``. Exclusive with ``horizon``.
    horizon : int, optional
        Known number of rounds ``T >= 1``; sets ``eta = sqrt(8 ln n / T)``.

    Raises
    ------
    ValueError
        On a bad ``n``, ``eta`` or ``horizon``, or if both ``eta`` and ``horizon`` are given.

    Notes
    -----
    ``update`` is O(n); the state is the cumulative loss vector and the round count.
    """

    full_information = True
    horizon_c = anytime_c = 8.0
    state_fields = fields(t=Int(), L=Vector(nonneg=True, allow_inf=True))

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        check_cumulative_losses(values)
        return super()._check_state(values)

    @property
    def weights(self) -> np.ndarray:
        """``p_{t,i} ∝ exp(-eta_t (L_{t-1,i} - min_j L_{t-1,j}))``, a fresh float64 array."""
        return softmin_weights(self.L, self.learning_rate())

    def update(self, losses: Any) -> Self:
        """Observe the loss vector ``losses`` (shape ``(n,)``, entries in [0, 1])."""
        arr = check_losses(losses, self.n)
        self.L = self.L + arr
        self.t += 1
        return self
