"""Fix 4's top-p mask and seeded draw without the sort (spec_adapters/vllm/top_p.py) against
vLLM's own ``apply_top_k_top_p_pytorch`` and CPU sampler on the same rows (the engine:
tests/vllm/test_sampling.py)."""

from __future__ import annotations

import pytest
import torch
import vllm._custom_ops  # noqa: F401  (registers torch.ops._C, the sampler's CPU kernels)
from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler, apply_top_k_top_p_pytorch

from spec_adapters.vllm import sampling_fix, top_p

V = 49_152
# vLLM's float32 running sum over the tokens below the cut errs by up to ~2e-5 of mass
# (top_p.py's docstring); a kept set may differ from ours only where the cut lies that close
ROUNDING = 1e-4


def _vllm(logits, k, p):
    return apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=True)


def _rows(n: int, seed: int) -> torch.Tensor:
    """Rows shaped like a language model's: a Zipf-like head over a Gaussian floor, shuffled,
    some rows flat, some with tokens already masked."""
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, V + 1, dtype=torch.float32)
    rows = []
    for i in range(n):
        slope = [0.0, 0.5, 1.0, 2.0, 4.0][i % 5]
        row = -slope * torch.log(ranks) + torch.randn(V, generator=g)
        rows.append(row[torch.randperm(V, generator=g)])
    x = torch.stack(rows)
    x[::7, :100] = -float("inf")
    return x


def _kept(x: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(x)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.5])
def test_the_mask_is_vllms_but_where_the_cut_is_within_vllms_rounding(temperature):
    x = _rows(20, seed=int(temperature * 10)) / temperature
    p = torch.tensor([0.5, 0.8, 0.9, 0.95, 0.99] * 4)
    p[3] = 1.0  # a row without top-p: left as it is
    theirs = _vllm(x.clone(), None, p.clone())
    calls = []
    ours = top_p.apply_top_p(x.clone(), p.clone(),
                             lambda rows, k, q: calls.append(len(rows)) or _vllm(rows, k, q))
    assert torch.equal(ours[3], x[3])
    probs = x.double().softmax(dim=-1)
    differ = 0
    for r in range(len(x)):
        if torch.equal(_kept(ours[r]), _kept(theirs[r])):
            assert torch.equal(ours[r][_kept(ours[r])], x[r][_kept(ours[r])])
            continue
        differ += 1
        for token in torch.nonzero(_kept(ours[r]) != _kept(theirs[r])).flatten():
            above = float(probs[r][probs[r] > probs[r, token]].sum())
            assert abs(above - float(p[r])) < ROUNDING, (r, int(token), above)
    assert differ <= 2
    # the flat rows (slope 0: ~90% of 49,152 tokens kept at p = 0.9) went to vLLM's sort
    assert calls and sum(calls) >= 2


def test_the_most_probable_token_is_kept_and_a_peaked_row_keeps_only_its_head():
    x = torch.full((2, V), -10.0)
    x[0, 7] = 30.0  # p(7) ~ 1
    x[1, [3, 4, 5]] = torch.tensor([5.0, 4.0, 0.0])
    ours = top_p.apply_top_p(x.clone(), torch.tensor([0.1, 0.9]), _vllm)
    assert torch.nonzero(_kept(ours[0])).flatten().tolist() == [7]
    assert torch.nonzero(_kept(ours[1])).flatten().tolist() == [3, 4]
    assert torch.equal(_kept(ours), _kept(_vllm(x.clone(), None, torch.tensor([0.1, 0.9]))))


def test_a_seeded_draw_is_vllms_samplers_draw_and_sorts_only_where_unsure(monkeypatch):
    """The coupled rule's draw for a seeded row (sampling_fix.sample_seeded_top_p) against vLLM's
    own CPU sampler on the same row and generator: the same token and the same generator state
    after it, for 200 draws from LM-shaped rows at five top-p values; vLLM's sort is called
    only for the draws that land in the tail or near the cut."""
    sampler = TopKTopPSampler()
    assert sampler.forward == sampler.forward_cpu and not sampler.use_fp64_gumbel
    sorted_rows = []
    real = top_p.sample_top_p

    def counting(logits, p, seeds, gumbel_argmax, fallback):
        return real(logits, p, seeds, gumbel_argmax,
                    lambda rows, k, q: sorted_rows.append(len(rows)) or fallback(rows, k, q))

    monkeypatch.setattr(top_p, "sample_top_p", counting)
    x = _rows(20, seed=4) / 0.7
    p = torch.tensor([0.5, 0.8, 0.9, 0.95, 0.99] * 4)
    for draw in range(10):
        for r in range(len(x)):
            theirs_gen = torch.Generator().manual_seed(1000 * draw + r)
            ours_gen = torch.Generator().manual_seed(1000 * draw + r)
            theirs, _ = sampler(x[r:r + 1].clone(), {0: theirs_gen}, None, p[r:r + 1])
            ours = sampling_fix.sample_seeded_top_p(x[r:r + 1], p[r:r + 1], ours_gen)
            assert int(ours[0]) == int(theirs[0]), (draw, r)
            assert torch.equal(ours_gen.get_state(), theirs_gen.get_state())
    # about 1 - p of the draws land in the tail: 10-50% here; none would fail the test above
    assert 10 <= sum(sorted_rows) <= 100, sum(sorted_rows)


def test_bad_shapes_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"logits \(n, V\) and p \(n,\)"):
        top_p.apply_top_p(torch.zeros(2, 8), torch.ones(3), _vllm)
    with pytest.raises(ValueError, match=r"logits \(n, V\), p \(n,\) and seeds \(n,\)"):
        top_p.sample_top_p(torch.zeros(2, 8), torch.ones(2), torch.zeros(3, dtype=torch.long),
                           torch.argmax, _vllm)


def test_the_switch_names_its_values(monkeypatch):
    monkeypatch.setenv(sampling_fix.TOP_P_ENV, "fast")
    with pytest.raises(ValueError, match="HEDGESPEC_VLLM_TOP_P must be 'candidates' or 'sort'"):
        sampling_fix._sorted_top_p()
    monkeypatch.setenv(sampling_fix.TOP_P_ENV, "sort")
    assert sampling_fix._sorted_top_p()
    monkeypatch.delenv(sampling_fix.TOP_P_ENV)
    assert not sampling_fix._sorted_top_p()
