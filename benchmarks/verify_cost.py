"""The target's forward time with a KV cache, as a function of the tokens verified at once.

``T(n)`` for ``n = 1 .. 16`` new tokens appended to a cached context (the verification pass of
a round that drafted ``n - 1`` tokens; ``n = 1`` is a plain decoding step), for a few exact
execution settings (thread count, attention implementation, the linear layers' layout: ``hf``
as the model comes, ``rows-first`` as :class:`~spec_adapters.hf.target.TargetModel` runs it on
CPU, :mod:`spec_adapters.hf.rows_first`). Every setting computes the same float32 function;
the script prints how far the logits are from the first setting's.

    python benchmarks/verify_cost.py [--target PATH] [--threads 1,2] [--attn sdpa,eager]
                                     [--layout hf,rows-first] [--context 128] [--repeats 15]
                                     [--json results/verify.json]

Prints median milliseconds per setting; docs/benchmark.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from spec_adapters.hf.models import load_target
from spec_adapters.hf.rows_first import rows_first_twin
from spec_adapters.hf.target import crop_cache, forward_cached, new_cache


def measure(model, context: torch.LongTensor, sizes: list[int], repeats: int
            ) -> tuple[dict[int, float], dict[int, torch.Tensor]]:
    """Median seconds of one cached forward over ``n`` new tokens, and its logits, for each
    ``n`` in sizes."""
    cache = new_cache(model)
    forward_cached(model, context[:-16], cache)
    base = int(cache.get_seq_length())
    out, logits = {}, {}
    for n in sizes:
        ids = context[-16:][:n]
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            logits[n] = forward_cached(model, ids, cache)
            times.append(time.perf_counter() - t)
            crop_cache(cache, base)
        out[n] = statistics.median(times[2:] if repeats > 4 else times)
    return out, logits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/verify_cost.py",
                                description="target forward time vs tokens verified at once")
    p.add_argument("--target", default=None, help="model folder or .gguf (default SmolLM2-135M)")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument("--attn", default="sdpa,eager", help="comma-separated attention impls")
    p.add_argument("--layout", default="hf,rows-first",
                   help="comma-separated linear layouts: hf, rows-first")
    p.add_argument("--context", type=int, default=128, help="cached context length (>= 32)")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--max-n", type=int, default=16)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.context < 32 or args.repeats < 1 or not 1 <= args.max_n <= 16:
        p.error("--context >= 32, --repeats >= 1, 1 <= --max-n <= 16")
    layouts = args.layout.split(",")
    if not set(layouts) <= {"hf", "rows-first"}:
        p.error(f"--layout takes hf and/or rows-first, got {args.layout!r}")
    model, tok = load_target(args.target)
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, tok.vocab_size, (args.context,), generator=gen)
    sizes = list(range(1, args.max_n + 1))
    rows, reference = [], None
    for attn in args.attn.split(","):
        model.set_attn_implementation(attn)
        nets = {"hf": model, "rows-first": rows_first_twin(model)}
        for layout in layouts:
            for threads in (int(t) for t in args.threads.split(",")):
                torch.set_num_threads(threads)
                times, logits = measure(nets[layout], context, sizes, args.repeats)
                if reference is None:
                    reference = logits
                err = max(float((logits[n] - reference[n]).abs().max()) for n in sizes)
                rows.append({"attn": attn, "layout": layout, "threads": threads,
                             "max_abs_logit_diff": err,
                             "ms": {n: 1000 * s for n, s in times.items()}})
                ms = " ".join(f"{1000 * times[n]:.1f}" for n in sizes)
                print(f"{attn:6} {layout:10} threads={threads}  T(n) ms, n=1..{sizes[-1]}: {ms}"
                      f"  (logit diff {err:.1e})", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"context": args.context, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
