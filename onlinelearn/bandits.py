"""Bandit learners: EXP3 (loss form), EXP3-IX and UCB1. ``update(arm, loss)``, loss in [0, 1]."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from .base import (
    Learner,
    check_arm,
    check_count,
    check_loss,
    check_state,
    check_vector,
)
from .hedge import _check_eta, _check_horizon

# Smallest probability used as an importance weight's denominator: an arm the learner gives
# probability 0 (possible only when the caller plays an arm it did not sample) would otherwise
# produce loss / 0.
_P_FLOOR = 1e-300


def _nonneg_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


class Exp3(Learner):
    r"""EXP3 in loss form with importance-weighted loss estimates (Auer et al. 2002).

    With :math:`\hat L_{t-1,i} = \sum_{s<t} \ell_{s,I_s} \mathbb 1\{I_s = i\} / p_{s,i}`,

    .. math:: p_{t,i} \propto \exp(-\eta_t \hat L_{t-1,i}).

    Learning rate: fixed ``eta``; ``horizon=T``: :math:`\eta = \sqrt{2\ln K / (TK)}`, for which
    the pseudo-regret is :math:`\bar R_T \le \sqrt{2 T K \ln K}`; neither: anytime
    :math:`\eta_t = \sqrt{\ln K / (tK)}`, :math:`\bar R_T \le 2\sqrt{T K \ln K}` (Bubeck &
    Cesa-Bianchi 2012, Theorem 3.1; the loss form needs no uniform exploration because
    :math:`\hat\ell \ge 0` and :math:`e^{-x} \le 1 - x + x^2/2` for :math:`x \ge 0`).

    Parameters
    ----------
    n : int
        Number of arms ``K >= 1``.
    eta : float, optional
        Fixed learning rate ``> 0``. Exclusive with ``horizon``.
    horizon : int, optional
        Known number of rounds ``T >= 1``.

    Notes
    -----
    ``update(arm, loss)`` divides by the probability that the *current* weights give ``arm``,
    so call it once per round, right after sampling, before any other update.
    """

    full_information = False

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
        log_k = math.log(self.n)
        if self.horizon is not None:
            return math.sqrt(2.0 * log_k / (self.horizon * self.n))
        t = self.t + 1 if t is None else t
        return math.sqrt(log_k / (t * self.n))

    @property
    def weights(self) -> np.ndarray:
        """``p_{t,i} ∝ exp(-eta_t (Lhat_i - min Lhat))``, a fresh float64 array."""
        w = np.exp(-self.learning_rate() * (self.L_hat - self.L_hat.min()))
        return w / w.sum()

    def _estimate(self, p_arm: float, loss: float) -> float:
        return loss / max(p_arm, _P_FLOOR)

    def update(self, arm: Any, loss: Any) -> Self:
        """Observe ``loss`` in [0, 1] of the played ``arm`` in [0, n)."""
        arm = check_arm(arm, self.n)
        loss = check_loss(loss)
        p_arm = float(self.weights[arm])
        L_hat = self.L_hat.copy()
        L_hat[arm] += self._estimate(p_arm, loss)
        self.L_hat = L_hat
        self.t += 1
        return self

    def reset(self) -> Self:
        self.L_hat = np.zeros(self.n)
        self.t = 0
        return self

    def _hyper(self) -> dict[str, Any]:
        return {"eta": self.eta, "horizon": self.horizon}

    def state_dict(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            "n": self.n,
            **self._hyper(),
            "t": self.t,
            "L_hat": self.L_hat.tolist(),
        }

    def _load_hyper(self, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "eta": None if state["eta"] is None else _check_eta(state["eta"]),
            "horizon": None if state["horizon"] is None else _check_horizon(state["horizon"]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        check_state(state, self, (*self._hyper(), "t", "L_hat"))
        hyper = self._load_hyper(state)
        t = check_count(state["t"], "state['t']")
        L_hat = check_vector(state["L_hat"], self.n, "L_hat")
        if np.any(L_hat < 0.0) or not np.isfinite(L_hat.min()):
            raise ValueError("state['L_hat'] must be >= 0 with at least one finite entry")
        for key, value in hyper.items():
            setattr(self, key, value)
        self.t, self.L_hat = t, L_hat
        return self

    def __repr__(self) -> str:
        args = "".join(f", {k}={v}" for k, v in self._hyper().items() if v is not None)
        return f"{type(self).__name__}(n={self.n}{args})"


class Exp3IX(Exp3):
    r"""EXP3-IX: EXP3 with implicit exploration (Neu, NIPS 2015, Algorithm 1).

    The loss estimate is biased down by the implicit-exploration parameter :math:`\gamma_t`,

    .. math::

        \hat\ell_{t,i} = \frac{\ell_{t,i}\,\mathbb 1\{I_t = i\}}{p_{t,i} + \gamma_t},
        \qquad p_{t,i} \propto \exp(-\eta_t \hat L_{t-1,i}),

    which keeps every estimate below :math:`1/\gamma_t` and gives a high-probability bound.
    With ``horizon=T``: :math:`\eta = 2\gamma = \sqrt{2\ln K / (KT)}` and, with probability at
    least :math:`1 - \delta` (Neu 2015, Theorem 1),

    .. math::

        R_T \le 2\sqrt{2 K T \ln K} + \Bigl(\sqrt{\tfrac{2KT}{\ln K}} + 1\Bigr)\ln(2/\delta).

    Without ``horizon`` and ``eta``: anytime :math:`\eta_t = 2\gamma_t = \sqrt{\ln K/(Kt)}`
    (the doubling-free anytime variant; the bound above is claimed only for ``horizon=T``).
    ``gamma`` defaults to ``eta / 2``.

    Parameters
    ----------
    n : int
        Number of arms ``K >= 1``.
    eta : float, optional
        Fixed learning rate ``> 0``. Exclusive with ``horizon``.
    gamma : float, optional
        Fixed implicit-exploration parameter ``>= 0`` (default ``eta_t / 2``).
    horizon : int, optional
        Known number of rounds ``T >= 1``.
    """

    def __init__(
        self,
        n: int,
        eta: float | None = None,
        gamma: float | None = None,
        horizon: int | None = None,
    ) -> None:
        self.gamma = None if gamma is None else _nonneg_float(gamma, "gamma")
        super().__init__(n, eta=eta, horizon=horizon)

    def exploration(self, t: int | None = None) -> float:
        """The implicit-exploration parameter ``gamma_t`` of the next round."""
        return self.learning_rate(t) / 2.0 if self.gamma is None else self.gamma

    def _estimate(self, p_arm: float, loss: float) -> float:
        return loss / max(p_arm + self.exploration(), _P_FLOOR)

    def _hyper(self) -> dict[str, Any]:
        return {"eta": self.eta, "gamma": self.gamma, "horizon": self.horizon}

    def _load_hyper(self, state: dict[str, Any]) -> dict[str, Any]:
        hyper = super()._load_hyper(state)
        gamma = state["gamma"]
        hyper["gamma"] = None if gamma is None else _nonneg_float(gamma, "state['gamma']")
        return hyper


class UCB1(Learner):
    r"""UCB1 (Auer, Cesa-Bianchi, Fischer, Machine Learning 2002, Figure 1).

    Rewards are ``1 - loss``. Each arm is played once; afterwards, with :math:`n_j` the number
    of plays of arm ``j``, :math:`\bar x_j` its mean reward and :math:`t = \sum_j n_j`, the arm
    maximising

    .. math:: \bar x_j + \sqrt{2 \ln t / n_j}

    is played. ``weights`` is uniform over the maximisers (unplayed arms count as +inf), so
    ``sample`` breaks exact ties at random. On stochastic rewards in [0, 1] with gaps
    :math:`\Delta_j = \mu^* - \mu_j` (Auer et al. 2002, Theorem 1):

    .. math::

        \mathbb E[n_j(T)] \le \frac{8\ln T}{\Delta_j^2} + 1 + \frac{\pi^2}{3}, \qquad
        \mathbb E[R_T] \le 8\sum_{j:\Delta_j>0}\frac{\ln T}{\Delta_j}
        + \Bigl(1 + \frac{\pi^2}{3}\Bigr)\sum_j \Delta_j.

    Parameters
    ----------
    n : int
        Number of arms ``K >= 1``.
    """

    full_information = False

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.reset()

    @property
    def t(self) -> int:
        """Total number of plays so far."""
        return int(self.counts.sum())

    @property
    def index(self) -> np.ndarray:
        """Upper confidence indices ``mean_j + sqrt(2 ln t / n_j)`` (``inf`` for unplayed)."""
        played = self.counts > 0
        idx = np.full(self.n, np.inf)
        if played.any():
            t = self.t
            n_j = self.counts[played]
            idx[played] = self.rewards[played] / n_j + np.sqrt(2.0 * math.log(t) / n_j)
        return idx

    @property
    def weights(self) -> np.ndarray:
        """Uniform over the arms of maximal index."""
        idx = self.index
        best = (idx == idx.max()).astype(np.float64)
        return best / best.sum()

    def update(self, arm: Any, loss: Any) -> Self:
        """Observe ``loss`` in [0, 1] (reward ``1 - loss``) of the played ``arm``."""
        arm = check_arm(arm, self.n)
        loss = check_loss(loss)
        counts, rewards = self.counts.copy(), self.rewards.copy()
        counts[arm] += 1
        rewards[arm] += 1.0 - loss
        self.counts, self.rewards = counts, rewards
        return self

    def reset(self) -> Self:
        self.counts = np.zeros(self.n, dtype=np.int64)
        self.rewards = np.zeros(self.n)
        return self

    def state_dict(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            "n": self.n,
            "counts": self.counts.tolist(),
            "rewards": self.rewards.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        check_state(state, self, ("counts", "rewards"))
        counts = check_vector(state["counts"], self.n, "counts", integer=True)
        rewards = check_vector(state["rewards"], self.n, "rewards")
        if np.any(counts < 0) or np.any(rewards < 0.0) or np.any(rewards > counts * (1.0 + 1e-12)):
            raise ValueError("state needs counts >= 0 and 0 <= rewards <= counts")
        self.counts, self.rewards = counts, rewards
        return self
