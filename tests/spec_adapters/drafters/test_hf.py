"""HFDrafter against full-context forward passes; the Drafter protocol; vocabulary checks."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.core.proposal import Dense, PointMass
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.drafters import (
    HFDrafter,
    StackedHFDrafters,
    as_drafter,
    check_vocab,
)
from spec_adapters.drafters.base import sample_draft
from tests.spec_adapters.drafter_contract import check_drafter_contract
from tests.spec_adapters.single_helpers import full_logits


def test_extend_returns_the_logits_that_predicted_each_token(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=3)
    d = HFDrafter(model)
    prompt = [1, 9, 17, 4]
    d.start(torch.tensor(prompt))
    rows1 = d.extend(torch.tensor([5, 6, 7]))
    rows2 = d.extend(torch.tensor([8]))
    full = full_logits(model, [*prompt, 5, 6, 7, 8])
    torch.testing.assert_close(torch.cat([rows1, rows2]), full[len(prompt) - 1:-1],
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_propose_samples_from_q_and_commits_nothing(tiny_llama, temperature):
    model = tiny_llama(vocab_size=64, seed=3)
    d = HFDrafter(model)
    prompt = [1, 9, 17, 4]
    d.start(torch.tensor(prompt))
    sampling = SamplingConfig(temperature=temperature)
    tokens, q = d.propose(4, sampling, torch.Generator().manual_seed(0))
    assert tokens.shape == (4,) and len(q) == 4
    # greedy: a point mass (no one-hot, no multinomial over V); sampled: dense rows
    assert isinstance(q, PointMass if sampling.greedy else Dense)
    full = full_logits(model, prompt + tokens.tolist())
    torch.testing.assert_close(q.dense(), sampling.probs(full[len(prompt) - 1:-1]),
                               atol=1e-5, rtol=1e-5)
    assert bool((q.prob(tokens) > 0).all())
    # nothing was committed: extending now predicts from the prompt alone
    rows = d.extend(torch.tensor([11, 12]))
    torch.testing.assert_close(rows, full_logits(model, [*prompt, 11, 12])[3:5],
                               atol=1e-5, rtol=1e-5)


def test_greedy_proposal_is_the_drafters_argmax_chain(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=3)
    d = HFDrafter(model)
    d.start(torch.tensor([1, 2, 3]))
    tokens, _ = d.propose(5, SamplingConfig(0.0), None)
    ref = model.generate(torch.tensor([[1, 2, 3]]), do_sample=False, max_new_tokens=5,
                         eos_token_id=None)
    assert tokens.tolist() == ref[0, 3:].tolist()


def test_hf_drafters_keep_the_protocol_and_models_are_wrapped(tiny_llama):
    models = [tiny_llama(vocab_size=64, seed=s) for s in (3, 4)]
    check_drafter_contract(HFDrafter(models[0]), [1, 9, 17, 4], 64)
    check_drafter_contract(StackedHFDrafters(models).members[1], [1, 9, 17, 4], 64)
    wrapped = as_drafter(models[0], 2)
    assert type(wrapped) is HFDrafter and wrapped.name.startswith("drafter2:")
    check_drafter_contract(wrapped, [1, 9, 17, 4], 64)
    wrapped.start(torch.tensor([1, 9, 17]))
    torch.testing.assert_close(wrapped.extend(torch.tensor([4, 5])),
                               full_logits(models[0], [1, 9, 17, 4, 5])[2:4],
                               atol=1e-5, rtol=1e-5)
    assert as_drafter(wrapped, 0) is wrapped
    with pytest.raises(ValueError, match=r"drafters\[1\]"):
        as_drafter("not a model", 1)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_propose_rejects_a_bad_draft_length(tiny_llama, k):
    models = [tiny_llama(vocab_size=64, seed=s) for s in (3, 4)]
    for d in (HFDrafter(models[0]), StackedHFDrafters(models).members[1]):
        d.start(torch.tensor([1, 9, 17]))
        with pytest.raises(ValueError, match=r"k \(number of draft tokens\) must be an integer"):
            d.propose(k, SamplingConfig(0.0))
        tokens, q = d.propose(2, SamplingConfig(0.0))  # still usable
        assert tokens.shape == (2,) and len(q) == 2


def test_sample_draft_feeds_each_prefix_once_in_order_and_returns_the_rows_it_drew_from():
    V = 11
    seen = []

    def logits_after(drafts):  # point mass on 3 * len(drafts) + 1 (an independent oracle)
        seen.append(drafts.tolist())
        logits = torch.full((V,), -30.0)
        logits[(3 * len(drafts) + 1) % V] = 0.0
        return logits

    tokens, q = sample_draft(4, SamplingConfig(1.0), torch.Generator().manual_seed(0),
                             logits_after, V)
    assert tokens.dtype == torch.long and tokens.tolist() == [1, 4, 7, 10]
    assert seen == [[], [1], [1, 4], [1, 4, 7]]  # never after the last draft
    torch.testing.assert_close(q.dense(), torch.softmax(torch.stack(
        [logits_after(tokens[:j]) for j in range(4)]), -1))
    seen.clear()
    with pytest.raises(ValueError, match=r"k \(number of draft tokens\) must be"):
        sample_draft(0, SamplingConfig(0.0), None, logits_after, V)
    assert seen == []  # checked before any logits are computed


def test_sample_draft_stops_where_the_drafter_abstains():
    V = 7

    def predict_after(drafts):  # a point mass on len(drafts), abstaining after two drafts
        return None if len(drafts) == 2 else PointMass(torch.tensor([len(drafts)]), V)

    tokens, q = sample_draft(5, SamplingConfig(0.7), None, predict_after, V)
    assert tokens.tolist() == [0, 1] and q.tokens.tolist() == [0, 1]
    tokens, q = sample_draft(5, SamplingConfig(0.0), None, lambda d: None, V)
    assert tokens.shape == (0,) and len(q) == 0 and q.vocab_size == V


def test_vocab_mismatch_names_the_drafter(tiny_llama):
    ds = [HFDrafter(tiny_llama(vocab_size=64), name="ok"),
          HFDrafter(tiny_llama(vocab_size=80), name="big")]
    with pytest.raises(ValueError, match=r"vocabulary size mismatch.*'big' \(80\)"):
        check_vocab(ds, 64)
    check_vocab(ds[:1], 64)


@pytest.mark.parametrize("tied", [False, True])
def test_stacked_drafters_equal_separate_ones(tiny_llama, tied):
    from spec_adapters.drafters import StackedHFDrafters

    models = [tiny_llama(vocab_size=64, seed=s) for s in (3, 4, 5)]
    if tied:  # LM head = input embeddings, as in SmolLM2
        for m in models:
            m.lm_head.weight = m.model.embed_tokens.weight
    group = StackedHFDrafters(models)
    singles = [HFDrafter(m) for m in models]
    prompt = torch.tensor([1, 9, 17, 4])
    sampling = SamplingConfig(temperature=0.9)
    for d in [*group, *singles]:
        d.start(prompt)
    # member 1 lags behind (lazy catch-up), the others extend chunk by chunk
    for chunk in ([5, 6], [7], [8, 9, 10]):
        for i in (0, 2):
            torch.testing.assert_close(group[i].extend(torch.tensor(chunk)),
                                       singles[i].extend(torch.tensor(chunk)),
                                       atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(group[1].extend(torch.tensor([5, 6, 7, 8, 9, 10])),
                               singles[1].extend(torch.tensor([5, 6, 7, 8, 9, 10])),
                               atol=1e-5, rtol=1e-5)
    for i in range(3):
        tok_a, q_a = group[i].propose(3, sampling, torch.Generator().manual_seed(i))
        tok_b, q_b = singles[i].propose(3, sampling, torch.Generator().manual_seed(i))
        assert tok_a.tolist() == tok_b.tolist()
        torch.testing.assert_close(q_a.dense(), q_b.dense(), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="differ"):
        group[0].extend(torch.tensor([11]))
        group[1].extend(torch.tensor([12]))


def test_stacking_different_architectures_is_rejected(tiny_llama):
    from spec_adapters.drafters import StackedHFDrafters

    with pytest.raises(ValueError, match="cannot stack drafter 1"):
        StackedHFDrafters([tiny_llama(vocab_size=64), tiny_llama(vocab_size=64, hidden_size=64)])
