"""HedgeSpecDecoder, sampling: exact target distribution (chi-square against enumeration), and
gamma / rho / losses against full-context recomputation (KV-cache bookkeeping)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import spec_adapters.decoding.chain as single
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from tests.spec_adapters.single_helpers import (
    UnigramDrafter,
    chi2_pvalue,
    exact_continuations,
    pool,
)

V = 12
PROMPT = torch.tensor([[1, 5, 7]])


def _warp(logits, temperature, top_k, top_p):
    """transformers' own warpers (an implementation independent of SamplingConfig)."""
    x = logits.float()
    for w in [TemperatureLogitsWarper(temperature),
              *([TopKLogitsWarper(top_k)] if top_k else []),
              *([TopPLogitsWarper(top_p)] if top_p < 1 else [])]:
        x = w(None, x)
    return torch.softmax(x, -1)


def _exact(target, n_tokens, **warp):
    """P(x_1..x_n | prompt) for every continuation, warped by transformers' own warpers."""
    return exact_continuations(target, PROMPT, n_tokens, lambda logits: _warp(logits, **warp))


def _sample(dec, n_samples, n_tokens, **kw):
    counts = Counter()
    for seed in range(n_samples):
        out = dec.generate(PROMPT, max_new_tokens=n_tokens, seed=seed, **kw)
        counts[tuple(out.sequences[0, PROMPT.shape[1]:].tolist())] += 1
    return counts


@pytest.fixture(scope="module")
def sharp_pool():
    target, drafters = pool(vocab_size=V, peak=20.0, layers=1)
    drafters = [drafters[0], drafters[1], UnigramDrafter(torch.linspace(3, 0, V))]
    return target, drafters


@pytest.mark.parametrize(("policy", "warp", "n_samples"), [
    ("normalhedge", {"temperature": 1.0, "top_k": None, "top_p": 1.0}, 350),
    ("exp3spec", {"temperature": 0.7, "top_k": 5, "top_p": 0.9}, 200),
])
def test_sampled_continuations_follow_the_target_distribution(sharp_pool, policy, warp,
                                                             n_samples):
    target, drafters = sharp_pool
    # K = 2 and 3 new tokens: rejections, bonus tokens and a cut second round all occur
    dec = HedgeSpecDecoder(target, drafters, draft_length=2, policy=policy)
    exact = _exact(target, 3, **warp)
    assert sum(exact.values()) == pytest.approx(1.0)
    counts = _sample(dec, n_samples, 3, **warp)
    assert all(c in exact for c in counts), "a continuation of target probability 0 was sampled"
    pvalue = chi2_pvalue(counts, exact, n_samples)
    # power: the same samples are clearly not distributed as a slightly sharper target
    wrong = _exact(target, 3, **{**warp, "temperature": 0.8 * warp["temperature"]})
    p_wrong = chi2_pvalue(counts, wrong, n_samples)
    print(f"\n{policy} {warp}: chi-square p = {pvalue:.3g} over {len(exact)} continuations; "
          f"against temperature x 0.8: p = {p_wrong:.3g}")
    assert pvalue > 1e-3
    assert p_wrong < 1e-4


def test_a_lossy_acceptance_rule_is_detected(sharp_pool, monkeypatch):
    """The distribution test fails for a decoder that accepts every draft."""
    target, drafters = sharp_pool
    warp = {"temperature": 1.0, "top_k": None, "top_p": 1.0}

    def accept_all(p, q, draft, generator=None, **_):
        k = draft.numel()
        return k, int(torch.multinomial(p[k], 1, generator=generator))

    monkeypatch.setattr(single, "speculative_accept", accept_all)
    dec = HedgeSpecDecoder(target, drafters, draft_length=2, policy="normalhedge")
    counts = _sample(dec, 200, 3, **warp)
    exact = _exact(target, 3, **warp)
    assert chi2_pvalue(counts, exact, 200) < 1e-6


def _full_logits(model_or_drafter, seq):
    if isinstance(model_or_drafter, UnigramDrafter):
        return model_or_drafter.logits.expand(len(seq), -1)
    with torch.no_grad():
        return model_or_drafter(input_ids=torch.tensor([seq])).logits[0].float()


@pytest.mark.parametrize(("temperature", "k", "loss"), [(1.0, 3, "eal"), (0.0, 3, "eal"),
                                                         (0.8, 2, "tap")])
def test_gamma_and_losses_match_full_context_recomputation(temperature, k, loss):
    target, drafters = pool(vocab_size=96, peak=10.0)
    drafters = [*drafters, UnigramDrafter(torch.linspace(0, 4, 96))]
    dec = HedgeSpecDecoder(target, drafters, draft_length=k, policy="normalhedge", loss=loss)
    ids = torch.tensor([[1, 30, 31, 32]])
    out = dec.generate(ids, max_new_tokens=24, temperature=temperature, seed=11)
    seq, L = out.sequences[0].tolist(), ids.shape[1]
    sampling = SamplingConfig(temperature)
    x = torch.tensor(seq[L:])
    p = sampling.probs(_full_logits(target, seq)[L - 1:-1])  # p at each generated position
    gamma_ref, rho_ref = [], []
    for d in [*drafters[:3], drafters[3]]:
        q = sampling.probs(_full_logits(d, seq)[L - 1:-1])
        gamma_ref.append(torch.minimum(p, q).sum(-1))
        px, qx = p.gather(1, x.view(-1, 1))[:, 0], q.gather(1, x.view(-1, 1))[:, 0]
        rho_ref.append(torch.clamp(qx / px, max=1.0))
    gamma_ref, rho_ref = torch.stack(gamma_ref).double(), torch.stack(rho_ref).double()
    torch.testing.assert_close(out.stats["gamma"], gamma_ref, atol=2e-5, rtol=0)
    torch.testing.assert_close(out.stats["rho"], rho_ref, atol=2e-5, rtol=0)
    assert 0 < float(gamma_ref[:3].mean()) < 1  # a non-trivial mix of acceptances
    if temperature == 0:
        assert set(out.stats["gamma"].unique().tolist()) <= {0.0, 1.0}

    # losses of every completed round, from an independent implementation of the estimator
    starts, pos = [], L
    for a in out.stats["accepted"]:
        starts.append(pos)
        pos += a + 1
    assert len(out.stats["losses"]) >= len(starts) - k
    for rid, losses in out.stats["losses"]:
        lo = starts[rid] - L
        g, r = gamma_ref[:, lo:lo + k], rho_ref[:, lo:lo + k]
        if loss == "tap":
            ref = 1 - g.mean(1)
        else:  # corrected estimator: 1 + sum_k prod_{j<k} rho_j gamma_k (= paper's when greedy)
            prefix = torch.cumprod(torch.cat([torch.ones(g.shape[0], 1).double(), r[:, :-1]], 1), 1)
            al = 1 + (prefix * g).sum(1)
            ref = (k + 1 - al) / (k + 1)
        np.testing.assert_allclose(losses, ref.numpy(), atol=5e-5)
    # rounds whose window extends past the end were censored, the others fed
    open_at_end = sum(1 for s in starts if s + k > len(seq))
    assert out.stats["censored"] == open_at_end


def test_fixed_and_bandit_policies_skip_counterfactual_evaluation():
    target, drafters = pool(vocab_size=96)
    calls = []
    unigram = UnigramDrafter(torch.linspace(0, 4, 96))
    unigram.extend = lambda tokens: calls.append(tokens.numel()) or \
        unigram.logits.expand(tokens.numel(), -1).clone()
    dec = HedgeSpecDecoder(target, [drafters[0], unigram], draft_length=4, policy="fixed:0")
    out = dec.generate(torch.tensor([[1, 2]]), max_new_tokens=10)
    assert out.stats["gamma"] is None and out.stats["losses"] == []
    assert calls == []  # never chosen, never evaluated
    dec = HedgeSpecDecoder(target, [drafters[0], unigram], draft_length=4, policy="exp3spec")
    out = dec.generate(torch.tensor([[1, 2]]), max_new_tokens=10)
    assert out.stats["gamma"] is None
    # the unigram drafter only caught up when chosen (lazily): one extend per later choice
    later = [r for r, i in enumerate(out.stats["chosen"]) if i == 1 and r > 0]
    assert len(calls) <= len(later) and sum(calls) <= 10
    calls.clear()
    dec = HedgeSpecDecoder(target, [drafters[0], unigram], draft_length=4)
    out = dec.generate(torch.tensor([[1, 2]]), max_new_tokens=10)
    # full information: every drafter sees every verified token, once per round
    assert sum(calls) == 10 and len(calls) == out.stats["target_calls"]
