"""Stop rules as experts: a rule's length from the confidences, its loss gathered from the
(drafter, k) losses, and a learner over (drafter, rule) that finds the rule a drafter's
confidence calls for."""

from __future__ import annotations

import numpy as np
import pytest

from onlinelearn import NormalHedge
from spec_adapters.selection.experts import expert_losses
from spec_adapters.selection.stop_rules import StopRules

NAN = np.nan


def test_a_rule_keeps_the_prefix_whose_running_confidence_holds_up_to_its_cap():
    rules = StopRules(4, (0.0, 0.5))
    assert len(rules) == 1 + 2 * 4
    conf = np.array([[0.9, 0.8, 0.5, NAN],   # running 0.9, 0.72, 0.36
                     [NAN, NAN, NAN, NAN],   # drafted nothing
                     [1.0, 1.0, 1.0, 1.0]])
    got = rules.lengths(conf)
    for r in range(len(rules)):
        theta, cap = rules.theta[r], rules.cap[r]
        for i, row in enumerate(conf):
            running = np.cumprod(np.nan_to_num(row, nan=0.0))
            want = 0
            while want < min(cap, 4) and not np.isnan(row[want]) and running[want] >= theta:
                want += 1
            assert got[i, r] == want, (i, rules.describe(r))
            assert rules.length(row, r) == want, (i, rules.describe(r))  # one rule alone
    assert got[0].tolist() == [0, 1, 2, 3, 3, 1, 2, 2, 2]
    assert rules.describe(0) == "k<=0" and rules.describe(6) == "conf>=0.5,k<=2"


def test_one_rules_length_is_the_tables_entry_on_random_confidences():
    rng = np.random.default_rng(0)
    rules = StopRules(5, (0.0, 0.2, 0.5, 0.8))
    for _ in range(200):
        conf = rng.choice([0.0, 0.3, 0.6, 0.9, 1.0, NAN], size=(3, 5))
        got = rules.lengths(conf)
        assert all(rules.length(conf[i], r) == got[i, r]
                   for i in range(3) for r in range(len(rules)))


def test_threshold_zero_alone_is_the_draft_length_family():
    """thresholds (0,): rule r is the length min(r, drafted), so a rule's loss is the
    (drafter, k) expert's at the same index."""
    rng = np.random.default_rng(0)
    rules = StopRules(3, (0.0,))
    conf = rng.uniform(0.1, 1.0, size=(4, 3))
    conf[1, 2:] = NAN  # drafter 1 drafts 2 tokens
    lengths = rules.lengths(conf)
    assert lengths.tolist() == [[0, 1, 2, 3], [0, 1, 2, 2], [0, 1, 2, 3], [0, 1, 2, 3]]
    gamma = (rng.random((4, 3)) < 0.6).astype(float)
    costs = np.tile(np.array([1.0, 1.3, 1.6, 1.9]), (4, 1))
    by_length = expert_losses(gamma, None, costs, "time")
    np.testing.assert_array_equal(rules.losses(by_length, np.tile(np.arange(4), (4, 1))),
                                  by_length)
    got = rules.losses(by_length, lengths).reshape(4, 4)
    assert got[1, 3] == by_length.reshape(4, 4)[1, 2]  # a 2-token drafter's cap 3 = its k 2


@pytest.mark.parametrize("bad", [[], [0.5], [0.0, 0.0], [0.0, 1.0], [0.0, "a"], 0.5,
                                 [0.0, True]])
def test_bad_thresholds_are_refused_naming_the_rule(bad):
    with pytest.raises(ValueError, match="stop-rule thresholds"):
        StopRules(4, bad)
    with pytest.raises(ValueError, match="max_k"):
        StopRules(0)


def test_the_learner_finds_the_threshold_a_calibrated_drafter_calls_for():
    """A drafter whose token j is right with probability c_j (its stated confidence), the
    confidences varying round to round: drafting while the running confidence holds beats
    every fixed length, and NormalHedge over (drafter, rule) puts its weight on such rules."""
    rng = np.random.default_rng(1)
    K = 4
    rules = StopRules(K)
    step = np.array([1.0, 1.5, 2.0, 2.5, 3.0])  # a round of k drafts costs 1 + k/2 steps
    learner = NormalHedge(len(rules))
    total = np.zeros(len(rules))
    for _ in range(3000):
        conf = np.where(rng.random((1, K)) < 0.5, 0.95, 0.3)
        right = (rng.random((1, K)) < conf).astype(float)
        gamma = np.cumprod(right, axis=1)  # greedy: a token counts while all before it do
        losses = rules.losses(expert_losses(gamma, None, step[None, :], "time", tau=1.0),
                              rules.lengths(conf))
        learner.update(losses)
        total += losses
    best = int(np.argmin(total))
    assert rules.theta[best] > 0  # a confidence rule, not a fixed length
    fixed = total[:K + 1].min()
    assert total[best] < fixed - 0.02 * 3000  # and better than every fixed length by a margin
    on_rules = learner.weights[rules.theta > 0].sum()
    assert on_rules > 0.9
