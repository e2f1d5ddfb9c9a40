"""Regret bounds of the learners in :mod:`onlinelearn`, as plain functions.

Notation: ``n`` experts / arms, ``T`` rounds, losses in [0, 1], regret
``R_T = sum_t <p_t, l_t> - min_i L_{T,i}`` for full-information learners (a deterministic
quantity), pseudo-regret or realized regret for bandits as stated per function. PLG is
Cesa-Bianchi & Lugosi, *Prediction, Learning, and Games*, 2006. Each function returns a
``float``; tests in ``tests/onlinelearn`` check the learners against exactly these numbers, and
docs/onlinelearn.md records which constants were verified and how.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def _log_n(n: int) -> float:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return math.log(n)


def hedge_fixed_bound(n: int, T: int, eta: float) -> float:
    """Hedge with a fixed learning rate: ``ln n / eta + eta T / 8`` (PLG Theorem 2.2).

    The proof bounds each round's loss by the mix loss plus ``eta / 8`` (Hoeffding's lemma).
    """
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta}")
    return _log_n(n) / eta + eta * T / 8.0


def hedge_tuned_bound(n: int, T: int) -> float:
    """Hedge with ``eta = sqrt(8 ln n / T)``: ``sqrt((T / 2) ln n)`` (PLG Theorem 2.2)."""
    return math.sqrt(T / 2.0 * _log_n(n))


def hedge_anytime_bound(n: int, T: int) -> float:
    """Hedge with ``eta_t = sqrt(8 ln n / t)``: ``2 sqrt((T/2) ln n) + sqrt(ln n / 8)``.

    PLG Theorem 2.3; holds simultaneously for every ``T``.
    """
    log_n = _log_n(n)
    return 2.0 * math.sqrt(T / 2.0 * log_n) + math.sqrt(log_n / 8.0)


def adahedge_bound(n: int, T: int, L_star: float) -> float:
    """AdaHedge on [0, 1] losses: ``2 sqrt(L*(T - L*)/T ln n) + 16/3 ln n + 2``.

    de Rooij, van Erven, Grünwald, Koolen (JMLR 2014), Theorem 8; ``L*`` is the best expert's
    cumulative loss.
    """
    log_n = _log_n(n)
    if T <= 0:
        return 16.0 / 3.0 * log_n + 2.0
    spread = max(0.0, L_star * (T - L_star) / T)
    return 2.0 * math.sqrt(spread * log_n) + 16.0 / 3.0 * log_n + 2.0


def normalhedge_bound(n: int, t: int, eps: float, delta: float) -> float:
    """NormalHedge's regret to the top ``eps``-quantile after ``t`` rounds.

    ``sqrt((1 + ln(1/eps)) (3 (1 + 50 delta) t + 16 ln^2 n / delta (10.2 / delta^2 + ln n)))``
    for ``0 < eps <= 1`` and ``0 < delta <= 1/2`` (Chaudhuri, Freund, Hsu 2009, Theorem 1).
    With ``eps = 1/n`` it bounds the regret to the best expert.
    """
    if not 0.0 < eps <= 1.0:
        raise ValueError(f"eps must be in (0, 1], got {eps}")
    if not 0.0 < delta <= 0.5:
        raise ValueError(f"delta must be in (0, 1/2], got {delta}")
    log_n = _log_n(n)
    inner = 3.0 * (1.0 + 50.0 * delta) * t + 16.0 * log_n**2 / delta * (
        10.2 / delta**2 + log_n
    )
    return math.sqrt((1.0 + math.log(1.0 / eps)) * inner)


def adanormalhedge_bound(n: int, T: int, C: float) -> float:
    """AdaNormalHedge's regret to one expert with ``C = C_{T,i} = sum_t |r_{t,i}|``.

    ``sqrt(3 C (ln n + ln B + ln(1 + ln n)))`` with ``B = 5/2 + 3/2 ln(1 + T)`` (Luo &
    Schapire 2015, Theorem 1 with a point-mass competitor and the uniform prior; ``B`` is the
    paper's bound on ``1 + 3/2 sum_i q_i (1 + ln(1 + C_{T,i}))``). ``C <= T``.
    """
    log_n = _log_n(n)
    B = 2.5 + 1.5 * math.log1p(T)
    return math.sqrt(3.0 * max(C, 0.0) * (log_n + math.log(B) + math.log1p(log_n)))


def exp3_bound(n: int, T: int, anytime: bool = False) -> float:
    """EXP3 (loss form) pseudo-regret: ``sqrt(2 T n ln n)`` with ``eta = sqrt(2 ln n/(T n))``.

    With the anytime rate ``eta_t = sqrt(ln n / (t n))``: ``2 sqrt(T n ln n)``. Bubeck &
    Cesa-Bianchi (2012), Theorem 3.1.
    """
    log_n = _log_n(n)
    if anytime:
        return 2.0 * math.sqrt(T * n * log_n)
    return math.sqrt(2.0 * T * n * log_n)


def exp3ix_bound(n: int, T: int, delta: float) -> float:
    """EXP3-IX realized regret, with probability at least ``1 - delta``.

    ``2 sqrt(2 n T ln n) + (sqrt(2 n T / ln n) + 1) ln(2 / delta)`` for
    ``eta = 2 gamma = sqrt(2 ln n / (n T))`` (Neu 2015, Theorem 1). Requires ``n >= 2``.
    """
    if n < 2:
        raise ValueError(f"the EXP3-IX bound needs n >= 2 arms, got {n}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    log_n = math.log(n)
    return 2.0 * math.sqrt(2.0 * n * T * log_n) + (
        math.sqrt(2.0 * n * T / log_n) + 1.0
    ) * math.log(2.0 / delta)


def ucb1_bound(gaps: Iterable[float], T: int) -> float:
    """UCB1 expected pseudo-regret on stochastic [0, 1] rewards with the given gaps.

    ``8 sum_{gap > 0} ln T / gap + (1 + pi^2 / 3) sum gap`` (Auer, Cesa-Bianchi, Fischer 2002,
    Theorem 1).
    """
    gaps = [float(g) for g in gaps]
    if any(g < 0 for g in gaps):
        raise ValueError(f"gaps must be >= 0, got {gaps}")
    log_t = math.log(T) if T > 1 else 0.0
    return sum(8.0 * log_t / g for g in gaps if g > 0) + (1.0 + math.pi**2 / 3.0) * sum(gaps)


def ucb1_pulls_bound(gap: float, T: int) -> float:
    """UCB1's expected plays of an arm with gap ``gap > 0``: ``8 ln T / gap^2 + 1 + pi^2/3``.

    Auer, Cesa-Bianchi, Fischer (2002), proof of Theorem 1.
    """
    if not gap > 0:
        raise ValueError(f"gap must be > 0, got {gap}")
    return 8.0 * math.log(T) / gap**2 + 1.0 + math.pi**2 / 3.0


def delayed_hedge_bound(n: int, T: int, eta: float, D: float) -> float:
    """Fixed-eta Hedge applying losses on arrival: ``ln n/eta + eta T/8 + (e^eta - 1) D / 2``.

    ``D = sum_t`` (number of rounds ``s < t`` whose loss is still missing when ``p_t`` is
    formed); REFERENCES.md ("derived here"). Derivation: the undelayed forecaster's ``p*_t`` is
    the delayed ``p_t`` tilted by ``exp(-eta l_s)`` for each missing round ``s``; one tilt by a
    vector in ``[0, eta]`` moves ``<p, l>`` (``l`` in [0, 1]^n) by at most ``tanh(eta / 4)``
    (worst case: two-point support), so ``sum_t <p_t - p*_t, l_t> <= tanh(eta/4) D``, and
    ``tanh(eta/4) <= eta/4 <= (e^eta - 1)/2``. Add PLG Theorem 2.2 for ``p*``. The constant
    ``(e^eta - 1)/2`` is valid but about twice ``tanh(eta/4)`` for small ``eta``; tilting by
    all ``d_t`` missing losses of round ``t`` at once gives the tighter
    ``sum_t tanh(eta d_t / 4)``.
    """
    return hedge_fixed_bound(n, T, eta) + (math.exp(eta) - 1.0) * D / 2.0
