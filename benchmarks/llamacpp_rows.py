"""What a row costs in llama.cpp, per CPU backend variant: one ``llama_decode`` of 1..9 rows
after a cached context, every row's logits (a speculative round's shape).

Each variant runs in its own process (a process loads one CPU backend), forced by
``HEDGESPEC_LLAMACPP_CPU``; only variants this CPU runs are timed. The chosen one (what the
engine loads, ``hedgespec doctor``) is marked. Median of ``--repeats`` decodes per row count,
the rows removed from the cache after each.

    .venv/bin/python benchmarks/llamacpp_rows.py                      # the chosen variant
    .venv/bin/python benchmarks/llamacpp_rows.py --variants all --out results/llamacpp-rows.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROWS = (1, 2, 3, 5, 9)


def time_rows(gguf: str, context: int, repeats: int, threads: int) -> dict[int, float]:
    """Median ms of one decode of each row count in :data:`ROWS` after ``context`` tokens."""
    from spec_adapters.llamacpp.target import GGUFTarget

    target = GGUFTarget(gguf, n_ctx=context + 32, n_threads=threads)
    ms = 1e3 * target.row_prices(ROWS, context, repeats)
    target.close()
    return dict(zip(ROWS, ms.tolist(), strict=True))


def main() -> None:
    from spec_adapters.hf.models import find_default_gguf
    from spec_adapters.llamacpp import cpu_backend

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", default=None, help="default: the shipped default target's")
    p.add_argument("--variants", default="chosen",
                   help="chosen (default), all (every variant this CPU runs) or a comma list")
    p.add_argument("--context", type=int, default=300)
    p.add_argument("--repeats", type=int, default=25)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="write the table as JSON")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    gguf = args.gguf or str(find_default_gguf())
    if args.child:  # one variant, in its own process
        print(json.dumps(time_rows(gguf, args.context, args.repeats, args.threads)))
        return
    chosen = cpu_backend.choose()
    runnable = [v for v, s in sorted(chosen.scores.items(), key=lambda kv: -kv[1]) if s > 0]
    names = {"chosen": [chosen.variant], "all": runnable}.get(args.variants,
                                                             args.variants.split(","))
    rows = {}
    for name in names:
        run = subprocess.run([sys.executable, __file__, "--child", name, "--gguf", gguf,
                              "--context", str(args.context), "--repeats", str(args.repeats),
                              "--threads", str(args.threads)], capture_output=True, text=True,
                             env=dict(os.environ, **{cpu_backend.FORCE_ENV: name}), check=False)
        if run.returncode != 0:
            print(f"{name}: failed ({run.returncode}): {run.stderr.strip()[-300:]}")
            continue
        rows[name] = {int(k): v for k, v in json.loads(run.stdout.strip().splitlines()[-1]).items()}
    print(f"{Path(gguf).name}, {args.context} cached tokens, {args.threads} threads, "
          f"median of {args.repeats} (ms per llama_decode)")
    print("| variant | " + " | ".join(f"{n} rows" for n in ROWS) + " | +row (5 vs 1) |")
    print("|---|" + "---:|" * (len(ROWS) + 1))
    for name, ms in rows.items():
        mark = " (chosen)" if name == chosen.variant else ""
        extra = (ms[5] - ms[1]) / 4
        print(f"| {name}{mark} | " + " | ".join(f"{ms[n]:.1f}" for n in ROWS) +
              f" | {extra:.1f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"gguf": gguf, "context": args.context,
                                        "threads": args.threads, "chosen": chosen.variant,
                                        "cpu_flags": chosen.cpu_flags, "ms": rows}, indent=1))


if __name__ == "__main__":
    main()
