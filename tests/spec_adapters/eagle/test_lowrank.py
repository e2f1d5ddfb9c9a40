"""Specialists as low-rank deltas of their generalist: at full rank they are the specialists, at
rank r the delta is its best rank-r approximation, the pool reads the shared weight once and
its batched rows are each head's own, decoding stays lossless, and a family that is not one is
refused by name."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.ngram import PromptLookupDrafter
from spec_adapters.eagle.chain import HeadDrafters
from spec_adapters.eagle.head import EagleHead
from spec_adapters.eagle.lowrank import LINEARS, lowrank_specialists
from spec_adapters.eagle.pool import HeadPool
from spec_adapters.eagle.train import TrainConfig, train_head
from tests.spec_adapters.eagle.helpers import (
    features,
    peaked_target,
    random_head,
    sample_corpus,
    teacher_forced_logits,
)


@pytest.fixture(scope="module")
def family():
    """A target, its generalist and two specialists fine-tuned from it (decoder layer only)."""
    target = peaked_target()
    corpus = sample_corpus(target, n_seq=8, length=48, seed=5)
    general = random_head(target, 48, seed=1)
    heads = {"general": general}
    for i, name in enumerate(("even", "odd")):
        twin = EagleHead(general.config, d2t=general.d2t.clone())
        twin.load_state_dict(general.state_dict())
        cfg = TrainConfig(steps=6, batch_size=2, seq_len=24, lr=3e-2, draft_vocab_size=48,
                          eval_every=99, midlayer_only=True, seed=i)
        heads[name], _ = train_head(target, corpus[i::2].reshape(-1), None, cfg,
                                    head=twin.bind(target), progress=False, log=None)
    return target, corpus, heads


def test_at_full_rank_the_specialists_compute_what_they_did(family):
    target, corpus, heads = family
    full = lowrank_specialists(heads, "general", rank=10**6)
    seq = corpus[0, :20]
    for name, head in heads.items():
        torch.testing.assert_close(teacher_forced_logits(full[name], target, seq),
                                   teacher_forced_logits(head, target, seq),
                                   atol=1e-4, rtol=1e-4)
        assert full[name].embed_weight is head.embed_weight  # the target's table, shared
        for layer in LINEARS:  # "full" is the delta's own rank, not the rank asked for
            delta = full[name].get_submodule(layer)
            assert delta.delta_a.shape[0] == min(delta.weight.shape)
    assert all(isinstance(heads["even"].get_submodule(n), torch.nn.Linear) for n in LINEARS)


@pytest.mark.parametrize("rank", [1, 4])
def test_a_rank_r_delta_is_the_best_rank_r_approximation(family, rank):
    _, _, heads = family
    low = lowrank_specialists(heads, "general", rank=rank)
    for layer in LINEARS:
        w_g = heads["general"].get_submodule(layer).weight.detach()
        w_s = heads["even"].get_submodule(layer).weight.detach()
        d = low["even"].get_submodule(layer)
        err = torch.linalg.norm(w_g + d.delta_b @ d.delta_a - w_s)
        s = torch.linalg.svdvals(w_s - w_g)
        assert torch.isclose(err, s[rank:].pow(2).sum().sqrt(), rtol=1e-3, atol=1e-5), layer
        assert s[0] > 0  # the specialist did move this layer
        g = low["general"].get_submodule(layer)
        assert torch.count_nonzero(g.delta_a) == torch.count_nonzero(g.delta_b) == 0


def test_the_pool_reads_the_shared_weight_once_and_each_heads_rows_are_its_own(family):
    target, corpus, heads = family
    low = list(lowrank_specialists(heads, "general", rank=4).values())
    stacked, one_by_one = HeadPool(low, target), HeadPool(low, target, batched=False)
    (group,) = stacked.groups
    assert {f"{n}.weight" for n in LINEARS} <= group.shared
    assert not {f"{n}.delta_a" for n in LINEARS} & group.shared
    seq = corpus[1, :16]
    f = features(target, seq[:-1], stacked.feature_layers)
    for a, b in zip(stacked.extend(f, seq[1:]), one_by_one.extend(f, seq[1:]), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # a plain head is not stacked with low-rank ones (other weights), yet evaluated alike
    mixed = HeadPool([heads["even"], *low], target)
    assert len(mixed.groups) == 2
    mixed.extend(f, seq[1:])


def test_a_mixed_pool_of_lowrank_specialists_decodes_the_targets_output(family):
    target, corpus, heads = family
    prompt = corpus[2, :10].view(1, -1)
    ref = target.generate(prompt, max_new_tokens=30, do_sample=False, pad_token_id=0)
    pool = [HeadDrafters(lowrank_specialists(heads, "general", rank=2).values(), target),
            PromptLookupDrafter(target.config.vocab_size, 2)]
    out = HedgeSpecDecoder(target, pool, draft_length=3, policy="normalhedge",
                           cost_aware=True).generate(prompt, max_new_tokens=30,
                                                     temperature=0.0, seed=0)
    assert out.sequences.tolist() == ref.tolist()


def test_a_family_that_is_not_one_is_refused_by_name(family):
    target, _, heads = family
    with pytest.raises(ValueError, match="rank must be an integer >= 1"):
        lowrank_specialists(heads, "general", rank=0)
    with pytest.raises(ValueError, match="base head 'base' is not among"):
        lowrank_specialists(heads, "base", rank=2)
    stranger = random_head(target, 48, seed=9)  # its own fc and lm_head
    with pytest.raises(ValueError, match="head 'stranger' is not a specialist of 'general'"):
        lowrank_specialists({**heads, "stranger": stranger}, "general", rank=2)
