"""The bound functions agree with the derivations they come from (independent recomputation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from onlinelearn import bounds


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 10_000), T=st.integers(1, 10**6))
def test_tuned_hedge_bound_is_the_minimum_of_the_fixed_eta_bound(n, T):
    """sqrt(T/2 ln n) = min_eta ln n / eta + eta T / 8, attained at eta = sqrt(8 ln n / T)."""
    eta_star = math.sqrt(8 * math.log(n) / T)
    tuned = bounds.hedge_tuned_bound(n, T)
    assert math.isclose(bounds.hedge_fixed_bound(n, T, eta_star), tuned, rel_tol=1e-12)
    for factor in (0.5, 0.9, 1.1, 2.0):
        assert bounds.hedge_fixed_bound(n, T, factor * eta_star) >= tuned


@settings(max_examples=30, deadline=None)
@given(K=st.integers(2, 1000), T=st.integers(1, 10**6))
def test_exp3_bound_is_the_tuned_value_of_its_derivation(K, T):
    """E[R] <= ln K / eta + eta K T / 2 (Bubeck & Cesa-Bianchi 2012, proof of Thm 3.1)."""
    raw = lambda eta: math.log(K) / eta + eta * K * T / 2  # noqa: E731
    best = minimize_scalar(lambda x: raw(math.exp(x)), bounds=(-30, 5), method="bounded")
    assert math.isclose(bounds.exp3_bound(K, T), best.fun, rel_tol=1e-6)
    assert math.isclose(bounds.exp3_bound(K, T), raw(math.sqrt(2 * math.log(K) / (K * T))),
                        rel_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(eta=st.floats(1e-3, 10.0), a=st.floats(0.0, 1.0))
def test_one_missing_loss_moves_expected_loss_by_at_most_tanh_eta_over_4(eta, a):
    """The delayed-Hedge derivation's per-loss constant, on the worst (two-point) case."""
    r = math.exp(-eta)
    q0 = a / (a + (1 - a) * r)  # tilt of (a, 1 - a) by exp(-eta * (0, 1))
    assert q0 - a <= math.tanh(eta / 4) + 1e-15
    assert math.tanh(eta / 4) <= (math.exp(eta) - 1) / 2


def test_tanh_constant_is_attained():
    eta = 1.3
    a = math.exp(-eta / 2) / (1 + math.exp(-eta / 2))
    q0 = a / (a + (1 - a) * math.exp(-eta))
    assert math.isclose(q0 - a, math.tanh(eta / 4), rel_tol=1e-12)


def test_delayed_hedge_bound_adds_the_delay_term():
    n, T, eta, D = 5, 100, 0.3, 40
    assert bounds.delayed_hedge_bound(n, T, eta, D) == pytest.approx(
        math.log(n) / eta + eta * T / 8 + (math.exp(eta) - 1) * D / 2)


def test_bounds_values_on_known_inputs():
    assert bounds.hedge_anytime_bound(2, 8) == pytest.approx(
        2 * math.sqrt(4 * math.log(2)) + math.sqrt(math.log(2) / 8))
    assert bounds.adahedge_bound(4, 10, 3.0) == pytest.approx(
        2 * math.sqrt(3 * 7 / 10 * math.log(4)) + 16 / 3 * math.log(4) + 2)
    assert bounds.normalhedge_bound(4, 10, 0.25, 0.5) == pytest.approx(math.sqrt(
        (1 + math.log(4)) * (3 * 26 * 10 + 16 * math.log(4) ** 2 / 0.5 * (40.8 + math.log(4)))))
    assert bounds.ucb1_bound([0.0, 0.5], 100) == pytest.approx(
        8 * math.log(100) / 0.5 + (1 + np.pi**2 / 3) * 0.5)
    assert bounds.exp3ix_bound(2, 50, 0.1) == pytest.approx(
        2 * math.sqrt(200 * math.log(2)) + (math.sqrt(200 / math.log(2)) + 1) * math.log(20))


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: bounds.hedge_fixed_bound(3, 10, 0.0), r"eta must be > 0"),
        (lambda: bounds.hedge_tuned_bound(0, 10), r"n must be >= 1"),
        (lambda: bounds.normalhedge_bound(3, 10, eps=0.0, delta=0.5), r"eps must be in \(0, 1\]"),
        (lambda: bounds.normalhedge_bound(3, 10, eps=0.5, delta=0.6),
         r"delta must be in \(0, 1/2\]"),
        (lambda: bounds.exp3ix_bound(1, 10, 0.1), r"needs n >= 2 arms"),
        (lambda: bounds.exp3ix_bound(3, 10, 1.0), r"delta must be in \(0, 1\)"),
        (lambda: bounds.ucb1_bound([-0.1], 10), r"gaps must be >= 0"),
        (lambda: bounds.ucb1_pulls_bound(0.0, 10), r"gap must be > 0"),
    ],
)
def test_bounds_reject_out_of_domain_arguments(call, words):
    with pytest.raises(ValueError, match=words):
        call()
