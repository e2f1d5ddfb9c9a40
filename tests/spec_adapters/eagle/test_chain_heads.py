"""EAGLE heads as chain drafters of the one round loop, in a pool with model-free drafters:
the chain a head proposes is the one the tree decoder drafts with one child per node, its
counterfactual rows are batched over heads without changing them, greedy output is the
target's, the sampled law is the target's (chi-square), and the heads read features from the
verification pass only."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.ngram import PromptLookupDrafter
from spec_adapters.eagle import TreeConfig
from spec_adapters.eagle.chain import HeadDrafters
from spec_adapters.hf.target import TargetModel
from tests.spec_adapters.eagle.helpers import setup
from tests.spec_adapters.eagle.test_sampling import PROMPT, _exact, small_pool
from tests.spec_adapters.single_helpers import UnigramDrafter, chi2_pvalue


def _prompt(corpus, n=12):
    return corpus[0, :n].view(1, -1)


@pytest.mark.parametrize("k", [1, 3])
def test_a_head_alone_proposes_the_chain_the_tree_decoder_drafts(k):
    target, corpus, heads = setup()
    prompt = _prompt(corpus)
    chain = HedgeSpecDecoder(target, HeadDrafters(heads[:1], target), draft_length=k,
                             policy="fixed:0")
    tree = HedgeSpecDecoder(target, heads[:1], tree=TreeConfig(k, 1, k), policy="fixed:0")
    a = chain.generate(prompt, max_new_tokens=30, temperature=0.0)
    b = tree.generate(prompt, max_new_tokens=30, temperature=0.0)
    assert a.sequences.tolist() == b.sequences.tolist()
    assert a.stats["accepted"] == b.stats["accepted"] and sum(a.stats["accepted"]) > 5


def test_a_mixed_pool_is_lossless_and_its_batched_rows_are_each_heads_own():
    target, corpus, heads = setup()
    prompt = _prompt(corpus)
    ref = target.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0)
    runs = {}
    for batched in (True, False):
        pool = [HeadDrafters(heads, target, batched=batched),
                PromptLookupDrafter(target.config.vocab_size, max_ngram=2)]
        dec = HedgeSpecDecoder(target, pool, draft_length=3, policy="normalhedge")
        out = dec.generate(prompt, max_new_tokens=40, temperature=0.0, seed=0)
        assert out.sequences.tolist() == ref.tolist()
        assert out.stats["drafters"][:3] == [h.config.extra["name"] for h in heads]
        runs[batched] = out.stats
    assert np.array_equal(runs[True]["gamma"], runs[False]["gamma"])
    gamma = np.asarray(runs[True]["gamma"])
    assert gamma[0].mean() > gamma[2].mean()  # 200 steps of training beat none
    # and sampled: the same rows, warped (dense over the target vocabulary)
    dec = HedgeSpecDecoder(target, [HeadDrafters(heads, target), UnigramDrafter(
        torch.zeros(target.config.vocab_size))], draft_length=3, policy="normalhedge")
    out = dec.generate(prompt, max_new_tokens=20, temperature=0.8, seed=1)
    assert np.isfinite(np.asarray(out.stats["gamma"])).all()


def test_the_cost_aware_learner_picks_heads_and_lengths_over_a_mixed_pool():
    target, corpus, heads = setup()
    prompt = _prompt(corpus)
    pool = [HeadDrafters(heads, target), PromptLookupDrafter(target.config.vocab_size, 2)]
    dec = HedgeSpecDecoder(target, pool, draft_length=3, policy="normalhedge", cost_aware=True)
    out = dec.generate(prompt, max_new_tokens=40, temperature=0.0, seed=0)
    ref = target.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0)
    assert out.sequences.tolist() == ref.tolist()
    assert set(out.stats["lengths"]) <= {0, 1, 2, 3}


def test_heads_read_the_features_of_the_verification_pass_and_no_other_target_call():
    target, corpus, heads = setup()
    prompt = _prompt(corpus)
    calls = []
    hook = target.register_forward_hook(lambda m, a, kw: calls.append(1), with_kwargs=False)
    try:
        dec = HedgeSpecDecoder(TargetModel(target, rows_first=False),
                               [HeadDrafters(heads[:2], target)], draft_length=2,
                               policy="normalhedge")
        out = dec.generate(prompt, max_new_tokens=15, temperature=0.0)
    finally:
        hook.remove()
    assert len(calls) == out.stats["target_calls"] + 1  # the rounds and the prefill
    member = HeadDrafters(heads[:1], target)[0]
    member.start(prompt[0], None)
    with pytest.raises(ValueError, match="extend needs the target's features"):
        member.extend(torch.tensor([3, 4]))


def test_sampled_output_of_a_mixed_pool_follows_the_target_distribution():
    target, heads = small_pool()
    V = target.config.vocab_size
    sampling = SamplingConfig(0.9, 0.95, None)
    exact = _exact(target, 3, sampling)
    pool = [HeadDrafters(heads, target), UnigramDrafter(torch.linspace(0, 1, V)),
            PromptLookupDrafter(V, max_ngram=1)]
    dec = HedgeSpecDecoder(target, pool, draft_length=2, policy="normalhedge")
    counts, accepted, n = Counter(), 0, 300
    for seed in range(n):
        out = dec.generate(PROMPT, max_new_tokens=3, temperature=0.9, top_p=0.95, seed=seed)
        counts[tuple(out.sequences[0, PROMPT.shape[1]:].tolist())] += 1
        accepted += sum(out.stats["accepted"])
    assert accepted > n / 2, "drafts must be accepted often for the test to bite"
    assert chi2_pvalue(counts, exact, n) > 1e-3
    assert chi2_pvalue(counts, _exact(target, 3, SamplingConfig(0.55, 0.95)), n) < 1e-6
