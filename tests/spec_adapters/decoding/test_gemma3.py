"""A second architecture through the transformers decoder: a tiny Gemma-3 built from a config
(sliding-window layers beside full ones, a window of 4 so that every round crosses it; a
4,096-token vocabulary for the greedy runs). Greedy output equals ``generate``'s with drafts
accepted, rejected and dropped from a full sliding window, through the decoder and through
``generate(custom_generate=...)``; the sampled law equals the target's (chi-square)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

from spec_adapters.decoding import HedgeSpecDecoder
from spec_adapters.decoding import generate as hedgespec_generate
from tests.spec_adapters.single_helpers import chi2_pvalue, exact_continuations, peaked, perturbed


def tiny_gemma3(seed: int, vocab_size: int = 4096, peak: float = 1.0):
    """A random Gemma3ForCausalLM: 3 layers (sliding, sliding, full), window 4."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                           head_dim=16, sliding_window=4,
                           layer_types=["sliding_attention", "sliding_attention",
                                        "full_attention"],
                           max_position_embeddings=256, bos_token_id=1, eos_token_id=None,
                           pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = peaked(Gemma3ForCausalLM(cfg).eval(), peak)
    model.generation_config.eos_token_id = None
    return model


@pytest.fixture(scope="module")
def gemma_pool():
    torch.set_num_threads(1)
    target = tiny_gemma3(0, peak=3.0)
    return target, [tiny_gemma3(1, peak=3.0), perturbed(target, 0.05, seed=5)]


@pytest.mark.parametrize("prompt", [[1, 30, 31, 32, 40, 41, 42, 43, 44], [1, 7, 7]])
def test_greedy_output_equals_generate_across_the_sliding_window(gemma_pool, prompt):
    """An unrelated drafter and a noisy copy, K = 4 every round: drafts accepted and rejected
    (dropped from a full window) whichever the learner plays."""
    target, drafters = gemma_pool
    ids = torch.tensor([prompt])
    plain = target.generate(ids, max_new_tokens=23, do_sample=False)
    out = HedgeSpecDecoder(target, drafters, draft_length=4).generate(ids, max_new_tokens=23)
    assert torch.equal(out.sequences, plain)
    assert sum(out.stats["accepted"]) < sum(out.stats["lengths"])  # some rejected
    copy_of_target = [copy.deepcopy(target)]  # every draft accepted: the window only grows
    exact = HedgeSpecDecoder(target, copy_of_target, draft_length=4).generate(
        ids, max_new_tokens=23)
    assert torch.equal(exact.sequences, plain) and exact.stats["mean_accepted_tokens"] > 4
    ours = target.generate(ids, custom_generate=hedgespec_generate, drafters=drafters,
                           draft_length=3, max_new_tokens=23, do_sample=False)
    assert torch.equal(ours, plain)


def test_sampled_continuations_follow_the_targets_law():
    torch.set_num_threads(1)
    target = tiny_gemma3(0, vocab_size=12, peak=20.0)
    drafters = [tiny_gemma3(1, vocab_size=12, peak=20.0), perturbed(target, 0.05, seed=5)]
    prompt = torch.tensor([[1, 5, 7, 3, 9]])  # 5 tokens, then 3 more: past the window of 4
    dec = HedgeSpecDecoder(target, drafters, draft_length=2)
    n, counts = 200, Counter()
    for seed in range(n):
        out = dec.generate(prompt, max_new_tokens=3, temperature=0.8, seed=seed)
        counts[tuple(out.sequences[0, prompt.shape[1]:].tolist())] += 1

    def warp(t):
        return lambda logits: torch.softmax(logits.float() / t, -1)

    exact = exact_continuations(target, prompt, 3, warp(0.8))
    assert chi2_pvalue(counts, exact, n) > 1e-3
    assert chi2_pvalue(counts, exact_continuations(target, prompt, 3, warp(0.5)), n) < 1e-4
