"""The plugin's corrected kernel, in this process, without an engine (the engine:
tests/vllm/test_sampling.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from spec_adapters.vllm import sampling_fix
from tests.vllm.engine_run import ROOT, vllm_env


def _reference(values: list, counts: list[int], replace_from, replace_to) -> list:
    return [replace_to if v == replace_from else v for v, n in zip(values, counts, strict=True)
            for _ in range(n)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_expand_writes_each_value_over_its_rows_in_the_outputs_own_dtype(dtype):
    values, counts = [0, 7, 0, 3], [4, 0, 2, 3]
    cu = torch.tensor(counts).cumsum(0).to(torch.int32)
    out = torch.full((9,), -5, dtype=dtype)
    sampling_fix.expand_to_tokens(out, torch.tensor(values, dtype=dtype), cu, 0, 1)
    assert out.tolist() == _reference(values, counts, 0, 1)
    floats = torch.tensor([0.0, 0.7, 0.0, 1.3])
    out = torch.full((9,), -5.0)
    sampling_fix.expand_to_tokens(out, floats, cu, 0, 1)
    assert torch.equal(out, torch.tensor(_reference(floats.tolist(), counts, 0.0, 1.0)))


def test_expand_of_an_empty_batch_writes_nothing():
    out = torch.full((3,), -5.0)
    sampling_fix.expand_to_tokens(out, torch.zeros(0), torch.zeros(0, dtype=torch.int32), 0, 1)
    assert out.tolist() == [-5.0] * 3


KERNEL_CHECK = """
import json
import torch
import vllm._custom_ops  # the CPU ops
from vllm.platforms import current_platform
from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
from spec_adapters.vllm import sampling_fix

current_platform.register_triton_kernel_overrides()  # the platform's kernels, as in a worker
installed = sampling_fix.install() and sampling_fix.installed()
cu = torch.tensor([4, 8, 12], dtype=torch.int32)
temps = expand_batch_to_tokens(torch.tensor([0.0, 0.7, 0.0]), cu, 12, replace_from=0,
                               replace_to=1)
top_k = expand_batch_to_tokens(torch.tensor([5, 0, 9], dtype=torch.int32), cu, 12)
print(json.dumps({"installed": installed, "temps": temps.tolist(), "top_k": top_k.tolist()}))
"""


def test_installed_vllm_spreads_mixed_temperatures_right():
    """vLLM's own expand_batch_to_tokens with the CPU platform's kernels registered, in a
    fresh interpreter (registering scans every loaded module): the temperatures and top-k of
    a greedy / sampled / greedy batch over 4 draft positions each."""
    proc = subprocess.run([sys.executable, "-c", KERNEL_CHECK], cwd=ROOT, env=vllm_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["installed"]
    assert got["temps"] == torch.tensor([1.0] * 4 + [0.7] * 4 + [1.0] * 4).tolist()
    assert got["top_k"] == [5] * 4 + [0] * 4 + [9] * 4


RECOVERED_CHECK = """
import json
from types import SimpleNamespace
import torch
import vllm._custom_ops  # the CPU ops
import vllm.v1.sample.rejection_sampler as rs
from vllm.platforms import current_platform
from spec_adapters.vllm import sampling_fix

current_platform.register_triton_kernel_overrides()
vllms = rs.sample_recovered_tokens  # vLLM's own, before the plugin replaces it
sampling_fix.install()
assert rs.sample_recovered_tokens is sampling_fix.sample_recovered_tokens
V = 50
target = torch.softmax(torch.randn(7, V, generator=torch.Generator().manual_seed(1)), -1)
drafts = torch.randint(0, V, (7,), generator=torch.Generator().manual_seed(2))

def run(fn, counts, seeded, global_seed=5):
    torch.manual_seed(global_seed)
    gens = {i: torch.Generator().manual_seed(100 + i) for i in seeded}
    n = sum(counts)
    cu = torch.tensor(counts).cumsum(0).to(torch.int32)
    out = fn(max(counts), counts, cu, drafts[:n].contiguous(), None,
             target[:n].contiguous(), SimpleNamespace(generators=gens), "cpu")
    return out.tolist(), [g.get_state().sum().item() for g in gens.values()]

res = {}
# every row drafts, the unseeded ones first: the same noise as vLLM's (the global draws in
# row order, then the seeded rows' own)
res["all"] = [run(f, [3, 2, 2], [2]) for f in (vllms, sampling_fix.sample_recovered_tokens)]
# a row without drafts in the middle: the seeded drafting rows get vLLM's tokens
res["seeded"] = [run(f, [3, 0, 4], [0, 2]) for f in (vllms, sampling_fix.sample_recovered_tokens)]
# no drafts at all: nothing drawn from the global generator
torch.manual_seed(9)
before = torch.get_rng_state()
out = sampling_fix.sample_recovered_tokens(0, [0, 0], torch.zeros(2, dtype=torch.int32),
                                           drafts[:0], None, target[:0],
                                           SimpleNamespace(generators={}), "cpu")
res["none"] = [out.tolist(), bool(torch.equal(before, torch.get_rng_state()))]
# top-p zeroed all but a few tokens of each unseeded row (supports of 6 and 4 tokens): noise
# for those only; the recovered tokens' counts over many steps, and the global draws of one
masked = target.clone()
masked[:3, 6:] = 0
masked[3:5, :40] = 0
masked[3:5, 44:] = 0
cu = torch.tensor([3, 5], dtype=torch.int32)
args = (3, [3, 2], cu, drafts[:5].contiguous(), None, masked[:5].contiguous(),
        SimpleNamespace(generators={}), "cpu")
torch.manual_seed(11)
sampling_fix.sample_recovered_tokens(*args)
after = torch.get_rng_state()
torch.manual_seed(11)
torch.empty(6).exponential_(), torch.empty(4).exponential_()
res["draws"] = bool(torch.equal(after, torch.get_rng_state()))
counts = torch.zeros(5, V, dtype=torch.int64)
for _ in range(4000):
    counts[torch.arange(5), sampling_fix.sample_recovered_tokens(*args)] += 1
res["masked"] = {"counts": counts.tolist(), "probs": masked[:5].tolist(),
                 "drafts": drafts[:5].tolist()}
print(json.dumps(res))
"""


def test_recovered_tokens_draw_noise_for_the_rows_with_drafts_only():
    """Fix 3 against vLLM's own sample_recovered_tokens, in a fresh interpreter with the CPU
    kernels registered: the same recovered tokens where every row drafts (the same draws, the
    global generator's in row order while the unseeded rows come first), the
    same for the seeded rows where another row has no drafts (each draws from its own
    generator, as much as vLLM's), and no draw at all for a step without drafts. Where top-k /
    top-p left a row a few tokens, noise is drawn for those only, and the recovered tokens
    follow the residual law (the target's with the draft removed: chi-square)."""
    proc = subprocess.run([sys.executable, "-c", RECOVERED_CHECK], cwd=ROOT, env=vllm_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    theirs, ours = got["all"]
    assert ours == theirs and len(ours[0]) == 7
    theirs, ours = got["seeded"]
    assert ours == theirs and len(ours[0]) == 7
    assert got["none"] == [[], True]
    assert got["draws"]  # 6 + 4 exponentials, not 2 x 50
    masked = got["masked"]
    for counts, probs, draft in zip(masked["counts"], masked["probs"], masked["drafts"],
                                    strict=True):
        residual = np.array(probs)
        residual[draft] = 0.0
        counts = np.array(counts)
        assert counts[residual == 0].sum() == 0
        kept = residual > 0
        assert chisquare(counts[kept], 4000 * residual[kept] / residual.sum()).pvalue > 1e-3
