"""TargetModel: the KV-cache bookkeeping of prefill / verify / crop against full forward passes."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.hf.target import TargetModel
from tests.spec_adapters.single_helpers import full_logits


def test_verify_after_crop_equals_full_forward(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=0)
    target = TargetModel(model)
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(3, 64, (7,), generator=g).tolist()
    target.prefill(torch.tensor(seq))
    assert target.cached_length == len(seq) - 1  # everything but the last token
    for n_keep in (2, 0, 4):  # accept 2 of 4 drafts, then 0 of 4, then all 4
        drafts = torch.randint(3, 64, (4,), generator=g)
        logits = target.verify(torch.tensor([seq[-1]]), drafts)
        ref = full_logits(model, seq + drafts.tolist())[len(seq) - 1:]
        torch.testing.assert_close(logits, ref, atol=1e-5, rtol=1e-5)
        target.crop(len(seq) + n_keep)
        seq = seq + drafts[:n_keep].tolist() + [5]  # + the resampled token
        assert target.cached_length == len(seq) - 1


@pytest.mark.parametrize("rows_first", [False, True])
def test_prefix_is_never_recomputed(tiny_llama, rows_first):
    model = tiny_llama(vocab_size=64, seed=0)
    fed = []
    model.register_forward_pre_hook(lambda m, a, kw: fed.append(kw["input_ids"].shape[1]),
                                    with_kwargs=True)  # the twin is a copy: it has the hook
    target = TargetModel(model, rows_first=rows_first)
    target.prefill(torch.arange(3, 13))
    target.verify(torch.tensor([12]), torch.tensor([3, 4, 5]))
    target.crop(11)
    target.verify(torch.tensor([3]), torch.tensor([6, 7, 8]))
    assert fed == [9, 4, 4]
    assert target.calls == 2


def test_prompt_longer_than_context_is_rejected(tiny_llama):
    target = TargetModel(tiny_llama(vocab_size=64, max_position_embeddings=16))
    with pytest.raises(ValueError, match="longer than the target's context"):
        target.prefill(torch.arange(17))
    target.prefill(torch.arange(16))  # exactly the context fits


def test_single_token_prompt_has_empty_cache(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=0)
    target = TargetModel(model)
    target.prefill(torch.tensor([7]))
    assert target.cached_length == 0
    logits = target.verify(torch.tensor([7]), torch.tensor([9]))
    torch.testing.assert_close(logits, full_logits(model, [7, 9]), atol=1e-5, rtol=1e-5)
