"""What vLLM's sampled verification costs a step on CPU, with and without the project's plugin.

At T > 0 vLLM's rejection sampler masks every draft position's target row by top-k / top-p
(``apply_sampling_constraints``: on CPU a sort of the whole vocabulary a row) and draws a
vocabulary of exponentials per drafting request for the recovered token. The plugin
(:mod:`spec_adapters.vllm.sampling_fix`, Fixes 3 and 4) masks by ``topk`` candidates
(:mod:`spec_adapters.vllm.top_p`) and draws the noise on the residual's support only. This
times both on the target's own next-token rows (a forward over a real text), ``D`` draft
positions for each of ``B`` requests, vLLM's and the plugin's calls interleaved, and checks
that the masks agree (up to vLLM's own float32 rounding at the cut: ``top_p.py``). Then a
seeded request's draw at one position (the coupled rule draws one per position, as plain
decoding does): vLLM's CPU sampler against the plugin's draw (``top_p.sample_top_p``), which
sorts only where the draw is not certain to be kept; both must give the same token.

    LD_PRELOAD=.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python \
        benchmarks/vllm_sampled_verify.py --target .cache/models/SmolLM2-135M-Instruct.Q4_1-*/ \
        [--drafts 1,2,4] [--requests 1,8] [--temperature 0.7] [--top-p 0.9] [--repeats 30] \
        [--threads 2] [--json results/vllm-sampled-verify.json]

Run in the vLLM environment (``make setup``), on a transformers folder: the default target's
is written by ``make demo`` or any ``hedgespec`` command (the GGUF package lives in ``.venv``).
Prints median milliseconds per step; docs/benchmark.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch

TEXT = ("The lighthouse keeper climbed the spiral stairs every evening, trimmed the wick and "
        "wound the clockwork that turned the great lens. Ships passing in the night saw its "
        "beam sweep across the water, and knew the rocks were near. In the morning he wrote "
        "the weather in his log: wind from the west, a heavy swell, fog lifting by noon. "
        "Photosynthesis converts light energy into chemical energy stored in glucose; the "
        "light reactions take place in the thylakoid membranes of the chloroplast.")


def target_rows(target: str, n: int) -> torch.Tensor:
    """The target's next-token logits at the last ``n`` positions of :data:`TEXT`."""
    from spec_adapters.hf.models import load_target

    model, tokenizer = load_target(target)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    if logits.shape[0] < n:
        raise SystemExit(f"the text gives {logits.shape[0]} rows, fewer than {n}")
    return logits[-n:]


def _median_ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def _seeded_draws(pool: torch.Tensor, p: float, repeats: int) -> dict:
    """Time one seeded position's draw, vLLM's sampler and the plugin's, interleaved, on every
    row of ``pool`` with its own generator; count any token that differs and, in an untimed
    second draw with the same seed, the plugin's sorts."""
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler, apply_top_k_top_p

    from spec_adapters.vllm import sampling_fix, top_p

    sampler, q = TopKTopPSampler(), torch.tensor([p])
    sorted_rows = []

    def counted_sort(rows, k, q):
        sorted_rows.append(len(rows))
        return apply_top_k_top_p(rows, k, q)

    t = {"vllm": [], "plugin": []}
    differ = 0
    for rep in range(repeats):
        for r in range(len(pool)):
            row = pool[r:r + 1]
            start = time.perf_counter()
            theirs, _ = sampler(row.clone(), {0: torch.Generator().manual_seed(rep)}, None, q)
            mid = time.perf_counter()
            ours = sampling_fix.sample_seeded_top_p(row, q, torch.Generator().manual_seed(rep))
            t["vllm"].append(mid - start)
            t["plugin"].append(time.perf_counter() - mid)
            differ += int(ours[0]) != int(theirs[0])
            seed = torch.randint(0, 2**31, (1,), generator=torch.Generator().manual_seed(rep))
            top_p.sample_top_p(row, q, seed, torch.ops._C.fused_gumbel_argmax, counted_sort)
    return {"vllm_ms": _median_ms(t["vllm"]), "plugin_ms": _median_ms(t["plugin"]),
            "sorted": sum(sorted_rows), "draws": len(t["vllm"]), "differ": differ}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/vllm_sampled_verify.py",
                                description="vLLM's sampled verification cost, with and "
                                            "without the plugin")
    p.add_argument("--target", required=True, help="transformers model folder")
    p.add_argument("--drafts", default="1,2,4", help="draft positions per request")
    p.add_argument("--requests", default="1,8", help="requests with drafts in the step")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    drafts = [int(x) for x in args.drafts.split(",")]
    requests = [int(x) for x in args.requests.split(",")]
    if min(drafts + requests) < 1 or args.repeats < 3 or not 0 < args.top_p <= 1:
        p.error("--drafts and --requests must be positive, --repeats >= 3, --top-p in (0, 1]")
    if args.temperature <= 0:
        p.error("--temperature must be above 0: greedy verification neither sorts nor draws")
    torch.set_num_threads(args.threads)

    import vllm._custom_ops  # noqa: F401  (the CPU ops)
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.platforms import current_platform
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    from spec_adapters.vllm import sampling_fix, top_p

    current_platform.register_triton_kernel_overrides()
    vllm_recovered = rs.sample_recovered_tokens  # vLLM's own, before the plugin's

    def vllm_mask(x, k, q):
        return apply_top_k_top_p_pytorch(x, k, q, allow_cpu_sync=True)

    def vllm_masked(x, q):
        return vllm_mask(x.clone(), None, q)

    def plugin_masked(x, q):
        return top_p.apply_top_p(x.clone(), q, vllm_mask)

    pool = target_rows(args.target, max(drafts) * max(requests)) / args.temperature
    results, differing = [], 0
    print(f"{pool.shape[1]}-token rows, T = {args.temperature}, top-p {args.top_p}, "
          f"{args.threads} threads, median of {args.repeats}")
    print("| requests x draft positions | mask: vLLM / plugin ms | recovered-token noise: "
          "vLLM / plugin ms | saved a step, ms |")
    print("|---|---|---|---:|")
    for b in requests:
        for d in drafts:
            x = pool[:b * d]
            q = torch.full((b * d,), args.top_p)
            theirs, ours = vllm_masked(x, q), plugin_masked(x, q)
            differing += int((torch.isfinite(theirs) != torch.isfinite(ours)).any(-1).sum())
            probs = ours.softmax(dim=-1)
            cu = torch.arange(1, b + 1, dtype=torch.int32) * d
            draft_ids = probs.argmax(dim=-1).to(torch.int64)
            rec_args = (d, [d] * b, cu, draft_ids, None, probs, SimpleNamespace(generators={}),
                        "cpu")
            calls = {"mask_vllm": (vllm_masked, (x, q)), "mask_plugin": (plugin_masked, (x, q)),
                     "noise_vllm": (vllm_recovered, rec_args),
                     "noise_plugin": (sampling_fix.sample_recovered_tokens, rec_args)}
            t = {key: [] for key in calls}
            for _ in range(args.repeats):  # interleaved: the machine's drift hits both alike
                for key, (fn, fn_args) in calls.items():
                    start = time.perf_counter()
                    fn(*fn_args)
                    t[key].append(time.perf_counter() - start)
            row = {"requests": b, "drafts": d, **{k: _median_ms(v) for k, v in t.items()}}
            row["saved_ms"] = (row["mask_vllm"] + row["noise_vllm"] - row["mask_plugin"]
                               - row["noise_plugin"])
            results.append(row)
            print(f"| {b} x {d} | {row['mask_vllm']:.2f} / {row['mask_plugin']:.2f} | "
                  f"{row['noise_vllm']:.2f} / {row['noise_plugin']:.2f} | "
                  f"{row['saved_ms']:.2f} |")
    print(f"rows whose kept set differs from vLLM's (within its rounding at the cut): "
          f"{differing}")
    seeded = _seeded_draws(pool, args.top_p, args.repeats)
    print(f"a seeded position's draw, median over the {len(pool)} rows x {args.repeats}: "
          f"vLLM's sampler {seeded['vllm_ms']:.2f} ms, the plugin's {seeded['plugin_ms']:.2f} ms "
          f"(sorted for {seeded['sorted']} of {seeded['draws']} draws; tokens that differ: "
          f"{seeded['differ']})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "rows": results, "differing_rows": differing,
                                         "seeded_draw": seeded},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
