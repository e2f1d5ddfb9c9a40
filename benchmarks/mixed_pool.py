"""EAGLE heads and model-free drafters in one pool (issue 22, item 4): does a learned choice
between *kinds* of drafter pay on this CPU?

One round loop (the single-draft ``HedgeSpecDecoder``), the cost-aware learner choosing
``(drafter, k)``, over three pools: the model-free pool of the benchmark (n-gram specialists,
the n-gram generalist, prompt lookup, suffix), the shipped EAGLE heads alone
(``data/heads/<target-id>``, or ``--heads DIR`` as ``make heads`` trains them; chains of ``k``
tokens), and both together. Beside them, in the same run on the same prompts: the target alone
and each single drafter fixed (the generalist head, the n-gram generalist, prompt lookup,
suffix). Prompts: the first ``--per-domain`` benchmark prompts of every domain (the held-out
ones the heads never saw), greedy (every output checked against the target's own) or at
``--temperature`` (no top-p / top-k, as the benchmark's target row samples).

Prints, per method, MAT and tokens/s overall and per domain, each speed-up over the
model-free pool, the share of generated tokens inside repeats (a 5-gram already in the
output), per-drafter choice shares of the mixed pool, and the heads' share of a round
(drafting with a head + the batched evaluation, against the verification). Then the cost of
the heads' batched evaluation (one ``HeadPool.extend`` of 3 verified pairs) at 1, 4 and 8
heads, stacked and head by head. Writes everything to ``--out`` (JSON).

    .venv/bin/python benchmarks/mixed_pool.py --per-domain 2 --tokens 128 \\
        --out results/mixed-pool.json
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from spec_adapters.app.args import OneLineParser, int_arg
from spec_adapters.app.bench.measure import run_decoder
from spec_adapters.app.bench.repetition import repeated_share
from spec_adapters.app.bench.run import run_target
from spec_adapters.app.domains import DOMAINS, chat_ids, load_domains, prepare_domains
from spec_adapters.app.heads import shipped_heads_folder
from spec_adapters.app.pool.cache import load_pool
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.suffix import SuffixDrafter
from spec_adapters.eagle import EagleHead
from spec_adapters.eagle.chain import HeadDrafters
from spec_adapters.eagle.pool import HeadPool
from spec_adapters.eagle.shipped import load_shipped
from spec_adapters.hf.models import load_target
from spec_adapters.hf.target import TargetModel
from spec_adapters.store.location import default_cache_dir
from spec_adapters.vllm.pool_settings import NGramPoolSettings

MODEL_FREE_FIXED = ("ngram-general", "prompt-lookup", "suffix")


def _heads(args, model, tok) -> list[EagleHead]:
    """The generalist first, then the specialists in domain order."""
    if args.heads:
        names = ["general", *[d for d in DOMAINS if (Path(args.heads) / d).is_dir()]]
        heads = [EagleHead.from_pretrained(Path(args.heads) / n, target=model) for n in names]
        for n, h in zip(names, heads, strict=True):
            h.config.extra["name"] = n
        return heads
    shipped = load_shipped(args.shipped or shipped_heads_folder(model, tok), model)
    return [shipped["general"], *[h for n, h in shipped.items() if n != "general"]]


def _eval_cost(model, heads: list[EagleHead], reps: int = 30) -> dict:
    """Median seconds of one ``HeadPool.extend`` of 3 pairs at 1, 4 and 8 heads (the pool
    cycling through ``heads``), after 200 pairs of context; stacked (one vmapped call per
    architecture) and head by head."""
    H = heads[0].config.hidden_size * len(heads[0].config.feature_layers)
    g = torch.Generator().manual_seed(0)
    ctx, new = torch.randn(200, H, generator=g), torch.randn(3, H, generator=g)
    ids = torch.randint(0, 1000, (203,), generator=g)
    out = {}
    for n in (1, 4, 8):
        for batched in (True, False):
            pool = HeadPool([heads[i % len(heads)] for i in range(n)], model, batched=batched)
            times = []
            for _ in range(reps):
                pool.reset()
                pool.extend(ctx, ids[:200])
                t = time.perf_counter()
                pool.extend(new, ids[200:])
                times.append(time.perf_counter() - t)
            out[f"{n}-{'stacked' if batched else 'one-by-one'}"] = float(np.median(times))
    return out


def main(argv=None) -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model folder or .gguf (default SmolLM2-135M)")
    ap.add_argument("--cache-dir", default=str(default_cache_dir()))
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--heads", default=None, help="trained head folders (general, <domain>) "
                                                    "instead of the shipped heads")
    src.add_argument("--shipped", default=None, help="a shipped heads folder (default: the "
                                                     "repository's for this target)")
    ap.add_argument("--per-domain", type=int_arg(1), default=2, help="prompts per domain")
    ap.add_argument("--tokens", type=int_arg(1), default=128, help="new tokens per prompt")
    ap.add_argument("--k", type=int_arg(1), default=4, help="the longest draft K")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0 (greedy, default) or e.g. 0.7")
    ap.add_argument("--threads", type=int_arg(1), default=2)
    ap.add_argument("--out", default="results/mixed-pool.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model, tok = load_target(args.target, args.cache_dir)
        prepare_domains(args.cache_dir, DOMAINS)
        domains = load_domains(args.cache_dir, DOMAINS)
        pool = load_pool(model, tok, args.cache_dir, PoolConfig(NGramPoolSettings(DOMAINS)),
                         domains=domains)
        heads = _heads(args, model, tok)
    except (ValueError, OSError, RuntimeError) as err:
        ap.error(" ".join(str(err).split()))
    group = HeadDrafters(heads, model)
    model_free = list(pool.drafters)
    by_name = dict(zip(pool.names, model_free, strict=True))
    pools = {"model-free": model_free, "heads": [group], "mixed": [group, *model_free]}
    fixed = {f"fixed {n}": [by_name[n]] for n in MODEL_FREE_FIXED} | {
        "fixed head general": [HeadDrafters(heads[:1], model)]}

    def decoder(drafters, cost_aware: bool) -> HedgeSpecDecoder:
        own = [copy.deepcopy(d) if isinstance(d, SuffixDrafter) else d for d in drafters]
        return HedgeSpecDecoder(TargetModel(model), own, draft_length=args.k,
                                policy="normalhedge" if cost_aware else "fixed:0",
                                cost_aware=cost_aware)

    decoders = {f"HedgeSpec {n}": decoder(p, True) for n, p in pools.items()} | {
        n: decoder(p, False) for n, p in fixed.items()}
    prompts = [(d, p) for d in DOMAINS for p in domains[d].prompts[:args.per_domain]]
    records = []
    for qi, (domain, prompt) in enumerate(prompts):
        ids = chat_ids(tok, prompt).view(1, -1)
        row = {"domain": domain, "prompt": prompt,
               "target": run_target(model, ids, args.tokens, args.temperature, qi)}
        ref = row["target"]["tokens"]
        row["repeated"] = repeated_share(ref)
        for name, dec in decoders.items():
            r = run_decoder(dec, ids, args.tokens, args.temperature, qi)
            r["repeated"] = repeated_share(r["tokens"])
            if not args.temperature:  # greedy: the target's own tokens
                r["lossless"] = r["tokens"] == ref[:len(r["tokens"])]
            r["names"] = dec.scheme.names
            row[name] = r
        records.append(row)
        print(f"[{qi + 1}/{len(prompts)}] {domain:9s} target "
              f"{row['target']['new_tokens'] / row['target']['seconds']:5.1f} tok/s  " +
              "  ".join(f"{n.replace('HedgeSpec ', 'HS ')} "
                        f"{row[n]['new_tokens'] / row[n]['seconds']:5.1f}"
                        for n in decoders), flush=True)
    summary = _summary(records, list(decoders), heads)
    summary["eval_cost"] = _eval_cost(model, heads)
    print("\nbatched evaluation of the heads, one extend of 3 verified pairs (ms): " + ", ".join(
        f"{k} {1000 * v:.2f}" for k, v in summary["eval_cost"].items()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary,
                                          "records": records}, indent=1))


def _summary(records: list[dict], methods: list[str], heads: list[EagleHead]) -> dict:
    """Stream tok/s (all tokens / all seconds) and MAT per method, overall and per domain;
    choice shares and the heads' share of a round for the mixed pool; printed as tables."""
    def tps(rows, m):
        return sum(r[m]["new_tokens"] for r in rows) / sum(r[m]["seconds"] for r in rows)

    def mat(rows, m):
        return sum(r[m]["new_tokens"] for r in rows) / max(1, sum(r[m]["target_calls"]
                                                                   for r in rows))

    domains = list(dict.fromkeys(r["domain"] for r in records))
    out = {"methods": {}, "domains": domains}
    base = tps(records, "HedgeSpec model-free")
    print("\n| method | MAT | tok/s | x target | x model-free pool | "
          + " | ".join(f"{d} x mf" for d in domains) + " |")
    print("|---" * (5 + len(domains)) + "|")
    target = tps(records, "target")
    for m in ["target", *methods]:
        per = {d: tps([r for r in records if r["domain"] == d], m) /
               tps([r for r in records if r["domain"] == d], "HedgeSpec model-free")
               for d in domains}
        row = {"tok_s": tps(records, m), "per_domain_over_model_free": per,
               "lossless": all(r[m].get("lossless", True) for r in records)}
        if m != "target":
            row["mat"] = mat(records, m)
        out["methods"][m] = row
        print(f"| {m} | {row.get('mat', 1.0):.2f} | {row['tok_s']:.1f} | "
              f"{row['tok_s'] / target:.2f} | {row['tok_s'] / base:.2f} | "
              + " | ".join(f"{per[d]:.2f}" for d in domains) + " |")
    mixed = [r["HedgeSpec mixed"] for r in records]
    names = mixed[0]["names"]
    chosen = np.bincount([c for r in mixed for c in r["chosen"]], minlength=len(names))
    out["mixed_choice_share"] = {n: float(c / chosen.sum()) for n, c in zip(names, chosen,
                                                                            strict=True)}
    n_heads = len(heads)
    head_rounds = sum(1 for r in mixed for c in r["chosen"] if c < n_heads)
    timing = {k: sum(r["timing"][k] for r in mixed) for k in mixed[0]["timing"]}
    out["mixed_timing"] = timing
    out["repeated_share"] = float(np.mean([r["repeated"] for r in records]))
    print(f"\nmixed pool: {head_rounds} of {chosen.sum()} rounds drafted by a head; choice "
          "shares " + ", ".join(f"{n} {s:.0%}" for n, s in out["mixed_choice_share"].items()
                                if s > 0))
    print("mixed pool seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in timing.items())
          + f" (draft + eval = {(timing['draft'] + timing['eval']) / timing['verify']:.0%} of "
            "verify; the heads' evaluation runs every round)")
    print(f"repetition: {out['repeated_share']:.0%} of the target's tokens repeat a 5-gram; "
          f"all outputs equal the target's: "
          f"{all(v['lossless'] for v in out['methods'].values())}")
    return out


if __name__ == "__main__":
    main()
