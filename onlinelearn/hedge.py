"""Hedge (exponentially weighted average forecaster) with fixed, horizon-tuned or anytime eta."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from .base import Learner, check_count, check_losses, check_state, check_vector


def _check_eta(eta: Any) -> float:
    if isinstance(eta, bool) or not isinstance(eta, int | float | np.integer | np.floating):
        raise ValueError(f"eta must be a positive real number, got {eta!r}")
    value = float(eta)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"eta must be finite and > 0, got {value}")
    return value


def _check_horizon(horizon: Any) -> int:
    if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer):
        raise ValueError(f"horizon must be an integer number of rounds, got {horizon!r}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    return int(horizon)


class Hedge(Learner):
    r"""Hedge / exponentially weighted average forecaster (PLG Section 2.1).

    With cumulative losses :math:`L_{t-1,i} = \sum_{s<t} \ell_{s,i}` the forecaster plays

    .. math:: p_{t,i} = \frac{\exp(-\eta_t L_{t-1,i})}{\sum_j \exp(-\eta_t L_{t-1,j})},

    computed as ``exp(-eta (L - min L))`` from the stored cumulative losses (the multiplied
    weights are never stored, so nothing underflows to zero forever).

    Learning rate, in order of precedence:

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

    def __init__(self, n: int, eta: float | None = None, horizon: int | None = None) -> None:
        super().__init__(n)
        if eta is not None and horizon is not None:
            raise ValueError("give at most one of eta and horizon, not both")
        self.eta = None if eta is None else _check_eta(eta)
        self.horizon = None if horizon is None else _check_horizon(horizon)
        self.reset()

    def learning_rate(self, t: int | None = None) -> float:
        """The learning rate used to form ``p_t`` (``t`` defaults to the next round)."""
        if self.eta is not None:
            return self.eta
        log_n = math.log(self.n)
        if self.horizon is not None:
            return math.sqrt(8.0 * log_n / self.horizon)
        t = self.t + 1 if t is None else t
        return math.sqrt(8.0 * log_n / t)

    @property
    def weights(self) -> np.ndarray:
        """``p_{t,i} ∝ exp(-eta_t (L_{t-1,i} - min_j L_{t-1,j}))``, a fresh float64 array."""
        w = np.exp(-self.learning_rate() * (self.L - self.L.min()))
        return w / w.sum()

    def update(self, losses: Any) -> Self:
        """Observe the loss vector ``losses`` (shape ``(n,)``, entries in [0, 1])."""
        arr = check_losses(losses, self.n)
        self.L = self.L + arr
        self.t += 1
        return self

    def reset(self) -> Self:
        self.L = np.zeros(self.n)
        self.t = 0
        return self

    def state_dict(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            "n": self.n,
            "eta": self.eta,
            "horizon": self.horizon,
            "t": self.t,
            "L": self.L.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        check_state(state, self, ("eta", "horizon", "t", "L"))
        eta = None if state["eta"] is None else _check_eta(state["eta"])
        horizon = None if state["horizon"] is None else _check_horizon(state["horizon"])
        t = check_count(state["t"], "state['t']")
        L = check_vector(state["L"], self.n, "L")
        self.eta, self.horizon, self.t, self.L = eta, horizon, t, L
        return self

    def __repr__(self) -> str:
        if self.eta is not None:
            return f"Hedge(n={self.n}, eta={self.eta})"
        if self.horizon is not None:
            return f"Hedge(n={self.n}, horizon={self.horizon})"
        return f"Hedge(n={self.n})"
