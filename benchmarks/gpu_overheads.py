"""The paper's Table 2 on random-initialised models: what HedgeSpec adds to an EAGLE-3 round.

    PYTHONPATH=. python benchmarks/gpu_overheads.py --device cuda --dtype bfloat16 \\
        --config paper --out results/gpu_overheads.json
    PYTHONPATH=. python benchmarks/gpu_overheads.py --config small --device cpu --out x.json

``paper``: a Llama-3.1-8B-config target (32 layers, hidden 4096, vocabulary 128256, GQA 32/8,
Llama-3 RoPE) built from a ``LlamaConfig`` with random weights, ``N = 8`` EAGLE-3 heads of that
size (draft vocabulary 32000, feature layers 2 / 16 / 29), NormalHedge under the decoders'
default delayed-feedback reduction. ``small``: the same pipeline on a tiny target (seconds on a
CPU; the tests run it). Random weights have the real FLOPs and memory traffic, so every row
but acceptance is representative.

Rows (median of ``repeats`` timed calls after one warm-up, milliseconds, CUDA synchronised
before and after each call):

``target_forward_1_token``   the target on one token over a KV cache of ``context`` tokens
``target_forward_tree``      the target verifying a 60-token EAGLE tree (root + 59 drafts)
``head_step_1_token``        one head on one token over its cache of ``context`` pairs
``head_draft_tree``          one head drafting that tree (EAGLE-2: ``depth - 1`` head calls)
``eval_1_head``              one head appending a verified chunk of ``chunk`` pairs
``eval_n_heads_batched``     all ``N`` heads appending that chunk in one stacked forward
``eval_n_heads_loop``        the same, one call per head
``learner_update``           NormalHedge: ``feed`` a round's ``N`` losses + ``play`` the next

Paper (A100, Llama-3.1-8B): target forward 75.7 ms, one EAGLE drafter 2.5 ms, NormalHedge
update 0.41 ms. Output: JSON with ``rows`` (name -> ``median_ms``, ``times_ms`` and what was
measured), ``ratios``, ``paper_a100_ms`` and the environment.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from spec_adapters.app.bench.measure import time_calls
from spec_adapters.eagle import EagleHead, EagleHeadConfig, HeadPool, TreeConfig
from spec_adapters.eagle.tree import draft_tree, verify_tree
from spec_adapters.hf.target import cache_kwarg, crop_cache, forward_cached, new_cache
from spec_adapters.selection.policies import make_policy

LLAMA31_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                  max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192},
                  tie_word_embeddings=False)
SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=8,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
             tie_word_embeddings=False)
TREE = TreeConfig(depth=6, top_k=10, total_tokens=59)  # EAGLE-3's 60-token tree
CONFIGS = {
    "paper": dict(target=LLAMA31_8B, draft_vocab=32000, n_heads=8, context=1024, chunk=4,
                  repeats=20),
    "small": dict(target=SMALL, draft_vocab=128, n_heads=8, context=64, chunk=4, repeats=5),
}
PAPER_A100_MS = {"target_forward": 75.7, "eagle_drafter": 2.5, "normalhedge_update": 0.41}
ROWS = ("target_forward_1_token", "target_forward_tree", "head_step_1_token", "head_draft_tree",
        "eval_1_head", "eval_n_heads_batched", "eval_n_heads_loop", "learner_update")


class Timer:
    """Median wall time of a call, synchronising the device around it."""

    def __init__(self, device: torch.device, repeats: int):
        self.repeats = repeats
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def __call__(self, fn, after=None) -> dict:
        """One warm-up call, then ``repeats`` timed calls of ``fn``; ``after`` (untimed) runs
        after each call (e.g. to restore a cache)."""
        times = time_calls(fn, self.repeats, warmup=1, after=after, sync=self.sync)
        return {"median_ms": statistics.median(times), "times_ms": times}


def build_target(spec: dict, device: torch.device, dtype: torch.dtype):
    """A random-initialised ``LlamaForCausalLM`` of ``spec`` on ``device`` in ``dtype``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, **spec)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype).eval()


def build_heads(target, n: int, draft_vocab: int) -> list[EagleHead]:
    """``n`` EAGLE-3 heads of the target's size, random weights, output rows from the target."""
    prm = next(target.parameters())
    V = int(target.get_input_embeddings().weight.shape[0])
    heads = []
    for i in range(n):
        torch.manual_seed(100 + i)
        cfg = EagleHeadConfig.for_target(target, min(draft_vocab, V))
        with torch.device(prm.device):
            d2t = torch.randperm(V)[: cfg.draft_vocab_size].sort().values
            head = EagleHead(cfg, d2t=d2t)
        heads.append(head.to(prm.dtype).init_from_target(target).eval())
    return heads


@torch.no_grad()
def run(config: str = "small", device: str = "cpu", dtype: str = "float32",
        repeats: int | None = None) -> dict:
    """Measure every row of :data:`ROWS`; returns the JSON-ready result."""
    spec = CONFIGS[config]
    dev, dt = torch.device(device), getattr(torch, dtype)
    timer = Timer(dev, repeats or spec["repeats"])
    target = build_target(spec["target"], dev, dt)
    heads = build_heads(target, spec["n_heads"], spec["draft_vocab"])
    N, ctx, m = spec["n_heads"], spec["context"], spec["chunk"]
    layers = heads[0].config.feature_layers
    V = int(target.get_input_embeddings().weight.shape[0])
    ids = torch.randint(3, V, (ctx + 1,), generator=torch.Generator().manual_seed(0)).to(dev)
    cache = new_cache(target)
    out = target(input_ids=ids[:-1].view(1, -1), use_cache=True, output_hidden_states=True,
                 **{cache_kwarg(target): cache})
    feats = torch.cat([out.hidden_states[i][0] for i in layers], -1)
    rows = {}

    rows["target_forward_1_token"] = {
        **timer(lambda: forward_cached(target, ids[-1:], cache),
                after=lambda: crop_cache(cache, ctx)), "context": ctx, "tokens": 1}

    pool1 = HeadPool(heads[:1], target)
    pool1.extend(feats, ids[1:])
    head = heads[0]
    k, v = pool1.cache_of(0)
    root_logits, root_hidden = pool1.pending_logits[0], pool1.pending_hidden[0]
    tree = draft_tree(head, k, v, root_logits, root_hidden, int(ids[-1]), TREE)
    rows["target_forward_tree"] = {
        **timer(lambda: verify_tree(target, cache, tree, layers),
                after=lambda: crop_cache(cache, ctx)),
        "context": ctx, "tokens": tree.size + 1, "tree": vars(TREE).copy()}

    h, e = root_hidden.view(1, 1, -1), head.embed(ids[-1:]).view(1, 1, -1)
    pos = torch.tensor([ctx], device=dev)
    rows["head_step_1_token"] = {**timer(lambda: head(h, e, pos, k, v)), "context": ctx}
    rows["head_draft_tree"] = {
        **timer(lambda: draft_tree(head, k, v, root_logits, root_hidden, int(ids[-1]), TREE)),
        "nodes": tree.size, "head_calls": TREE.depth - 1}

    chunk_f, chunk_t = feats[-m:], ids[-m:]
    for name, pool in (("eval_1_head", pool1), ("eval_n_heads_batched", HeadPool(heads, target)),
                       ("eval_n_heads_loop", HeadPool(heads, target, batched=False))):
        if pool is not pool1:
            pool.extend(feats, ids[1:])
        covered = len(pool.extend(chunk_f, chunk_t))  # heads whose logits come back
        rows[name] = {**timer(lambda pool=pool: pool.extend(chunk_f, chunk_t)),
                      "heads": covered, "chunk": m, "groups": len(pool.groups),
                      "context": f"{ctx} growing by {m} per call"}

    policy = make_policy("normalhedge", N)
    rng = np.random.default_rng(0)
    losses = np.random.default_rng(1).random((timer.repeats + 1, N))
    state = {"round": policy.play(rng)[0], "i": 0}

    def update():
        policy.feed(state["round"], losses[state["i"] % len(losses)])
        state["round"], state["i"] = policy.play(rng)[0], state["i"] + 1

    rows["learner_update"] = {**timer(update), "experts": N,
                              "policy": f"normalhedge, {type(policy).__name__}"}

    t1, tt = rows["target_forward_1_token"]["median_ms"], rows["target_forward_tree"]["median_ms"]
    ratios = {
        "head_draft_tree / target_forward_tree": rows["head_draft_tree"]["median_ms"] / tt,
        "head_step_1_token / target_forward_1_token": rows["head_step_1_token"]["median_ms"]
        / t1,
        "eval_n_heads_batched / eval_1_head": rows["eval_n_heads_batched"]["median_ms"]
        / rows["eval_1_head"]["median_ms"],
        "eval_n_heads_batched / target_forward_tree": rows["eval_n_heads_batched"]["median_ms"]
        / tt,
        "learner_update / target_forward_tree": rows["learner_update"]["median_ms"] / tt,
    }
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else
           platform.processor() or platform.machine(), "threads": torch.get_num_threads()}
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - build_target needed it already
        pass
    if dev.type == "cuda":
        env["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated(dev) / 2 ** 30
    return {"config": config, "dtype": dtype, "n_heads": N, "context": ctx, "chunk": m,
            "repeats": timer.repeats,
            "target_params_m": sum(p.numel() for p in target.parameters()) / 1e6,
            "head_params_m": sum(p.numel() for p in head.parameters()) / 1e6,
            "draft_vocab": head.config.draft_vocab_size, "feature_layers": list(layers),
            "rows": rows, "ratios": ratios, "paper_a100_ms": PAPER_A100_MS, "env": env}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="small")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default=None,
                    help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=None, help="JSON output path (default: stdout only)")
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    res = run(args.config, args.device, dtype, args.repeats)
    text = json.dumps(res, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    for name in ROWS:
        r = res["rows"][name]
        print(f"{name:26s} {r['median_ms']:10.3f} ms")
    for name, x in res["ratios"].items():
        print(f"{name:45s} {x:8.3f}" if math.isfinite(x) else f"{name}: n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
