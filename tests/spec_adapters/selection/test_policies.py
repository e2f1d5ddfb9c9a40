"""make_policy: names, learner instances, delayed-feedback wrappers, bandit loss, fixed;
MetaSD-UCB's block-gamma feedback through the single-draft decoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from onlinelearn.bandits import UCB1, Exp3
from onlinelearn.delayed import BOLD, QPMD, OnArrival
from onlinelearn.hedge import Hedge
from onlinelearn.normalhedge import NormalHedge
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.selection.policies import (
    FixedPolicy,
    bandit_loss,
    block_loss,
    feedback_of,
    make_policy,
)
from tests.spec_adapters.single_helpers import pool


@pytest.mark.parametrize(("spec", "wrapper", "base"), [
    ("normalhedge", OnArrival, NormalHedge),
    ("NormalHedge", OnArrival, NormalHedge),
    ("hedge", OnArrival, Hedge),
    ("exp3spec", OnArrival, Exp3),
    ("ucbspec", OnArrival, UCB1),
    ("metasd-ucb", OnArrival, UCB1),
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


@pytest.mark.parametrize(("spec", "feedback"), [
    ("metasd-ucb", "block_gamma"), (" MetaSD-UCB", "block_gamma"), ("ucbspec", "accepted"),
    ("exp3spec", "accepted"), ("normalhedge", "accepted"), ("fixed:0", "accepted"),
    (UCB1(3), "accepted"),
])
def test_only_metasd_is_fed_the_block_gamma(spec, feedback):
    assert feedback_of(spec) == feedback


@pytest.mark.parametrize(("gamma", "loss"), [(1.0, 0.0), (0.0, 1.0), (0.25, 0.75),
                                             (np.float32(0.5), 0.5)])
def test_block_loss_is_the_mean_total_variation(gamma, loss):
    assert block_loss(gamma) == pytest.approx(loss)


@pytest.mark.parametrize("gamma", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_block_loss_rejects_what_is_not_a_probability(gamma):
    with pytest.raises(ValueError, match="block_gamma must be a number in"):
        block_loss(gamma)


def _dense(q) -> torch.Tensor:
    """A proposal's rows as ``(k, V)`` probabilities (a form or a tensor)."""
    return (q.dense() if hasattr(q, "dense") else q).double()


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_metasd_is_fed_one_minus_the_chosen_drafters_mean_gamma_over_its_block(temperature):
    """Independent oracle: for every round, the target's full forward over prefix + drafts
    gives p_j (float64, no cache) at each drafted position; the loss fed to the bandit must be
    1 - sum_j sum_x min(p_j, q_j) / K, with q_j what the chosen drafter proposed."""
    K = 3
    target, drafters = pool(peak=3.0)
    dec = HedgeSpecDecoder(target, drafters, draft_length=K, policy="metasd-ucb")
    proposals, fed = [], []
    for d in dec.drafters:
        def propose(k, sampling, gen, _orig=d.propose):
            tokens, q = _orig(k, sampling, gen)
            proposals.append((tokens.clone(), _dense(q)))
            return tokens, q
        d.propose = propose
    feed = dec.policy.feed
    dec.policy.feed = lambda rid, loss: (fed.append(loss), feed(rid, loss))[1]
    rounds = []
    prompt = torch.tensor([[5, 17, 33, 2, 60, 41]])
    dec.generate(prompt, max_new_tokens=16, temperature=temperature, seed=3,
                 on_round=rounds.append)
    assert len(fed) == len(rounds) == len(proposals) >= 4
    seq = prompt[0].tolist()
    for (tokens, q), info, loss in zip(proposals, rounds, fed, strict=True):
        with torch.no_grad():
            logits = target(torch.tensor([seq + tokens.tolist()])).logits[0].double()
        rows = logits[len(seq) - 1:len(seq) - 1 + tokens.numel()]
        if temperature == 0:
            p = torch.nn.functional.one_hot(rows.argmax(-1), rows.shape[-1]).double()
        else:
            p = torch.softmax(rows / temperature, -1)
        gamma = torch.minimum(p, q).sum(-1)
        assert loss == pytest.approx(1.0 - float(gamma.sum()) / K, abs=1e-5)
        seq += list(info.tokens)
    assert len({round(x, 6) for x in fed}) > 1  # the feedback varies: the check can fail


def test_metasd_refuses_the_tree_scheme():
    from spec_adapters.eagle import HedgeSpecDecoder as TreeDecoder
    from spec_adapters.eagle import TreeConfig
    from tests.spec_adapters.eagle.helpers import peaked_target, random_head

    target = peaked_target()
    heads = [random_head(target, 64, seed=s) for s in (0, 1)]
    with pytest.raises(ValueError, match="block gamma, which TreeScheme does not compute"):
        TreeDecoder(target, heads, tree=TreeConfig(2, 2, 4), policy="metasd-ucb")
    TreeDecoder(target, heads, tree=TreeConfig(2, 2, 4), policy="ucbspec")  # bandits are fine
