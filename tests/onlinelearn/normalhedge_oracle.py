"""An independent oracle for NormalHedge's scale: scipy's brentq on the paper's equation in c."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp


def brentq_v(R: np.ndarray) -> float:
    """``v = M^2 / (2c)`` with ``c`` solving ``(1/N) sum_i exp([R_i]_+^2 / (2c)) = e``.

    CFH 2009, Figure 1, solved by ``brentq`` in ``c`` on the reference bracket
    ``[M^2 / (2 (1 + ln N)), M^2 / 2]`` to ``rtol = 4 eps``; 0.0 when no regret is positive.
    Needs ``M^2`` far above its ``xtol = 1e-300``: ``M > 1e-140``.
    """
    n = R.size
    Rp = np.maximum(R, 0.0)
    M = float(Rp.max())
    if not M > 0.0:
        return 0.0
    f = lambda c: logsumexp(Rp**2 / (2 * c)) - math.log(n) - 1  # noqa: E731
    lo, hi = M**2 / (2 * (1 + math.log(n))), M**2 / 2
    # f(hi) <= 0 <= f(lo); f(hi) is ~0 up to rounding when all positive regrets are equal
    if lo == hi or f(hi) >= -1e-15:
        return 1.0
    c = brentq(f, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps)
    return M**2 / (2 * c)
