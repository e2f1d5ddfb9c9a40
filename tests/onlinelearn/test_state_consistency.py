"""load_state_dict refuses a snapshot whose statistics no history of the learner can produce.

Every field of such a snapshot passes its own check; the fields disagree with each other. The
worst case is NormalHedge's ``v``, the solved scale of ``R``: a ``v`` that does not solve the
scale equation for ``R`` gave other weights than the learner that made ``R``.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import onlinelearn as ol
from onlinelearn import bench
from tests.onlinelearn.normalhedge_oracle import brentq_v


def trained(make, n: int = 5, rounds: int = 40):
    """A learner after ``rounds`` seeded rounds of i.i.d. feedback (some regrets positive)."""
    learner, rng = make(n), np.random.default_rng(11)
    for _ in range(rounds):
        if learner.full_information:
            learner.update(rng.random(n))
        else:
            learner.update(learner.sample(rng), rng.random())
    return learner


def scaled(key: str, factor: float):
    return lambda s: {**s, key: (np.asarray(s[key]) * factor).tolist()}


# (learner, how the snapshot is damaged, the message that names the field)
INCONSISTENT = {
    "NormalHedge v off by 1e-6": (ol.NormalHedge, scaled("v", 1 + 1e-6),
                                  r"state\['v'\] = .* is not the scale of state\['R'\]"),
    "NormalHedge v = 1": (ol.NormalHedge, lambda s: {**s, "v": 1.0},
                          r"state\['v'\] = 1.0 is not the scale"),
    "NormalHedge v = 0 with a positive regret": (
        ol.NormalHedge, lambda s: {**s, "v": 0.0}, r"state\['v'\] = 0.0 is not the scale"),
    "NormalHedge v > 0 with no positive regret": (
        ol.NormalHedge, lambda s: {**s, "R": (-np.abs(s["R"])).tolist()},
        r"state\['v'\] = .* is not the scale of state\['R'\]: .* gives v = 0.0"),
    "NormalHedge |R| > t": (ol.NormalHedge, lambda s: {**s, "t": 1},
                            r"state\['R'\] breaks \|R_i\| <= t"),
    "AdaNormalHedge |R| > C": (ol.AdaNormalHedge,
                               lambda s: {**s, "C": (np.abs(s["R"]) / 2).tolist()},
                               r"state\['R'\] breaks \|R_i\| <= C_i"),
    "AdaNormalHedge C > t": (ol.AdaNormalHedge, lambda s: {**s, "t": 2},
                             r"state\['C'\] breaks C_i <= t"),
    "Hedge L > t": (ol.Hedge, lambda s: {**s, "t": 3}, r"state\['L'\] breaks L_i <= t"),
    "Hedge L < 0": (ol.Hedge, scaled("L", -1.0), r"state\['L'\] must be >= 0"),
    "AdaHedge L > t": (ol.AdaHedge, lambda s: {**s, "t": 3}, r"state\['L'\] breaks L_i <= t"),
    "AdaHedge Delta > t": (ol.AdaHedge, lambda s: {**s, "Delta": s["t"] + 1.0},
                           r"state\['Delta'\] breaks Delta <= t"),
    "UCB1 rewards > counts": (ol.UCB1, lambda s: {**s, "rewards": [c + 1 for c in s["counts"]]},
                              r"state\['rewards'\] breaks rewards_j <= counts_j"),
}


@pytest.mark.parametrize("case", sorted(INCONSISTENT))
def test_inconsistent_state_raises_value_error_naming_the_field_and_changes_nothing(case):
    make, damage, words = INCONSISTENT[case]
    learner = trained(make)
    before = copy.deepcopy(learner.state_dict())
    weights = learner.weights
    with pytest.raises(ValueError, match=words):
        learner.load_state_dict(damage(copy.deepcopy(before)))
    assert learner.state_dict() == before
    assert np.array_equal(learner.weights, weights)


def test_normalhedge_inconsistent_v_would_change_the_weights():
    """Why ``v`` is checked: the same ``R`` with another ``v`` is another distribution."""
    learner = trained(ol.NormalHedge)
    state = learner.state_dict()
    other = ol.NormalHedge(5)
    other.R, other.v = np.array(state["R"]), 1.0  # what the old load_state_dict accepted
    assert np.abs(other.weights - learner.weights).max() > 1e-3


def test_normalhedge_accepts_r_with_its_independently_solved_scale():
    """A hand-made R with v from scipy's brentq (the oracle) loads, and so do its weights."""
    R = np.array([3.0, -1.0, 2.5, 0.5, 0.0, 2.9])
    state = {**ol.NormalHedge(6).state_dict(), "t": 10, "R": R.tolist(), "v": brentq_v(R)}
    learner = ol.NormalHedge(6).load_state_dict(state)
    z = np.maximum(R, 0.0) / R.max()
    expected = z * np.exp(state["v"] * z**2)
    np.testing.assert_allclose(learner.weights, expected / expected.sum(), rtol=1e-14)


@pytest.mark.parametrize("family", sorted(bench.FAMILIES))
@pytest.mark.parametrize("name", ["Hedge", "AdaHedge", "NormalHedge", "AdaNormalHedge"])
def test_states_of_long_real_runs_load(name, family):
    """The consistency checks leave room for rounding: 3000 real rounds on each loss family."""
    n = 6
    learner = getattr(ol, name)(n)
    for loss in bench.FAMILIES[family](np.random.default_rng(5), 3_000, n):
        learner.update(loss)
    saved = json.loads(json.dumps(learner.state_dict()))
    assert getattr(ol, name)(n).load_state_dict(saved).state_dict() == learner.state_dict()
