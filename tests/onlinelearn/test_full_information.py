"""Regret of the full-information learners against their exact bounds, and naive oracles.

Regret is measured on the expected loss ``<p_t, l_t>``, so every check is deterministic. Each
bound is checked at every prefix ``t <= T`` where the theorem is anytime.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis import target as _target
from hypothesis.control import currently_in_test_context
from hypothesis.extra.numpy import arrays
from scipy.special import logsumexp

import onlinelearn as ol
from onlinelearn import bounds
from tests.onlinelearn.normalhedge_oracle import brentq_v

TOL = 1e-9


def target(value: float, label: str) -> None:
    """``hypothesis.target`` inside a Hypothesis test, a no-op in a plain pytest test."""
    if currently_in_test_context():
        _target(value, label=label)

# ---------------------------------------------------------------- helpers


def play(learner, losses: np.ndarray) -> np.ndarray:
    """Run a full-information learner; return the weights p_t it played, shape (T, n)."""
    ps = np.empty_like(losses)
    for t, loss in enumerate(losses):
        ps[t] = learner.weights
        learner.update(loss)
    return ps


def regret_path(ps: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """R_t = sum_{s<=t} <p_s, l_s> - min_i L_{t,i} for t = 1..T."""
    learner_loss = np.cumsum(np.einsum("ti,ti->t", ps, losses))
    return learner_loss - np.cumsum(losses, axis=0).min(axis=1)


def check_path(name: str, regrets: np.ndarray, bound_path: np.ndarray) -> None:
    gap = regrets - bound_path
    target(float(gap.max()), label=f"{name}: regret - bound")
    worst = int(gap.argmax())
    assert gap[worst] <= TOL * (1 + worst), (
        f"{name}: regret {regrets[worst]:.6g} exceeds bound {bound_path[worst]:.6g} at "
        f"t={worst + 1}"
    )


# Each case: learner factory (n, T) and the bound on R_t for every prefix t = 1..T.
def _hedge_fixed(eta):
    return (
        lambda n, T: ol.Hedge(n, eta=eta),
        lambda n, T, losses, ps: np.array(
            [bounds.hedge_fixed_bound(n, t, eta) for t in range(1, T + 1)]
        ),
    )


CASES = {
    "hedge_fixed_eta_0.1": _hedge_fixed(0.1),
    "hedge_fixed_eta_1": _hedge_fixed(1.0),
    "hedge_fixed_eta_4": _hedge_fixed(4.0),
    # the tuned bound holds at the horizon T only
    "hedge_tuned": (
        lambda n, T: ol.Hedge(n, horizon=T),
        lambda n, T, losses, ps: np.r_[np.full(T - 1, np.inf), bounds.hedge_tuned_bound(n, T)],
    ),
    "hedge_anytime": (
        lambda n, T: ol.Hedge(n),
        lambda n, T, losses, ps: np.array(
            [bounds.hedge_anytime_bound(n, t) for t in range(1, T + 1)]
        ),
    ),
    "adahedge": (
        lambda n, T: ol.AdaHedge(n),
        lambda n, T, losses, ps: np.array(
            [
                bounds.adahedge_bound(n, t, float(L.min()))
                for t, L in enumerate(np.cumsum(losses, axis=0), start=1)
            ]
        ),
    ),
    "normalhedge": (
        lambda n, T: ol.NormalHedge(n),
        lambda n, T, losses, ps: np.array(
            [bounds.normalhedge_bound(n, t, eps=1.0 / n, delta=0.5) for t in range(1, T + 1)]
        ),
    ),
}


def adanormalhedge_check(losses: np.ndarray) -> None:
    """AdaNormalHedge: R_{t,i} <= sqrt(3 C_{t,i} (...)) for every expert i and every t."""
    T, n = losses.shape
    ps = play(ol.AdaNormalHedge(n), losses)
    r = np.einsum("ti,ti->t", ps, losses)[:, None] - losses
    R, C = np.cumsum(r, axis=0), np.cumsum(np.abs(r), axis=0)
    B = np.array([[bounds.adanormalhedge_bound(n, t, 1.0)] for t in range(1, T + 1)])
    bound = B * np.sqrt(C)  # the bound is sqrt(C) * (its value at C = 1)
    gap = R - bound
    target(float(gap.max()), label="adanormalhedge: regret - bound")
    assert gap.max() <= TOL * T, f"AdaNormalHedge regret exceeds its bound by {gap.max():.3g}"


def check_all(losses: np.ndarray, names=None) -> None:
    T, n = losses.shape
    for name in names or CASES:
        factory, bound = CASES[name]
        ps = play(factory(n, T), losses)
        check_path(name, regret_path(ps, losses), bound(n, T, losses, ps))
    if names is None or "adanormalhedge" in names:
        adanormalhedge_check(losses)


ALL = [*CASES, "adanormalhedge"]

# ---------------------------------------------------------------- Hypothesis-drawn losses

unit = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)


# For the brentq oracle, which works with c ~ M^2 directly: no losses in (0, 1e-6), so regrets
# are never so small that M^2 underflows (the learner itself only uses v = M^2 / (2c)).
unit_no_tiny = unit.map(lambda x: 0.0 if x < 1e-6 else x)


@st.composite
def loss_matrices(draw, max_n=8, max_t=40, elements=unit):
    n = draw(st.integers(1, max_n))
    T = draw(st.integers(1, max_t))
    return draw(arrays(np.float64, (T, n), elements=elements))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(losses=loss_matrices())
def test_regret_within_bound_on_drawn_losses(losses):
    check_all(losses)


@settings(max_examples=40, deadline=None)
@given(losses=loss_matrices(max_n=3, max_t=40), eta=st.floats(0.01, 8.0))
def test_hedge_fixed_eta_regret_within_bound_for_any_eta(losses, eta):
    T, n = losses.shape
    ps = play(ol.Hedge(n, eta=eta), losses)
    bound = np.array([bounds.hedge_fixed_bound(n, t, eta) for t in range(1, T + 1)])
    check_path("hedge_fixed", regret_path(ps, losses), bound)


# ---------------------------------------------------------------- adversarial families


def alternating_best(T: int, n: int, rng) -> np.ndarray:
    """FTL's nemesis: (1/2, 0), then (0, 1), (1, 0), ... on two experts; others lose 1."""
    losses = np.ones((T, n))
    losses[0, :2] = (0.5, 0.0)
    for t in range(1, T):
        losses[t, :2] = (0.0, 1.0) if t % 2 else (1.0, 0.0)
    return losses


def all_equal(T: int, n: int, rng) -> np.ndarray:
    return np.repeat(rng.random((T, 1)), n, axis=1)


def one_zero_column(T: int, n: int, rng) -> np.ndarray:
    losses = rng.random((T, n))
    losses[:, n // 2] = 0.0
    return losses


def one_good_expert(T: int, n: int, rng) -> np.ndarray:
    """Bernoulli(1/2) losses, except expert n-1 which loses Bernoulli(0.3)."""
    losses = (rng.random((T, n)) < 0.5).astype(float)
    losses[:, -1] = rng.random(T) < 0.3
    return losses


def late_switch(T: int, n: int, rng) -> np.ndarray:
    """Expert 0 is best for the first 60% of rounds, expert 1 best overall at the end."""
    losses = np.full((T, n), 0.5)
    cut = int(0.4 * T)
    losses[: T - cut, 0], losses[: T - cut, 1] = 0.2, 0.6
    losses[T - cut :, 0], losses[T - cut :, 1] = 1.0, 0.0
    return losses


FAMILIES = {
    "alternating_best": alternating_best,
    "all_equal": all_equal,
    "one_zero_column": one_zero_column,
    "one_good_expert": one_good_expert,
    "late_switch": late_switch,
}


@settings(max_examples=40, deadline=None)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    n=st.integers(2, 16),
    T=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_regret_within_bound_on_adversarial_families(family, n, T, seed):
    check_all(FAMILIES[family](T, n, np.random.default_rng(seed)))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_regret_within_bound_on_long_horizon(family):
    losses = FAMILIES[family](5_000, 4, np.random.default_rng(7))
    check_all(losses)


def test_regret_within_bound_with_many_experts_and_one_good():
    losses = one_good_expert(300, 2_000, np.random.default_rng(3))
    check_all(losses)


@pytest.mark.parametrize("name", ALL)
def test_regret_is_zero_when_all_experts_lose_the_same(name):
    losses = all_equal(200, 5, np.random.default_rng(0))
    learner = ol.AdaNormalHedge(5) if name == "adanormalhedge" else CASES[name][0](5, 200)
    assert abs(regret_path(play(learner, losses), losses)).max() <= 1e-12


@pytest.mark.parametrize("name", [name for name in ALL if not name.startswith("hedge_fixed")])
def test_average_regret_vanishes_on_alternating_best_expert(name):
    """Sublinear regret: FTL would lose ~T/2 here; every learner must stay far below."""
    T = 4_000
    losses = alternating_best(T, 2, None)
    learner = ol.AdaNormalHedge(2) if name == "adanormalhedge" else CASES[name][0](2, T)
    regret = regret_path(play(learner, losses), losses)[-1]
    assert regret <= 3 * math.sqrt(T * math.log(2)) + 60, regret


# ---------------------------------------------------------------- naive reference oracles


def naive_adahedge(losses: np.ndarray) -> np.ndarray:
    """Straight transcription of de Rooij et al. (2014), Figure 1, in plain Python floats."""
    n = losses.shape[1]
    L, Delta, out = [0.0] * n, 0.0, []
    for loss in losses.tolist():
        eta = math.inf if Delta == 0 or n == 1 else math.log(n) / Delta
        m = min(L)
        if math.isinf(eta):
            w = [1.0 if x == m else 0.0 for x in L]
            mix_old = m
        else:
            w = [math.exp(-eta * (x - m)) for x in L]
            mix_old = m - math.log(sum(w) / n) / eta
        s = sum(w)
        p = [x / s for x in w]
        out.append(p)
        h = sum(a * b for a, b in zip(p, loss, strict=True))
        L = [a + b for a, b in zip(L, loss, strict=True)]
        m2 = min(L)
        if math.isinf(eta):
            mix_new = m2
        else:
            mix_new = m2 - math.log(sum(math.exp(-eta * (x - m2)) for x in L) / n) / eta
        Delta += max(0.0, h - (mix_new - mix_old))
    return np.array(out)


def naive_normalhedge(losses: np.ndarray) -> np.ndarray:
    """CFH 2009 Figure 1 with scipy's brentq on the original equation in c."""
    n = losses.shape[1]
    R, out = np.zeros(n), []
    p = np.full(n, 1.0 / n)
    for loss in losses:
        out.append(p)
        R = R + (p @ loss - loss)
        Rp = np.maximum(R, 0.0)
        M = Rp.max()
        if M <= 0:
            p = np.full(n, 1.0 / n)
            continue
        c = M**2 / (2 * brentq_v(R))
        logw = np.where(Rp > 0, np.log(np.where(Rp > 0, Rp, 1.0) / c) + Rp**2 / (2 * c), -np.inf)
        p = np.exp(logw - logw.max())
        p = p / p.sum()
    return np.array(out)


def naive_adanormalhedge(losses: np.ndarray) -> np.ndarray:
    """Luo & Schapire (2015) Algorithm 1 with the potential evaluated directly (small T only)."""
    n = losses.shape[1]
    R, C, out = np.zeros(n), np.zeros(n), []

    def phi(r, c):
        return np.exp(np.maximum(r, 0.0) ** 2 / (3 * c))

    for loss in losses:
        w = 0.5 * (phi(R + 1, C + 1) - phi(R - 1, C + 1))
        p = w / w.sum() if w.sum() > 0 else np.full(n, 1.0 / n)
        out.append(p)
        r = p @ loss - loss
        R, C = R + r, C + np.abs(r)
    return np.array(out)


# learner -> (its independent reference above, the loss entries drawn for it, rtol)
REFERENCES = {
    "AdaHedge": (ol.AdaHedge, naive_adahedge, unit, 1e-9),
    "NormalHedge": (ol.NormalHedge, naive_normalhedge, unit_no_tiny, 1e-8),
    "AdaNormalHedge": (ol.AdaNormalHedge, naive_adanormalhedge, unit, 1e-9),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_weights_match_the_independent_reference(name, data):
    learner, reference, elements, rtol = REFERENCES[name]
    losses = data.draw(loss_matrices(max_n=6, max_t=30, elements=elements), label="losses")
    np.testing.assert_allclose(play(learner(losses.shape[1]), losses), reference(losses),
                               rtol=rtol, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(losses=loss_matrices(max_n=6, max_t=20), eta=st.floats(0.01, 5.0))
def test_hedge_matches_exponential_weights_formula(losses, eta):
    T, n = losses.shape
    L = np.vstack([np.zeros(n), np.cumsum(losses, axis=0)[:-1]])
    expected = np.exp(-eta * L) / np.exp(-eta * L).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(play(ol.Hedge(n, eta=eta), losses), expected, rtol=1e-12)
    eta_t = np.sqrt(8 * math.log(n) / np.arange(1, T + 1))[:, None]
    expected = np.exp(-eta_t * L) / np.exp(-eta_t * L).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(play(ol.Hedge(n), losses), expected, rtol=1e-12)


@settings(max_examples=50, deadline=None)
@given(losses=loss_matrices(max_n=12, max_t=30))
def test_normalhedge_scale_solves_its_equation(losses):
    """(1/N) sum exp([R]_+^2 / (2c)) = e at the stored scale, inside the reference bracket."""
    n = losses.shape[1]
    h = ol.NormalHedge(n)
    for loss in losses:
        h.update(loss)
        Rp = np.maximum(h.R, 0.0)
        M = Rp.max()
        if M <= 0:
            assert np.array_equal(h.weights, np.full(n, 1 / n))
            continue
        if M < 1e-100:
            continue  # M^2 underflows in float64; the learner itself works with v = M^2/(2c)
        c = h.scale
        assert M**2 / (2 * (1 + math.log(n))) * (1 - 1e-12) <= c <= M**2 / 2 * (1 + 1e-12)
        assert abs(logsumexp(Rp**2 / (2 * c)) - math.log(n) - 1) <= 1e-12
