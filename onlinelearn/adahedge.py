"""AdaHedge: Hedge with the learning rate tuned online from the cumulative mixability gap."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from .base import Int, Learner, Real, Vector, check_at_most, check_losses, fields
from .hedge import check_cumulative_losses


class AdaHedge(Learner):
    r"""AdaHedge (de Rooij, van Erven, Grünwald, Koolen, JMLR 2014, Section 2 and Figure 1).

    Hedge whose learning rate is set from the cumulative *mixability gap*
    :math:`\Delta_{t-1}`:

    .. math::

        \eta_t = \frac{\ln N}{\Delta_{t-1}}, \qquad
        p_{t,i} \propto \exp(-\eta_t L_{t-1,i})

    (follow-the-leader, uniform over the current leaders, while :math:`\Delta_{t-1} = 0`).
    With the mix loss :math:`M_\eta(L) = \min_j L_j - \frac1\eta
    \ln\bigl(\frac1N \sum_i e^{-\eta (L_i - \min_j L_j)}\bigr)` (and :math:`M_\infty(L) =
    \min_j L_j`), after observing :math:`\ell_t`

    .. math::

        \delta_t = \langle p_t, \ell_t\rangle - \bigl(M_{\eta_t}(L_t) - M_{\eta_t}(L_{t-1})\bigr)
        \ge 0, \qquad \Delta_t = \Delta_{t-1} + \delta_t

    (``max(0, .)`` guards against rounding). The regret equals
    :math:`\Delta_T + M_{\eta}`-terms and satisfies, for losses in [0, 1] (de Rooij et al.
    2014, Theorem 8),

    .. math::

        R_T \le 2\sqrt{\frac{L^*_T (T - L^*_T)}{T}\ln N} + \frac{16}{3}\ln N + 2.

    AdaHedge needs no parameter beyond the number of experts ``n >= 1``, and its weights are
    invariant under ``l -> a l + b`` for any ``a > 0`` (both :math:`\Delta` and :math:`1/\eta`
    scale by ``a``; shifts cancel). ``update`` is O(n): one exponential of the cumulative losses
    (shared by the weights and the old mix loss) and one for the new mix loss.
    """

    full_information = True
    state_fields = fields(t=Int(), Delta=Real(), L=Vector(nonneg=True, allow_inf=True))

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self._log_n = math.log(self.n)

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        check_cumulative_losses(values)
        check_at_most(values["Delta"], values["t"], "state['Delta']",
                      "Delta <= t (each round's mixability gap is at most its loss, <= 1)")
        return values

    @property
    def learning_rate(self) -> float:
        """``eta_t = ln N / Delta_{t-1}`` for the next round (``inf``: follow the leader).

        With one expert every rate gives the same (only) distribution; ``inf`` avoids ``0 / 0``
        when rounding leaves a tiny positive ``Delta``.
        """
        if self.Delta <= 0.0 or self.n == 1:
            return math.inf
        return self._log_n / self.Delta

    def _mix(self, L: np.ndarray, eta: float) -> tuple[np.ndarray, float]:
        """Return ``(p, M_eta(L))``: the Hedge weights at ``L`` and the mix loss."""
        m = L.min()
        if math.isinf(eta):
            leaders = (m == L).astype(np.float64)
            return leaders / leaders.sum(), float(m)
        e = np.exp(-eta * (L - m))
        s = e.sum()
        return e / s, float(m - math.log(s / self.n) / eta)

    @property
    def weights(self) -> np.ndarray:
        """``p_{t,i} ∝ exp(-eta_t (L_{t-1,i} - min L))``, or uniform on the leaders (FTL)."""
        return self._mix(self.L, self.learning_rate)[0]

    def update(self, losses: Any) -> Self:
        """Observe the loss vector ``losses`` (shape ``(n,)``, entries in [0, 1])."""
        arr = check_losses(losses, self.n)
        eta = self.learning_rate
        p, m_old = self._mix(self.L, eta)
        L = self.L + arr
        m_new = self._mix(L, eta)[1]
        delta = float(p @ arr) - (m_new - m_old)
        self.L = L
        self.Delta += max(0.0, delta)
        self.t += 1
        return self
