"""The plugin's corrected kernel, in this process, without an engine (the engine:
tests/vllm/test_sampling.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

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
