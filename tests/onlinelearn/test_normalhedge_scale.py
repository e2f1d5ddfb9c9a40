"""NormalHedge's scale solve: exact against scipy's brentq, in few iterations, on every family.

The oracle (``brentq_v``) solves the paper's equation in ``c`` with scipy; the learner solves
it in ``v = M^2 / (2c)`` by Halley steps. Timing goals live in ``python -m onlinelearn.bench``;
the iteration counts asserted here are deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import onlinelearn as ol
from onlinelearn import bench
from onlinelearn.normalhedge import solve_normalhedge_scale
from tests.onlinelearn.normalhedge_oracle import brentq_v

# brentq's own tolerance is 4 eps relative; the two solutions may differ by both roundings
REL_TOL = 4e-15


@pytest.mark.parametrize("n", [2, 8, 33])
@pytest.mark.parametrize("family", sorted(bench.FAMILIES))
def test_scale_matches_brentq_every_round_on_every_family(family, n):
    learner = ol.NormalHedge(n)
    for loss in bench.FAMILIES[family](np.random.default_rng(1), 400, n):
        learner.update(loss)
        if learner.R.max() > 1e-140:  # the oracle needs M^2 well above xtol = 1e-300
            expected = brentq_v(learner.R)
            assert abs(learner.v - expected) <= REL_TOL * expected, (learner.t, learner.R)
        else:
            assert learner.v == 0.0 or learner.R.max() > 0.0


# regrets 0 or of magnitude in [1e-6, 1e6], so that the oracle's M^2 is representable
regrets = st.one_of(st.just(0.0), st.floats(1e-6, 1e6), st.floats(-1e6, -1e-6))


@settings(max_examples=200, deadline=None)
@given(R=arrays(np.float64, st.integers(1, 40), elements=regrets),
       v0=st.floats(0.0, 30.0), tiny=st.booleans())
@example(R=np.array([0.0] * 8 + [1.0] * 27), v0=2.0, tiny=False)  # the root is the bracket's end
def test_scale_matches_brentq_from_any_warm_start_in_few_iterations(R, v0, tiny):
    """Any regrets, any warm start (even outside the bracket): the same root, <= 6 steps."""
    if tiny:
        R = R * 1e-100  # the solve is scale-free; the oracle needs M > 1e-140
    v, iterations = solve_normalhedge_scale(R, v0)
    expected = brentq_v(R)
    if not R.max() > 0.0:
        assert (v, iterations) == (0.0, 0)
        return
    assert abs(v - expected) <= REL_TOL * expected
    assert 1.0 <= v <= 1.0 + math.log(R.size) + 1e-15
    assert iterations <= 6


@pytest.mark.parametrize("n", [8, 64])
@pytest.mark.parametrize("family", sorted(bench.FAMILIES))
def test_few_iterations_per_update_on_every_family(family, n):
    """Warm-started: at most 3 iterations on average and 4 in any round (the solver before
    Halley's method and its stopping rule averaged 24 on i.i.d. losses at n = 8, up to 100)."""
    losses = bench.FAMILIES[family](np.random.default_rng(2), 1_500, n)
    learner, counts = ol.NormalHedge(n), []
    for loss in losses:
        v_before = learner.v
        learner.update(loss)
        counts.append(solve_normalhedge_scale(learner.R, v_before)[1])
    assert np.mean(counts) <= 3.0 and max(counts) <= 4, (np.mean(counts), max(counts))
    assert bench.solver_iterations(n, steps=30, repeats=2, family=family) <= 3.0


@settings(max_examples=200, deadline=None)
@given(a=arrays(np.float64, st.integers(1, 30), elements=st.floats(0.0, 1.0)))
def test_root_lies_in_the_moment_bracket(a):
    """The bracket the solver starts in: ln(1 + (e-1)/mu) <= v <= min(1 + ln N, 1/mu)."""
    a = np.append(a, 1.0)  # a_i = ([R_i]_+ / M)^2: the largest is 1
    R = np.sqrt(a)
    v, mu, n = brentq_v(R), a.mean(), a.size
    assert math.log1p((math.e - 1) / mu) * (1 - 1e-14) <= v <= min(1 + math.log(n), 1 / mu) * (
        1 + 1e-14)
