"""NormalHedge (exact scale by a safeguarded Newton solve) and AdaNormalHedge (closed form)."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from .base import Int, Learner, Real, Vector, check_losses, fields

_NEWTON_MAX_ITER = 100


def solve_normalhedge_scale(z: np.ndarray, n_zero: int, n: int, v0: float) -> float:
    r"""Solve NormalHedge's scale equation in the scale-free variable ``v = M^2 / (2 c)``.

    With :math:`M = \max_i [R_i]_+`, :math:`z_i = [R_i]_+ / M \in (0, 1]` for the experts with
    positive regret and ``n_zero`` experts without, the equation
    :math:`\frac1N \sum_i \exp([R_i]_+^2 / (2c)) = e` (Chaudhuri, Freund, Hsu 2009, Figure 1)
    reads

    .. math::

        g(v) = \ln\Bigl(n_0 + \sum_i e^{v z_i^2}\Bigr) - \ln N - 1 = 0,
        \qquad v \in [1, 1 + \ln N].

    The bracket is the reference bracket :math:`c \in [M^2/(2(1+\ln N)), M^2/2]`: at ``v = 1``
    every term is at most ``e`` so ``g <= 0``, at ``v = 1 + ln N`` the largest term alone is
    ``N e`` so ``g >= 0``. ``g`` is increasing and convex in ``v`` (a log-sum-exp of linear
    functions), so Newton's method converges monotonically after at most one overshoot; each
    step is kept inside the shrinking sign bracket (bisection otherwise). Evaluated with the
    shift ``e^{v (z^2 - 1)} <= 1``, so nothing overflows for any regret magnitude.

    Parameters
    ----------
    z : ndarray
        Positive regrets divided by their maximum (so ``max z == 1``).
    n_zero : int
        Number of experts with non-positive regret (each contributes ``e^0 = 1``).
    n : int
        Total number of experts ``N``.
    v0 : float
        Warm start (the previous round's ``v``); clipped into the bracket.

    Returns
    -------
    float
        The root ``v``; the NormalHedge scale is ``c = M^2 / (2 v)``.
    """
    log_n1 = math.log(n) + 1.0
    lo, hi = 1.0, log_n1
    if hi <= lo:  # N = 1: the bracket is a single point
        return lo
    v = min(max(v0, lo), hi)
    z2m1 = z * z - 1.0
    z2 = z2m1 + 1.0
    for _ in range(_NEWTON_MAX_ITER):
        e = np.exp(v * z2m1)
        s = n_zero * math.exp(-v) + float(e.sum())
        g = v + math.log(s) - log_n1
        if g > 0.0:
            hi = v
        elif g < 0.0:
            lo = v
        else:
            return v
        step = g * s / float(e @ z2)  # g / g'(v), g'(v) = sum z^2 e^{v z^2} / sum e^{v z^2}
        v_new = v - step
        if not lo <= v_new <= hi:
            v_new = 0.5 * (lo + hi)
        if abs(v_new - v) <= 4e-16 * v:
            return v_new
        v = v_new
    return v


class NormalHedge(Learner):
    r"""NormalHedge (Chaudhuri, Freund, Hsu, NIPS 2009, Figure 1): parameter-free hedging.

    With the regrets :math:`R_{t,i} = \sum_{s \le t} (\langle p_s, \ell_s\rangle - \ell_{s,i})`
    and the scale :math:`c_t > 0` solving

    .. math:: \frac1N \sum_{i=1}^N \exp\Bigl(\frac{[R_{t,i}]_+^2}{2 c_t}\Bigr) = e,

    the next distribution is

    .. math::

        p_{t+1,i} \propto \frac{[R_{t,i}]_+}{c_t}\exp\Bigl(\frac{[R_{t,i}]_+^2}{2 c_t}\Bigr),

    and uniform when no regret is positive (the formula would be 0/0 there). ``c_t`` is found
    exactly (to rounding) by :func:`solve_normalhedge_scale`, warm-started from the previous
    round; the weights are computed as :math:`z_i e^{v (z_i^2 - 1)}` with
    :math:`z_i = [R_i]_+ / \max_j [R_j]_+` and :math:`v = \max_j [R_j]_+^2 / (2 c_t)`, which
    is the formula above divided by its largest term (no overflow, no underflow to all-zero).

    Regret (CFH 2009, Theorem 1): for every :math:`0 < \epsilon \le 1` and
    :math:`0 < \delta \le 1/2`, the regret to the top :math:`\epsilon`-quantile of experts is at
    most

    .. math::

        \sqrt{(1 + \ln(1/\epsilon))\Bigl(3(1+50\delta)t
              + \frac{16 \ln^2 N}{\delta}\bigl(\frac{10.2}{\delta^2} + \ln N\bigr)\Bigr)};

    with :math:`\epsilon = 1/N` this bounds the regret to the best expert.

    Parameters
    ----------
    n : int
        Number of experts, ``n >= 1``.

    Notes
    -----
    ``update`` is O(n) per Newton step and takes 2-4 steps when warm-started.
    """

    full_information = True
    # v = max [R]_+^2 / (2 c_t): 0 while no regret is positive, else in [1, 1 + ln n]
    state_fields = fields(t=Int(), v=Real(), R=Vector())

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        v, hi = values["v"], 1.0 + math.log(self.n)
        if not (v == 0.0 or 1.0 - 1e-12 <= v <= hi + 1e-12):
            raise ValueError(f"state['v'] must be 0 or in [1, 1 + ln n] = [1, {hi}], got {v}")
        return values

    @property
    def scale(self) -> float:
        """The current scale ``c_t = max [R]_+^2 / (2 v)`` (``nan`` when no regret is positive)."""
        m = float(self.R.max())
        return m * m / (2.0 * self.v) if m > 0.0 and self.v > 0.0 else math.nan

    @property
    def weights(self) -> np.ndarray:
        """``p_i ∝ [R_i]_+ exp([R_i]_+^2 / (2c))``; uniform when no regret is positive."""
        m = float(self.R.max())
        if not m > 0.0:
            return np.full(self.n, 1.0 / self.n)
        z = np.maximum(self.R, 0.0) / m
        w = z * np.exp(self.v * (z * z - 1.0))
        return w / w.sum()

    def update(self, losses: Any) -> Self:
        """Observe the loss vector ``losses`` (shape ``(n,)``, entries in [0, 1])."""
        arr = check_losses(losses, self.n)
        p = self.weights
        R = self.R + (float(p @ arr) - arr)
        m = float(R.max())
        v = 0.0
        if m > 0.0:
            positive = R > 0.0
            z = R[positive] / m
            v = solve_normalhedge_scale(z, self.n - z.size, self.n, self.v if self.v else 1.0)
        self.R, self.v = R, v
        self.t += 1
        return self


class AdaNormalHedge(Learner):
    r"""AdaNormalHedge (Luo & Schapire, COLT 2015, Algorithm 1) with the uniform prior.

    With instantaneous regrets :math:`r_{t,i} = \langle p_t, \ell_t\rangle - \ell_{t,i}`,
    :math:`R_{t,i} = \sum_{s\le t} r_{s,i}`, :math:`C_{t,i} = \sum_{s \le t} |r_{s,i}|`, the
    potential :math:`\Phi(R, C) = \exp([R]_+^2 / (3C))` and

    .. math::

        w(R, C) = \tfrac12\bigl(\Phi(R+1, C+1) - \Phi(R-1, C+1)\bigr),
        \qquad p_{t+1,i} \propto w(R_{t,i}, C_{t,i}),

    uniform when every ``w`` is 0 (no expert has ``R > -1``). Closed form: no line search.
    Computed in log space, :math:`\ln w = a + \ln(-\mathrm{expm1}(b - a))` with
    :math:`a = [R+1]_+^2 / (3(C+1))`, :math:`b = [R-1]_+^2 / (3(C+1))`, so ``exp(a)`` never
    overflows even for ``C ~ 10^5``.

    Regret (Luo & Schapire 2015, Theorem 1, competitor ``u = e_i``, uniform prior): for every
    expert ``i``,

    .. math::

        R_{T,i} \le \sqrt{3 C_{T,i}\bigl(\ln N + \ln B + \ln(1 + \ln N)\bigr)},
        \qquad B = \tfrac52 + \tfrac32 \ln(1 + T)

    (``B`` upper-bounds the paper's :math:`1 + \frac32\sum_i q_i(1 + \ln(1 + C_{T,i}))`), and
    :math:`C_{T,i} \le T`.

    Parameters
    ----------
    n : int
        Number of experts, ``n >= 1``.
    """

    full_information = True
    state_fields = fields(t=Int(), R=Vector(), C=Vector(nonneg=True))

    @property
    def weights(self) -> np.ndarray:
        """``p_i ∝ Phi(R_i + 1, C_i + 1) - Phi(R_i - 1, C_i + 1)``; uniform if all are 0."""
        C3 = 3.0 * (self.C + 1.0)
        a = np.square(np.maximum(self.R + 1.0, 0.0)) / C3
        alive = a > 0.0  # R > -1 (up to underflow of a): w > 0
        if not alive.any():
            return np.full(self.n, 1.0 / self.n)
        a, R, C3 = a[alive], self.R[alive], C3[alive]
        b = np.square(np.maximum(R - 1.0, 0.0)) / C3
        log_w = a + np.log(-np.expm1(b - a))
        w = np.zeros(self.n)
        w[alive] = np.exp(log_w - log_w.max())
        return w / w.sum()

    def update(self, losses: Any) -> Self:
        """Observe the loss vector ``losses`` (shape ``(n,)``, entries in [0, 1])."""
        arr = check_losses(losses, self.n)
        r = float(self.weights @ arr) - arr
        self.R = self.R + r
        self.C = self.C + np.abs(r)
        self.t += 1
        return self
