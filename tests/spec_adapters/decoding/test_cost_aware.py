"""Cost-aware decoding: experts (drafter, k), k = 0 .. K, with the time-per-token loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.ngram import PromptLookupDrafter
from spec_adapters.selection.costs import StepCosts
from spec_adapters.selection.experts import expert_losses
from tests.spec_adapters.single_helpers import UnigramDrafter, pool

V, K = 96, 3
IDS = torch.tensor([[1, 8, 9]])


@pytest.fixture(scope="module")
def models():
    return pool(vocab_size=V)


def _greedy(target, n):
    return target.generate(IDS, do_sample=False, max_new_tokens=n, pad_token_id=0)


class FrozenCosts(StepCosts):
    """Step costs fixed by the test: observations are ignored, so the losses are exact."""

    def __init__(self, n, k, curve, per_token=0.0, tau=1.0):
        super().__init__(n, k)
        self.curve, self.flat, self.tau = np.asarray(curve, float), per_token, tau

    def observe_target(self, n_tokens, seconds):
        return self

    def observe_draft(self, drafter, k, seconds):
        return self

    def observe_overhead(self, seconds):
        return self

    def observe_round(self, seconds, tokens):
        return self

    @property
    def time_per_token(self):
        return self.tau

    def round_costs(self):
        return self.curve[None, :] + self.flat * np.arange(self.k + 1)[None, :] \
            + np.zeros((self.n, 1))


@pytest.mark.parametrize("policy", ["normalhedge", "hedge", "adahedge"])
@pytest.mark.parametrize("delay", ["onarrival", "qpmd", "bold"])
def test_cost_aware_greedy_output_is_the_targets(models, policy, delay):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=K, policy=policy, delay=delay,
                           cost_aware=True)
    out = dec.generate(IDS, max_new_tokens=30, seed=3)
    assert torch.equal(out.sequences, _greedy(target, 30))
    s = out.stats
    assert s["cost_aware"] is True and len(s["drafted"]) == s["target_calls"]
    assert all(0 <= d <= K for d in s["drafted"])
    assert all(a <= d for a, d in zip(s["accepted"], s["drafted"], strict=True))
    assert all(d <= k <= K for d, k in zip(s["drafted"], s["lengths"], strict=True))
    assert all(len(loss) == len(drafters) * (K + 1) for _, loss in s["losses"])
    assert all(len(w) == len(drafters) and abs(sum(w) - 1) < 1e-9 for w in s["weights"])
    assert s["step_costs"]["tokens"] == 30  # every round's tokens were costed


class _NeverAsked(UnigramDrafter):
    def propose(self, k, sampling, generator=None):
        raise AssertionError("a k = 0 round must not ask the drafter")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_zero_length_round_is_a_plain_target_step(models, temperature):
    target, _ = models
    d = _NeverAsked(torch.zeros(V))
    dec = HedgeSpecDecoder(target, [d], draft_length=K, cost_aware=True)
    play = dec.policy.play
    dec.policy.play = lambda rng: (play(rng)[0], 0)  # expert 0 = (drafter 0, k = 0)
    out = dec.generate(IDS, max_new_tokens=12, temperature=temperature, seed=4)
    s = out.stats
    assert s["drafted"] == [0] * 12 and s["accepted"] == [0] * 12 and s["lengths"] == [0] * 12
    assert s["target_calls"] == 12 and s["mean_accepted_tokens"] == 1.0
    if temperature == 0.0:
        assert torch.equal(out.sequences, _greedy(target, 12))
    assert dec.target.cached_length == IDS.shape[1] + 12 - 1


def test_fed_losses_are_the_time_losses_of_the_windows(models):
    """Every fed loss vector is expert_losses of its window, with expert (i, k) paying for the
    min(k, L_i) drafts drafter i would have made, L_i its positions before its first
    abstention in the window (prompt lookup abstains where the context has no match)."""
    target, drafters = models
    lookup = PromptLookupDrafter(V, max_ngram=2)
    dec = HedgeSpecDecoder(target, [*drafters, lookup], draft_length=K, cost_aware=True)
    n = len(drafters) + 1
    dec.costs = FrozenCosts(n, K, curve=[1.0, 1.5, 2.0, 2.5], per_token=0.1, tau=0.8)
    out = dec.generate(IDS, max_new_tokens=40, seed=1)
    gamma, first = out.stats["gamma"].numpy(), IDS.shape[1]
    seq = out.sequences[0].tolist()
    sizes = [a + 1 for a in out.stats["accepted"]]  # each round's verified tokens
    starts = first + np.cumsum([0, *sizes])[:-1]
    assert len(out.stats["losses"]) >= 3
    shortened = 0
    for rid, loss in out.stats["losses"]:
        lo = starts[rid] - first
        lengths = np.full(n, K)
        for j in range(K):  # prompt lookup proposes after seq[:pos] iff its last tokens recur
            pos = starts[rid] + j
            if _lookup_abstains(seq[:pos], 2):
                lengths[n - 1] = j
                break
        shortened += lengths[n - 1] < K
        drafted = np.minimum(np.arange(K + 1)[None, :], lengths[:, None])
        costs = np.take_along_axis(dec.costs.round_costs(), drafted, 1)
        want = expert_losses(gamma[:, lo:lo + K], None, costs, "time", tau=0.8)
        np.testing.assert_allclose(loss, want, atol=1e-12)
    assert shortened, "prompt lookup never abstained: the test checks nothing new"


def _lookup_abstains(context: list[int], max_ngram: int) -> bool:
    """Prompt lookup (orders 1..max_ngram) has no earlier occurrence of any suffix."""
    for n in range(1, max_ngram + 1):
        if n >= len(context):
            break
        tail = context[-n:]
        if any(context[i:i + n] == tail for i in range(len(context) - n)):
            return False
    return True


def test_dear_verification_and_useless_drafts_teach_not_drafting(models):
    """T(n) = n plain steps, an unrelated drafter: drafting k tokens costs k + 1 steps for one
    token, so the learner must move its mass to k = 0; with free verification and the target's
    copy it must move to k = K."""
    target, drafters = models
    dear = HedgeSpecDecoder(target, [drafters[0]], draft_length=K, cost_aware=True)
    dear.costs = FrozenCosts(1, K, curve=[1.0, 2.0, 3.0, 4.0], tau=1.0)
    dear.generate(IDS, max_new_tokens=60, seed=2)
    w = dear.policy.learner.weights
    assert w[0] > 0.9, w

    free = HedgeSpecDecoder(target, [drafters[2]], draft_length=K, cost_aware=True)
    free.costs = FrozenCosts(1, K, curve=[1.0, 1.0, 1.0, 1.0], tau=0.3)
    free.generate(IDS, max_new_tokens=60, seed=2)
    assert free.policy.learner.weights[K] > 0.9


@pytest.mark.parametrize("policy", ["exp3spec", "ucbspec", "fixed:0"])
def test_cost_aware_needs_a_full_information_policy(models, policy):
    target, drafters = models
    with pytest.raises(ValueError, match="cost_aware=True needs a full-information policy"):
        HedgeSpecDecoder(target, drafters, draft_length=K, policy=policy, cost_aware=True)


def test_cost_aware_must_be_a_bool(models):
    target, drafters = models
    with pytest.raises(ValueError, match="cost_aware must be True or False"):
        HedgeSpecDecoder(target, drafters, cost_aware="yes")


def test_costs_persist_across_queries(models):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=K, cost_aware=True)
    dec.generate(IDS, max_new_tokens=10, seed=0)
    dec.generate(IDS, max_new_tokens=10, seed=0)
    assert dec.costs.rate.tokens == 20 and not np.isnan(dec.costs.target[0])
