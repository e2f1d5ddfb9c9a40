"""NormalHedge (exact scale by a safeguarded Halley solve) and AdaNormalHedge (closed form)."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from .base import Int, Learner, Real, Vector, check_at_most, check_int, check_losses, fields

_MAX_ITER = 100
# A Halley step this small leaves an error below 1e-17 (see solve_normalhedge_scale), under
# the rounding of v itself, so the step is the last one.
_LAST_STEP = 1e-6
# A loaded v may differ from the solved scale of the loaded R by this much (relative): the
# solver's own rounding is ~1e-15.
_V_TOL = 1e-12


def solve_normalhedge_scale(R: np.ndarray, v0: float) -> tuple[float, int]:
    r"""Solve NormalHedge's scale equation for the regrets ``R``; return ``(v, iterations)``.

    The scale is returned in the scale-free variable ``v = M^2 / (2 c)``, with
    :math:`M = \max_i [R_i]_+`, so the scale itself is ``c = M^2 / (2 v)``; ``v = 0`` (and no
    iteration) when no regret is positive. With :math:`a_i = ([R_i]_+ / M)^2 \in [0, 1]`
    (``a_i = 0`` for the experts without positive regret), the equation
    :math:`\frac1N \sum_i \exp([R_i]_+^2 / (2c)) = e` (Chaudhuri, Freund, Hsu 2009, Figure 1)
    reads

    .. math:: g(v) = \ln\Bigl(\sum_i e^{v a_i}\Bigr) - \ln N - 1 = 0.

    ``g`` is a log-sum-exp of linear functions of ``v``: increasing and convex, with
    :math:`g' = \mathbb E_w[a]` and :math:`g'' = \mathrm{Var}_w(a) \le 1/4` under the weights
    :math:`w_i \propto e^{v a_i}`. The root lies in the bracket

    .. math:: \max\Bigl(1, \ln\bigl(1 + \tfrac{e - 1}{\mu}\bigr)\Bigr) \le v
              \le \min\Bigl(1 + \ln N, \tfrac1\mu\Bigr), \qquad \mu = \tfrac1N \sum_i a_i,

    (the lower bound from :math:`e^{v a} \le 1 + a (e^v - 1)` on [0, 1], exact when every
    ``a_i`` is 0 or 1; the upper bound from Jensen's inequality; inside the reference bracket
    :math:`c \in [M^2/(2(1+\ln N)), M^2/2]`). From the warm start ``v0`` (the previous round's
    ``v``, clipped into the bracket) the solver takes Halley steps
    :math:`v \leftarrow v - 2 g g' / (2 g'^2 - g g'')` (Newton's step where Halley's would be
    more than twice as long), kept inside the shrinking sign bracket (bisection otherwise).
    Halley converges cubically, :math:`|e_{k+1}| \approx |g''^2 / (4 g'^2) - g''' / (6 g')|\,
    |e_k|^3`; at the root :math:`g' \ge (1 - 1/e) / v` (from :math:`u e^u \ge e^u - 1`), so
    the constant is below :math:`(1 + \ln N)^2 / 16`, and a step of at most ``1e-6`` (the
    last one taken) leaves an error below ``1e-17`` for any ``N < 10^5`` -- less than the
    rounding of ``v``. Each iteration is one exponential of the positive ``a_i`` and one
    matrix product for the three sums. The variable ``v`` is scale-free: :math:`1 \le e^{v a_i} \le
    e N` neither overflows nor underflows, whatever the size of the regrets.

    Parameters
    ----------
    R : ndarray
        The regrets, shape ``(N,)``.
    v0 : float
        Warm start (the previous round's ``v``; 0 for none).

    Returns
    -------
    v : float
        The root; 0.0 when no regret is positive.
    iterations : int
        Evaluations of ``g`` and its derivatives (0 when there is nothing to solve).
    """
    n = R.size
    m = float(R.max())
    if not m > 0.0:
        return 0.0, 0
    log_n1 = math.log(n) + 1.0
    a = np.square(R[R > 0.0] / m)  # the positive regrets; the others have a_i = 0
    n_zero = n - a.size
    mu = float(a.sum()) / n
    hi = min(log_n1, 1.0 / mu)
    lo = min(max(1.0, math.log1p((math.e - 1.0) / mu)), hi)
    if lo == hi:  # a point (N = 1, or every regret equal to M > 0: mu = 1)
        return lo, 0
    powers = np.empty((3, a.size))  # rows a^0, a^1, a^2: one product gives the three sums
    powers[0], powers[1], powers[2] = 1.0, a, a * a
    v = min(max(v0, lo), hi)
    for k in range(1, _MAX_ITER + 1):
        s, s1, s2 = (powers @ np.exp(v * a)).tolist()
        s += n_zero  # e^{v 0} = 1 for each expert without positive regret
        g = math.log(s) - log_n1
        g1 = s1 / s
        gg2 = g * (s2 / s - g1 * g1)
        step = 2.0 * g * g1 / (2.0 * g1 * g1 - gg2) if gg2 < g1 * g1 else g / g1
        if abs(step) <= _LAST_STEP:
            return v - step, k
        if g > 0.0:
            hi = v
        else:
            lo = v
        v -= step
        if not lo <= v <= hi:  # an end of the bracket may be the root (every a_i 0 or 1: lo)
            v = 0.5 * (lo + hi)
    return v, _MAX_ITER


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
    round; the weights are computed as :math:`z_i e^{v z_i^2}` with
    :math:`z_i = [R_i]_+ / \max_j [R_j]_+` and :math:`v = \max_j [R_j]_+^2 / (2 c_t)`, which
    is the formula above times :math:`c_t / \max_j [R_j]_+`: since :math:`v \le 1 + \ln N`,
    no term overflows and the largest, :math:`e^v`, is at least ``e`` (no underflow to
    all-zero), whatever the size of the regrets.

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
    ``update`` is O(n) per Halley step and takes 1-3 steps when warm-started
    (``python -m onlinelearn.bench`` reports the count on each loss family).
    ``load_state_dict`` checks that ``v`` is the solved scale of ``R`` (one Halley step).
    """

    full_information = True
    # v = max [R]_+^2 / (2 c_t): 0 while no regret is positive, else in [1, 1 + ln n]
    state_fields = fields(t=Int(), v=Real(), R=Vector())

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        R, v = values["R"], values["v"]
        check_at_most(np.abs(R), values["t"], "state['R']",
                      "|R_i| <= t (each round's regret is in [-1, 1])")
        solved = solve_normalhedge_scale(R, v)[0]
        if not abs(v - solved) <= _V_TOL * max(solved, 1.0):
            raise ValueError(f"state['v'] = {v!r} is not the scale of state['R']: the scale "
                             f"equation for these regrets gives v = {solved!r}")
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
        w = z * np.exp(self.v * (z * z))
        return w / w.sum()

    def update(self, losses: Any) -> Self:
        """Observe the loss vector ``losses`` (shape ``(n,)``, entries in [0, 1])."""
        arr = check_losses(losses, self.n)
        R = self.R + (float(self.weights @ arr) - arr)
        self.R, self.v = R, solve_normalhedge_scale(R, self.v)[0]
        self.t += 1
        return self

    def warm_start(self, source: NormalHedge, rounds: int) -> Self:
        r"""Start from ``source``'s regrets shrunk to the evidence of ``rounds`` rounds.

        :math:`R_0 = R_{source} \, m / t_{source}`, :math:`t_0 = m` with
        :math:`m = \min(\text{rounds}, t_{source})`. The weights are ``source``'s (they are
        invariant to scaling the regrets: the scale :math:`c` scales with :math:`R^2`, so ``v``
        is unchanged), and this learner's own rounds outweigh the prior after about ``m`` of
        them; its regret bound gains at most ``m`` (:math:`|R_{0,i}| \le m`). A ``source``
        with no round (or ``rounds = 0``) leaves this learner as it is. Used to start a new
        request from its stream's learner (``spec_adapters.selection.session.Stream``).

        Raises
        ------
        ValueError
            ``source`` is not a NormalHedge over as many experts, or ``rounds < 0``.
        """
        if not isinstance(source, NormalHedge) or source.n != self.n:
            raise ValueError(f"warm_start needs a NormalHedge over {self.n} experts, got "
                             f"{source!r}")
        m = min(check_int(rounds, "rounds", low=0), source.t)
        if m == 0:
            return self
        self.R, self.v, self.t = source.R * (m / source.t), source.v, m
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

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        C = values["C"]
        check_at_most(np.abs(values["R"]), C, "state['R']",
                      "|R_i| <= C_i (C_i sums the absolute values of the regrets that sum to R_i)")
        check_at_most(C, values["t"], "state['C']",
                      "C_i <= t (each round's regret is in [-1, 1])")
        return values

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
