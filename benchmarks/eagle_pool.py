"""The EAGLE-head pool on the real target: a greedy mixed stream with tree decoding.

Loads the eight heads that ``hedgespec train-drafters --eagle-steps N`` trained into the pool
folder (one per domain + the generalist), takes the first held-out prompt of every domain, and
decodes each with the tree ``HedgeSpecDecoder`` under: target alone, the generalist head fixed
(EAGLE-3's role), every specialist head fixed (for the per-query hindsight oracle), EXP3Spec,
UCBSpec and HedgeSpec (NormalHedge). Prints a markdown table of MAT and tokens per CPU-second
and writes every raw per-query number to ``--out`` (JSON). Greedy outputs are checked against
the target's own greedy continuation.

    .venv/bin/python benchmarks/eagle_pool.py --tokens 32 --out results/eagle-pool.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from spec_adapters.app.domains import DOMAINS, chat_ids, load_domain
from spec_adapters.app.measure import run_decoder
from spec_adapters.app.pool import pool_dir
from spec_adapters.eagle import EagleHead, HedgeSpecDecoder, TreeConfig
from spec_adapters.hf.models import default_cache_dir, load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per query")
    ap.add_argument("--cache-dir", default=str(default_cache_dir()))
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--total-tokens", type=int, default=16)
    ap.add_argument("--out", default="results/eagle-pool.json")
    args = ap.parse_args()
    torch.set_num_threads(1)

    model, tok = load_target(cache_dir=args.cache_dir)
    folder = pool_dir(args.cache_dir, model, tok)
    names = [*(f"eagle-{d}" for d in DOMAINS), "eagle-general"]
    heads = [EagleHead.from_pretrained(folder / n, target=model) for n in names]
    tree = TreeConfig(depth=args.depth, top_k=args.top_k, total_tokens=args.total_tokens)
    methods = {f"fixed:{i}": f"{n} (fixed)" for i, n in enumerate(names)}
    methods |= {"exp3spec": "EXP3Spec", "ucbspec": "UCBSpec", "normalhedge": "HedgeSpec"}

    records = []
    for d in DOMAINS:
        ids = chat_ids(tok, load_domain(d, args.cache_dir).prompts[0])
        cpu = time.process_time()
        ref = model.generate(ids.view(1, -1), max_new_tokens=args.tokens, do_sample=False)
        reference = ref[0, ids.numel():].tolist()
        row = {"domain": d, "target_cpu_seconds": time.process_time() - cpu,
               "target_tokens": len(reference)}
        for policy in methods:
            r = run_decoder(HedgeSpecDecoder(model, heads, tree=tree, policy=policy),
                            ids.view(1, -1), args.tokens)
            r["mat"] = r["new_tokens"] / r["target_calls"]
            r["lossless"] = r.pop("tokens") == reference[:r["new_tokens"]]
            row[policy] = r
            print(f"{d:10s} {methods[policy]:24s} MAT {r['mat']:.2f} "
                  f"lossless={r['lossless']}", flush=True)
        records.append(row)

    def mat(rows, key):  # stream MAT = all tokens / all target calls
        return sum(r[key]["new_tokens"] for r in rows) / sum(r[key]["target_calls"] for r in rows)

    def tps(rows, key):
        return sum(r[key]["new_tokens"] for r in rows) / sum(r[key]["cpu_seconds"] for r in rows)

    fixed = [k for k in methods if k.startswith("fixed:")]
    for r in records:  # per-query hindsight oracle: the best fixed head for this query
        r["oracle"] = max((r[k] for k in fixed), key=lambda x: x["mat"])
    target_tps = sum(r["target_tokens"] for r in records) / \
        sum(r["target_cpu_seconds"] for r in records)
    print("\n| method | mixed MAT | tok/s (CPU) |\n|---|---|---|")
    print(f"| target alone | 1.00 | {target_tps:.1f} |")
    for key, label in [*methods.items(), ("oracle", "hindsight oracle")]:
        print(f"| {label} | {mat(records, key):.2f} | {tps(records, key):.1f} |")
    print(f"\nall greedy outputs lossless: "
          f"{all(r[k]['lossless'] for r in records for k in methods)}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "heads": names,
                                          "records": records}, indent=1))


if __name__ == "__main__":
    main()
