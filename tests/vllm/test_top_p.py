"""Fix 4's top-p mask without the sort (spec_adapters/vllm/top_p.py) against vLLM's own
``apply_top_k_top_p_pytorch`` on the same rows (the engine: tests/vllm/test_sampling.py)."""

from __future__ import annotations

import pytest
import torch
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

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


def test_bad_shapes_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"logits \(n, V\) and p \(n,\)"):
        top_p.apply_top_p(torch.zeros(2, 8), torch.ones(3), _vllm)


def test_the_switch_names_its_values(monkeypatch):
    monkeypatch.setenv(sampling_fix.TOP_P_ENV, "fast")
    with pytest.raises(ValueError, match="HEDGESPEC_VLLM_TOP_P must be 'candidates' or 'sort'"):
        sampling_fix._sorted_top_p()
    monkeypatch.setenv(sampling_fix.TOP_P_ENV, "sort")
    assert sampling_fix._sorted_top_p()
    monkeypatch.delenv(sampling_fix.TOP_P_ENV)
    assert not sampling_fix._sorted_top_p()
