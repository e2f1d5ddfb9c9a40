"""What a row costs in llama.cpp per weight type, and what the type costs the model.

For each weight type (:data:`spec_adapters.llamacpp.quantize.WEIGHT_TYPES`) the shipped GGUF
is re-quantized (a different model: see that module), then timed: one ``llama_decode`` of
1 / 2 / 3 / 5 / 9 rows (every row's logits, a speculative round's shape) after ``--contexts``
cached tokens, median of ``--repeats``, for each thread count and with llama.cpp's repacked
layouts on and off. Beside it each type's perplexity on held-out text (the seven domains'
benchmark prompts, never trained on) against the shipped file's. Resumable: each measurement is
a line of ``<out>/records.jsonl``, skipped when run again; the table, ``results.json`` and a
plot (ms against rows, per type) are written at the end.

    .venv/bin/python benchmarks/llamacpp_types.py --out results/llamacpp-types
    .venv/bin/python benchmarks/llamacpp_types.py --types Q4_0,Q4_K_M --threads 2 --out ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROWS = (1, 2, 3, 5, 9)


def time_rows(gguf: Path, context: int, repeats: int, threads: int, repack: bool
              ) -> dict[int, float]:
    """Median ms of one decode of each row count in :data:`ROWS` after ``context`` tokens."""
    from spec_adapters.llamacpp.target import GGUFTarget

    target = GGUFTarget(gguf, n_ctx=context + 32, n_threads=threads, repack=repack)
    ms = 1e3 * target.row_prices(ROWS, context, repeats)
    target.close()
    return dict(zip(ROWS, ms.tolist(), strict=True))


def plot(records: list[dict], threads: int, context: int, path: Path) -> None:
    """ms per decode against rows, one line per type (repack on, ``threads``, ``context``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in records:
        if r["kind"] == "rows" and r["threads"] == threads and r["repack"] \
                and r["context"] == context:
            ax.plot(ROWS, [r["ms"][str(n)] for n in ROWS], marker="o", label=r["type"])
    ax.set_xlabel("rows in one llama_decode")
    ax.set_ylabel("ms")
    ax.set_title(f"llama.cpp, {threads} threads, {context} cached tokens")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    from tqdm import tqdm

    from spec_adapters.app.cli.quantize import held_out_texts
    from spec_adapters.app.domains import load_domains, prepare_domains
    from spec_adapters.hf.models import find_default_gguf
    from spec_adapters.llamacpp.quantize import WEIGHT_TYPES, perplexity, quantize
    from spec_adapters.llamacpp.target import GGUFTarget
    from spec_adapters.store.location import default_cache_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", type=Path, default=None, help="default: the shipped target's")
    p.add_argument("--types", default=",".join(WEIGHT_TYPES))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--contexts", default="300")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--ppl-tokens", type=int, default=8000,
                   help="held-out tokens for perplexity (0: none)")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    shipped = args.gguf or find_default_gguf()
    cache = args.cache_dir or default_cache_dir()
    types = args.types.split(",")
    unknown = [t for t in types if t not in WEIGHT_TYPES]
    if unknown:
        p.error(f"unknown --types {unknown}; known: {', '.join(WEIGHT_TYPES)}")
    threads = [int(t) for t in args.threads.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "records.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    done = {json.dumps({k: r[k] for k in r if k not in ("ms", "ppl")}, sort_keys=True)
            for r in records}
    texts = None
    if args.ppl_tokens:
        reader = GGUFTarget(shipped, n_ctx=512, n_threads=max(threads))
        prepare_domains(cache)
        texts = held_out_texts(load_domains(cache), reader.tokenize, args.ppl_tokens)
        reader.close()
    jobs = [("ppl", t, max(threads), True, 256) for t in ["shipped", *types] if texts] + \
        [("rows", t, n, rp, c) for t in types for n in threads for rp in (True, False)
         for c in contexts]
    for kind, wtype, n, repack, context in tqdm(jobs, desc="measurements"):
        key = {"kind": kind, "type": wtype, "threads": n, "repack": repack, "context": context}
        if json.dumps(key, sort_keys=True) in done:
            continue
        gguf = shipped if wtype == "shipped" else cache / "gguf-types" / \
            f"{shipped.stem}.{wtype}.gguf"
        if not gguf.exists():
            quantize(shipped, gguf, wtype, threads=max(threads))
        if kind == "ppl":
            target = GGUFTarget(gguf, n_ctx=512, n_threads=n)
            rec = {**key, "ppl": perplexity(target, texts, window=context)}
            target.close()
        else:
            ms = time_rows(gguf, context, args.repeats, n, repack)
            rec = {**key, "ms": {str(rows): v for rows, v in ms.items()}}  # as JSON reads it
        records.append(rec)
        with log.open("a") as f:
            f.write(json.dumps(rec) + "\n")
    ppl = {r["type"]: r["ppl"] for r in records if r["kind"] == "ppl"}
    print(f"{shipped.name} re-quantized per type; ms per llama_decode of n rows "
          f"(median of {args.repeats}); perplexity on {args.ppl_tokens} held-out tokens "
          f"(shipped: {ppl.get('shipped', float('nan')):.2f})")
    print("| type | threads | repack | context | " + " | ".join(f"{n} rows" for n in ROWS) +
          " | +row (2 vs 1) | +row (5 vs 1) | perplexity |")
    print("|---|---:|---|---:|" + "---:|" * (len(ROWS) + 3))
    for r in records:
        if r["kind"] == "rows":
            ms = {int(k): v for k, v in r["ms"].items()}
            quality = f"{ppl[r['type']]:.2f}" if r["type"] in ppl else "–"
            print(f"| {r['type']} | {r['threads']} | {'on' if r['repack'] else 'off'} | "
                  f"{r['context']} | " + " | ".join(f"{ms[n]:.1f}" for n in ROWS) +
                  f" | {ms[2] - ms[1]:.1f} | {(ms[5] - ms[1]) / 4:.1f} | "
                  f"{quality} |")
    (args.out / "results.json").write_text(json.dumps(
        {"gguf": str(shipped), "rows": ROWS, "records": records}, indent=1))
    plot(records, max(threads), contexts[0], args.out / "rows.png")


if __name__ == "__main__":
    main()
