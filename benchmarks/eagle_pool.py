"""The EAGLE-head pool on the real target: a greedy mixed stream with tree decoding.

Loads the heads that ``hedgespec train-drafters --eagle-steps N`` trained into the pool folder
(one per domain + the generalist) through ``spec_adapters.app.pool.cache.load_pool``: the entries of
exactly these settings (``--domains``, ``--max-train-tokens``, ``--ngram-order``,
``--eagle-steps``, as given to ``train-drafters``), checked against their checksums; nothing is
built (a missing or corrupt entry is one line naming it). Or, with ``--heads DIR``, the heads
``make heads`` trained from cached features (``DIR/<domain>``, ``DIR/general``). Takes the
first held-out prompt of every domain and decodes each with the tree ``HedgeSpecDecoder``
under: target alone, the generalist head fixed (EAGLE-3's role), every specialist head fixed
(for the per-query hindsight oracle), EXP3Spec, UCBSpec and HedgeSpec (NormalHedge). Prints a
markdown table of MAT and tokens per CPU-second and writes every raw per-query number to
``--out`` (JSON).
Greedy outputs are checked against the target's own greedy continuation.

    .venv/bin/python benchmarks/eagle_pool.py --eagle-steps 2000 --tokens 32 \
        --out results/eagle-pool.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from spec_adapters.app.args import OneLineParser, int_arg
from spec_adapters.app.bench.measure import run_decoder
from spec_adapters.app.domains import DOMAINS, chat_ids, load_domain
from spec_adapters.app.pool.cache import load_pool
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.eagle import EagleHead, HedgeSpecDecoder, TreeConfig
from spec_adapters.eagle.train_config import TrainConfig
from spec_adapters.hf.models import load_target
from spec_adapters.store.location import default_cache_dir
from spec_adapters.store.pool_settings import NGramPoolSettings


def main(argv=None) -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model folder or .gguf (default SmolLM2-135M)")
    ap.add_argument("--cache-dir", default=str(default_cache_dir()))
    ap.add_argument("--domains", default=",".join(DOMAINS),
                    help="comma-separated domains of the pool (default: all seven)")
    ap.add_argument("--eagle-steps", type=int_arg(1), default=None,
                    help="the --eagle-steps the pool's heads were trained with")
    ap.add_argument("--heads", default=None,
                    help="instead of the pool's heads: a folder of head folders (general, "
                         "<domain>), as `make heads` trains them")
    ap.add_argument("--max-train-tokens", type=int_arg(1),
                    default=NGramPoolSettings.max_train_tokens)
    ap.add_argument("--ngram-order", type=int_arg(1), default=NGramPoolSettings.ngram_order)
    ap.add_argument("--distilled-tokens", type=int_arg(0),
                    default=NGramPoolSettings.distilled_tokens)
    ap.add_argument("--tokens", type=int_arg(1), default=32, help="new tokens per query")
    ap.add_argument("--depth", type=int_arg(1), default=4)
    ap.add_argument("--top-k", type=int_arg(1), default=4)
    ap.add_argument("--total-tokens", type=int_arg(1), default=16)
    ap.add_argument("--out", default="results/eagle-pool.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    if (args.heads is None) == (args.eagle_steps is None):
        ap.error("give exactly one of --eagle-steps (the pool's heads) and --heads")
    domains = args.domains.split(",")
    try:
        model, tok = load_target(args.target, args.cache_dir)
        if args.heads is None:
            ngram = NGramPoolSettings(tuple(domains), args.ngram_order, args.max_train_tokens,
                                      args.distilled_tokens)
            cfg = PoolConfig(ngram, eagle=TrainConfig(steps=args.eagle_steps,
                                                      eval_every=args.eagle_steps))
            pool = load_pool(model, tok, args.cache_dir, cfg, build=False, progress=False)
            heads = pool.heads  # the specialists in domain order, then the generalist
            names = [h.config.extra["name"] for h in heads]
            paths = [str(pool.paths[n]) for n in names]
        else:
            paths = [str(Path(args.heads) / n) for n in [*domains, "general"]]
            heads = [EagleHead.from_pretrained(p, target=model).eval() for p in paths]
            names = [Path(p).name for p in paths]
        prompts = {d: load_domain(d, args.cache_dir).prompts[0] for d in domains}
    except (ValueError, OSError) as err:  # store.CacheError is a ValueError
        ap.error(" ".join(str(err).split()))
    tree = TreeConfig(depth=args.depth, top_k=args.top_k, total_tokens=args.total_tokens)
    methods = {f"fixed:{i}": f"{n} (fixed)" for i, n in enumerate(names)}
    methods |= {"exp3spec": "EXP3Spec", "ucbspec": "UCBSpec", "normalhedge": "HedgeSpec"}

    records = []
    for d, prompt in prompts.items():
        ids = chat_ids(tok, prompt)
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
    Path(args.out).write_text(json.dumps({"args": vars(args), "heads": names, "paths": paths,
                                          "records": records}, indent=1))


if __name__ == "__main__":
    main()
