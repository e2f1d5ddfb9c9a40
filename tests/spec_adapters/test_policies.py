"""make_policy: names, learner instances, delayed-feedback wrappers, bandit loss, fixed."""

from __future__ import annotations

import numpy as np
import pytest

from onlinelearn.bandits import UCB1, Exp3
from onlinelearn.delayed import BOLD, QPMD, OnArrival
from onlinelearn.hedge import Hedge
from onlinelearn.normalhedge import NormalHedge
from spec_adapters.core.policies import FixedPolicy, bandit_loss, make_policy


@pytest.mark.parametrize(("spec", "wrapper", "base"), [
    ("normalhedge", OnArrival, NormalHedge),
    ("NormalHedge", OnArrival, NormalHedge),
    ("hedge", OnArrival, Hedge),
    ("exp3spec", OnArrival, Exp3),
    ("ucbspec", OnArrival, UCB1),
])
def test_names_build_the_documented_learners(spec, wrapper, base):
    policy = make_policy(spec, 4)
    assert isinstance(policy, wrapper) and isinstance(policy.learner, base)
    assert policy.n == 4 and np.allclose(policy.weights.sum(), 1.0)
    assert policy.full_information == base.full_information


@pytest.mark.parametrize(("delay", "wrapper"), [("onarrival", OnArrival), ("bold", BOLD),
                                                 ("qpmd", QPMD)])
def test_delay_reduction_is_selectable(delay, wrapper):
    assert isinstance(make_policy("adahedge", 3, delay=delay), wrapper)


def test_learner_instances_are_wrapped_and_reductions_passed_through():
    learner = Hedge(3, eta=0.5)
    policy = make_policy(learner, 3, delay="onarrival")
    assert isinstance(policy, OnArrival) and policy.learner is learner
    assert isinstance(make_policy(Exp3(3), 3), OnArrival)  # bandits: no delay to handle
    reduction = QPMD(NormalHedge(3))
    assert make_policy(reduction, 3) is reduction


@pytest.mark.parametrize(("spec", "n", "match"), [
    ("thompson", 3, "unknown policy"),
    ("fixed:3", 3, "out of range"),
    ("fixed:x", 3, "fixed:<index>"),
    (object(), 3, "unknown policy"),
])
def test_bad_specs_raise(spec, n, match):
    with pytest.raises(ValueError, match=match):
        make_policy(spec, n)


def test_learner_of_the_wrong_size_is_rejected():
    with pytest.raises(ValueError, match="n=2 experts but the pool has 3"):
        make_policy(NormalHedge(2), 3)
    with pytest.raises(ValueError, match="unknown delay"):
        make_policy("hedge", 3, delay="fifo")


def test_fixed_policy_keeps_round_bookkeeping():
    policy = make_policy("fixed:1", 3)
    assert isinstance(policy, FixedPolicy)
    rng = np.random.default_rng(0)
    ids = [policy.play(rng) for _ in range(3)]
    assert ids == [(0, 1), (1, 1), (2, 1)]
    policy.feed(0, 0.5).censor(2)
    assert policy.outstanding == {1: 1} and policy.censored == frozenset({2})
    with pytest.raises(ValueError, match="not outstanding"):
        policy.feed(0, 0.5)
    assert policy.weights.tolist() == [0.0, 1.0, 0.0]


def test_fixed_policy_is_not_full_information():
    """It needs no drafter's loss: the decoders skip counterfactual evaluation for it."""
    assert make_policy("fixed:0", 2).full_information is False


@pytest.mark.parametrize(("n_accepted", "k", "loss"), [(0, 4, 1.0), (4, 4, 0.0), (1, 4, 0.75),
                                                       (0, 1, 1.0), (1, 1, 0.0)])
def test_bandit_loss_is_banditspecs_scaled_shortfall(n_accepted, k, loss):
    # Y = n_accepted + 1 tokens in [1, K+1]; loss = (K + 1 - Y) / K
    assert bandit_loss(n_accepted, k) == pytest.approx(loss)
