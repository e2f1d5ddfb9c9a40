"""Tree decoding at temperature > 0 reproduces the target's exact distribution (chi-square
against enumeration on a tiny vocabulary, fixed seeds)."""

from __future__ import annotations

import functools
from collections import Counter

import pytest
import torch

import spec_adapters.eagle.decoder as eagle_decoder
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.eagle import HedgeSpecDecoder, TreeConfig
from spec_adapters.eagle.train import TrainConfig, train_head
from tests.spec_adapters.eagle.helpers import peaked_target, sample_corpus
from tests.spec_adapters.single_helpers import chi2_pvalue, exact_continuations

V = 12
PROMPT = torch.tensor([[1, 5, 7]])


@functools.lru_cache(maxsize=1)
def small_pool():
    """V = 12 target; two heads with an 8-token draft vocabulary (4 tokens undraftable)."""
    target = peaked_target(V, peak=20.0)
    corpus = sample_corpus(target, n_seq=8, length=64)
    heads = []
    for i, steps in enumerate((80, 10)):
        cfg = TrainConfig(steps=steps, batch_size=4, seq_len=32, lr=1e-2, draft_vocab_size=8,
                          seed=i, eval_every=10**9)
        heads.append(train_head(target, corpus[4 * i:4 * i + 4].reshape(-1), None, cfg,
                                progress=False, log=None)[0])
    return target, heads


def _exact(target, n_tokens, sampling: SamplingConfig):
    """P(x_1..x_n | prompt) for every continuation by enumeration with full forward passes."""
    return exact_continuations(target, PROMPT, n_tokens, lambda x: sampling.probs(x.float()))


def _sample(dec, n_samples, n_tokens, **kw):
    counts, accepted = Counter(), 0
    for seed in range(n_samples):
        out = dec.generate(PROMPT, max_new_tokens=n_tokens, seed=seed, **kw)
        counts[tuple(out.sequences[0, PROMPT.shape[1]:].tolist())] += 1
        accepted += sum(out.stats["accepted"])
    return counts, accepted


@pytest.mark.parametrize(("policy", "warp", "tree", "n_samples"), [
    ("normalhedge", dict(temperature=1.0, top_p=1.0, top_k=None), TreeConfig(2, 3, 5), 400),
    ("exp3spec", dict(temperature=0.7, top_p=0.9, top_k=5), TreeConfig(3, 2, 4), 250),
])
def test_sampled_continuations_follow_the_target_distribution(policy, warp, tree, n_samples):
    target, heads = small_pool()
    dec = HedgeSpecDecoder(target, heads, tree=tree, policy=policy)
    sampling = SamplingConfig(warp["temperature"], warp["top_p"], warp["top_k"])
    exact = _exact(target, 3, sampling)
    assert sum(exact.values()) == pytest.approx(1.0)
    counts, accepted = _sample(dec, n_samples, 3, **warp)
    assert accepted > n_samples / 2, "trees must be accepted often for the test to bite"
    pvalue = chi2_pvalue(counts, exact, n_samples)
    print(f"\n{policy} {warp} {tree}: chi-square p = {pvalue:.3g} over {len(exact)} "
          f"continuations, {accepted / n_samples:.2f} accepted nodes per sample")
    assert pvalue > 1e-3
    # power: the same samples are clearly not distributed as a slightly different target
    # (sharper when unwarped; without its top-k / top-p truncation when warped)
    wrong = _exact(target, 3, SamplingConfig(warp["temperature"]) if warp["top_k"] else
                   SamplingConfig(0.8 * warp["temperature"]))
    assert chi2_pvalue(counts, wrong, n_samples) < 1e-6


def test_a_lossy_tree_rule_is_detected(monkeypatch):
    """Accepting the first child whenever the target gives it any mass is not lossless."""
    target, heads = small_pool()

    def greedy_first_child(p, parents, tokens, generator=None):
        node, path = 0, []
        while True:
            kids = [i for i in range(1, len(parents)) if int(parents[i]) == node]
            if not kids or p[node, int(tokens[kids[0]])] == 0:
                return path, int(torch.multinomial(p[node], 1, generator=generator))
            node = kids[0]
            path.append(node)

    monkeypatch.setattr(eagle_decoder, "tree_accept", greedy_first_child)
    dec = HedgeSpecDecoder(target, heads, tree=TreeConfig(2, 3, 5))
    counts, _ = _sample(dec, 250, 3, temperature=1.0)
    exact = _exact(target, 3, SamplingConfig(1.0))
    assert chi2_pvalue(counts, exact, 250) < 1e-6
