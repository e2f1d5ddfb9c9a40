"""Bandit learners: EXP3 (loss form), EXP3-IX and UCB1. ``update(arm, loss)``, loss in [0, 1]."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from .base import (
    Int,
    Learner,
    OrNone,
    Real,
    Vector,
    check_arm,
    check_at_most,
    check_loss,
    fields,
    softmin_weights,
)
from .hedge import TunedRate

# Smallest probability used as an importance weight's denominator: an arm the learner gives
# probability 0 (possible only when the caller plays an arm it did not sample) would otherwise
# produce loss / 0.
_P_FLOOR = 1e-300


class Exp3(TunedRate):
    r"""EXP3 in loss form with importance-weighted loss estimates (Auer et al. 2002).

    With :math:`\hat L_{t-1,i} = \sum_{s<t} \ell_{s,I_s} \mathbb 1\{I_s = i\} / p_{s,i}`,

    .. math:: p_{t,i} \propto \exp(-\eta_t \hat L_{t-1,i}).

    Learning rate (:class:`~onlinelearn.hedge.TunedRate` with :math:`c_T = 2`, :math:`c_1 = 1`):
    fixed ``eta``; ``horizon=T``: :math:`\eta = \sqrt{2\ln K / (TK)}`, for which
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
    horizon_c, anytime_c = 2.0, 1.0
    state_fields = fields(t=Int(), L_hat=Vector(nonneg=True, allow_inf=True))

    @property
    def weights(self) -> np.ndarray:
        """``p_{t,i} ∝ exp(-eta_t (Lhat_i - min Lhat))``, a fresh float64 array."""
        return softmin_weights(self.L_hat, self.learning_rate())

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
    n, eta, horizon
        As :class:`Exp3`.
    gamma : float, optional
        Fixed implicit-exploration parameter ``>= 0`` (default ``eta_t / 2``).
    """

    hyper_fields = fields(**TunedRate.hyper_fields, gamma=OrNone(Real()))

    def __init__(
        self,
        n: int,
        eta: float | None = None,
        gamma: float | None = None,
        horizon: int | None = None,
    ) -> None:
        super().__init__(n, eta=eta, horizon=horizon, gamma=gamma)

    def exploration(self, t: int | None = None) -> float:
        """The implicit-exploration parameter ``gamma_t`` of the next round."""
        return self.learning_rate(t) / 2.0 if self.gamma is None else self.gamma

    def _estimate(self, p_arm: float, loss: float) -> float:
        return loss / max(p_arm + self.exploration(), _P_FLOOR)


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
    state_fields = fields(counts=Vector(nonneg=True, integer=True), rewards=Vector(nonneg=True))

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        check_at_most(values["rewards"], values["counts"], "state['rewards']",
                      "rewards_j <= counts_j (each reward is in [0, 1])")
        return values

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
