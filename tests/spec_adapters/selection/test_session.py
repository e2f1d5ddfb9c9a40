"""SelectionSession: the verbs every engine drives, and what they refuse."""

from __future__ import annotations

import numpy as np
import pytest

from onlinelearn import NormalHedge
from spec_adapters.selection import SelectionSession, StopRules, Stream, make_policy
from spec_adapters.selection.abstention import expected_gains
from spec_adapters.selection.book import Window
from spec_adapters.selection.experts import window_losses

N, K = 2, 3
RULES = StopRules(K, (0.0,))  # the (drafter, k) family: rule r drafts r tokens
COSTS = 0.04 + 0.01 * np.arange(K + 1)


def _session(loss="time", rules=RULES, stream=None, policy="normalhedge"):
    per = len(rules) if rules is not None else (K + 1 if loss == "time" else 1)
    return SelectionSession(make_policy(policy, N * per), N, K, loss=loss, rules=rules,
                            stream=stream, first_position=10)


def _round(session, rng, tokens, drafts):
    play = session.play(rng)
    session.open(play, session.book.end, np.array(drafts),
                 rule_lengths=np.tile(np.arange(K + 1), (N, 1)))
    session.record(tokens)
    return play, session.feed(COSTS, 0.03)


def test_a_window_is_scored_once_complete_with_the_rules_losses_and_its_acceptance():
    stream = Stream(N, K, prior_rounds=4, warm_experts=N * (K + 1))
    s = _session(stream=stream)
    rng = np.random.default_rng(0)
    drafts = [[5, 6, 7], [5, 9, 9]]
    play, scored = _round(s, rng, [5, 6], drafts)  # two of the window's three positions
    assert scored == [] and play.drafter * (K + 1) + play.option == play.expert
    s.record([7])
    (fed,) = s.feed(COSTS, 0.03)
    gamma = np.array([[1.0, 1, 1], [1, 0, 0]])
    want = window_losses(Window(play.round_id, gamma, gamma, np.full(N, K)), "time", False,
                         COSTS, 0.03)
    np.testing.assert_allclose(fed.losses, want)  # rule r = length r: the same losses
    np.testing.assert_array_equal(fed.accepted, [[0, 1, 2, 3], [0, 1, 1, 1]])
    assert s.acceptance.rounds == stream.acceptance.rounds == 1
    assert stream.learner.t == 1
    assert s.policy.outstanding == {}


def test_close_censors_every_round_still_open_and_forgets_their_windows():
    s = _session()
    rng = np.random.default_rng(1)
    plays = [_round(s, rng, [5], [[5, 6, 7], [1, 2, 3]])[0] for _ in range(2)]
    assert set(s.policy.outstanding) == {p.round_id for p in plays}
    assert s.close() == [p.round_id for p in plays]
    assert s.policy.outstanding == {} and s.book.open_rounds == {} and s.rule_lengths == {}
    assert s.close() == []


def test_a_bandit_is_fed_its_chosen_loss_at_once():
    s = _session(loss="eal", rules=None, policy="exp3spec")
    play = s.play(np.random.default_rng(2))
    assert play.option == 0 and 0 <= play.drafter < N
    s.feed_chosen(play, 0.25)
    assert s.policy.outstanding == {} and s.close() == []


def test_gains_start_from_the_streams_acceptance_shrunk_to_prior_rounds():
    stream = Stream(N, K, prior_rounds=2)
    assert _session(stream=stream).gains(0.03, 0.01) is None  # no evidence anywhere
    first = _session(stream=stream)
    _round(first, np.random.default_rng(3), [5, 6, 7], [[5, 6, 7], [1, 2, 3]])
    fresh = _session(stream=stream)
    est = fresh.acceptance.estimate(stream.acceptance, 2)
    np.testing.assert_allclose(fresh.gains(0.03, 0.01), expected_gains(*est, 0.03, 0.01))
    assert fresh.gains(0.03, 0.01)[0, K] > 0 > fresh.gains(0.03, 0.01)[1, K]


def test_a_warm_stream_starts_a_normalhedge_request_from_its_weights():
    stream = Stream(N, K, prior_rounds=3, warm_experts=N * (K + 1))
    for _ in range(5):
        stream.learner.update(np.linspace(0, 1, N * (K + 1)))
    policy = stream.policy("normalhedge", N * (K + 1))
    assert policy.learner.t == 3
    np.testing.assert_allclose(policy.learner.weights, stream.learner.weights, atol=1e-12)
    assert stream.policy("hedge", N * (K + 1)).learner.t == 0
    assert Stream(N, K, prior_rounds=0, warm_experts=4).learner is None


def test_weights_sum_each_drafters_options():
    s = _session()
    w = s.weights
    assert w.shape == (N,) and w.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"loss": "bogus", "rules": None}, "unknown loss"),
    ({"loss": "eal", "rules": RULES}, "stop rules need a per-length loss"),
])
def test_bad_settings_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelectionSession(make_policy("normalhedge", N * len(RULES)), N, K, **kwargs)


def test_a_policy_over_other_experts_is_refused():
    with pytest.raises(ValueError, match="2 drafters x 4 options make 8"):
        SelectionSession(NormalHedge(5), N, K, rules=RULES)


def test_a_round_opened_badly_leaves_nothing_behind():
    s = _session()
    play = s.play(np.random.default_rng(4))
    with pytest.raises(ValueError, match="rule_lengths"):
        s.open(play, 10, np.zeros((N, K), np.int64))
    with pytest.raises(ValueError, match="drafts must be"):
        s.open(play, 10, np.zeros((N, K + 1), np.int64), rule_lengths=np.zeros((N, K + 1)))
    assert s.book.open_rounds == {} and s.rule_lengths == {}
    assert s.close() == [play.round_id]


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_prior_rounds_name_the_problem(value):
    with pytest.raises(ValueError, match="prior_rounds must be an integer >= 0"):
        Stream(N, K, prior_rounds=value)
