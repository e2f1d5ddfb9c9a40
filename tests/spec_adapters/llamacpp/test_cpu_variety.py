"""Whatever x86 CPU runs the suite (AVX2 only, AVX-512, AVX-512 with AMX): llama.cpp, with the
CPU backend chosen for it, decodes a tiny GGUF greedily to the same tokens as the transformers
target converted from the same file (issue 44). The decode runs in a child process, so a
crash in llama.cpp fails this test with its signal; the verdict does not depend on the CPU."""

from __future__ import annotations

import json

import torch

from spec_adapters.hf.models import load_target
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from tests.native import run_child

PROMPT = [1, 74, 77, 84, 84, 87, 3, 88, 87, 90, 84, 76]
NEW_TOKENS = 24

CHILD = """
import json, sys
from spec_adapters.llamacpp import cpu_backend
from spec_adapters.llamacpp.target import GGUFTarget
path, n, prompt = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
target = GGUFTarget(path, n_ctx=128, n_threads=1)
logits, out = target.prefill(prompt), []
for _ in range(n):
    out.append(int(logits.argmax()))
    logits = target.step([out[-1]])[0]
print(json.dumps({"tokens": out, "backend": cpu_backend.ensure_loaded().line()}))
"""


def _transformers_greedy(model, prompt: list[int], n: int) -> tuple[list[int], float]:
    """Greedy tokens by full forwards, and the smallest top-1 over top-2 logit margin met."""
    ids, margin = list(prompt), float("inf")
    with torch.inference_mode():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(logits.argmax()))
    return ids[len(prompt):], margin


def test_llama_cpp_greedy_equals_the_transformers_targets_on_this_cpu(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, hidden=64, heads=2, kv_heads=1, ff=128, seed=5)
    model, _ = load_target(path, cache_dir=tmp_path)
    expected, margin = _transformers_greedy(model, PROMPT, NEW_TOKENS)
    assert margin > 1e-3, "the tiny model has a near tie: choose another seed"
    run = run_child(["-c", CHILD, str(path), str(NEW_TOKENS), json.dumps(PROMPT)],
                    "llama.cpp greedy decoding", env={"OMP_NUM_THREADS": "1"})
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["tokens"] == expected, got["backend"]
