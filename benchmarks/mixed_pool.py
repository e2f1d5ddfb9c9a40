"""EAGLE heads and model-free drafters in one pool (issue 22, item 4): does a learned choice
between *kinds* of drafter pay on this CPU?

One round loop (the single-draft ``HedgeSpecDecoder``), the cost-aware learner choosing
``(drafter, k)``, over three pools: the model-free pool of the benchmark (n-gram specialists,
the n-gram generalist, prompt lookup, suffix), the shipped EAGLE heads alone
(``data/heads/<target-id>``, or ``--heads DIR`` as ``make heads`` trains them; chains of ``k``
tokens), and both together. Beside them, in the same run on the same prompts: the target alone
and each single drafter fixed (the generalist head, the n-gram generalist, prompt lookup,
suffix). Prompts: the first ``--per-domain`` benchmark prompts of every domain (the held-out
ones the heads never saw).

A grid, every cell on the same prompts: ``--tokens`` new tokens (at most; EOS stops), each of
``--temperatures`` (0: greedy, every output checked against the target's own; above: sampled,
no top-p / top-k, as the benchmark's target row samples), and the target ``--targets`` eager
or compiled (``torch.compile``; the target row is then our compiled step alone, one token a
step; eager, ``model.generate``). Every finished run is appended to ``<out>/records.jsonl``;
a re-run resumes, and a run with other cells (``--tokens``, ``--temperatures``, ``--targets``)
adds them to the same folder, so the grid can be assembled over several sessions
(``<out>/settings.json`` refuses other heads, prompts, ``--k`` or ``--head-dtype``); the
summary covers every complete cell of the folder.

Prints, per cell, MAT and tokens/s per method overall and per domain, each speed-up over the
model-free pool, per-drafter choice shares of the mixed pool, the heads' share of a round (the
mixed pool's drafting + evaluation per round less the model-free pool's, against the mixed
pool's verification) and the share of generated tokens inside repeats (a 5-gram already in the
output); then one line per cell against issue 22's targets, and the cost of the heads' batched
evaluation (one ``HeadPool.extend`` of 3 verified pairs) at 1, 4 and 8 heads, stacked and head
by head. Writes everything to ``<out>/results.json``.

    .venv/bin/python benchmarks/mixed_pool.py --per-domain 5 --tokens 128,256 \\
        --temperatures 0,0.7 --targets eager,compiled --out results/mixed-pool-grid
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from spec_adapters.app.args import OneLineParser, floats_arg, int_arg, ints_arg, names_arg
from spec_adapters.app.bench.measure import run_decoder
from spec_adapters.app.bench.records import Records, check_settings
from spec_adapters.app.bench.repetition import repeated_share
from spec_adapters.app.bench.run import run_target, run_target_rows_first
from spec_adapters.app.domains import DOMAINS, chat_ids, load_domains, prepare_domains
from spec_adapters.app.heads import shipped_heads_folder
from spec_adapters.app.pool.cache import load_pool
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.suffix import SuffixDrafter
from spec_adapters.eagle import EagleHead
from spec_adapters.eagle.chain import HeadDrafters
from spec_adapters.eagle.lowrank import lowrank_specialists
from spec_adapters.eagle.pool import HeadPool
from spec_adapters.eagle.shipped import load_shipped
from spec_adapters.hf.models import load_target
from spec_adapters.hf.target import TargetModel
from spec_adapters.store.location import default_cache_dir
from spec_adapters.store.pool_settings import NGramPoolSettings

MODEL_FREE_FIXED = ("ngram-general", "prompt-lookup", "suffix")
POOLS = ("model-free", "heads", "mixed")
FIXED = (*(f"fixed {n}" for n in MODEL_FREE_FIXED), "fixed head general")
MODES = ("eager", "compiled")
HEAD_DTYPES = ("float32", "bfloat16")
# a results folder grows cell by cell: runs with other cells (and threads) may share it
GRID_AXES = ("tokens", "temperatures", "targets", "threads")


def _heads(args, model, tok) -> list[EagleHead]:
    """The generalist first, then the specialists in domain order (as low-rank deltas of the
    generalist with ``--delta-rank``), in ``--head-dtype``."""
    if args.heads:
        names = ["general", *[d for d in DOMAINS if (Path(args.heads) / d).is_dir()]]
        heads = {n: EagleHead.from_pretrained(Path(args.heads) / n, target=model) for n in names}
        for n, h in heads.items():
            h.config.extra["name"] = n
    else:
        heads = load_shipped(args.shipped or shipped_heads_folder(model, tok), model)
    if args.delta_rank:  # factored in float32, then cast
        heads = lowrank_specialists(heads, "general", args.delta_rank)
    dtype = getattr(torch, args.head_dtype)
    return [heads["general"].to(dtype), *[h.to(dtype) for n, h in heads.items()
                                          if n != "general"]]


def _eval_cost(model, heads: list[EagleHead], reps: int = 30) -> dict:
    """Median seconds of one ``HeadPool.extend`` of 3 pairs at 1, 4 and 8 heads (the pool
    cycling through ``heads``), after 200 pairs of context; stacked (one forward per
    architecture) and head by head; the heads in float32 and in bfloat16."""
    H = heads[0].config.hidden_size * len(heads[0].config.feature_layers)
    g = torch.Generator().manual_seed(0)
    ctx, new = torch.randn(200, H, generator=g), torch.randn(3, H, generator=g)
    ids = torch.randint(0, 1000, (203,), generator=g)
    out = {}
    cast = {d: [h if h.fc.weight.dtype == getattr(torch, d) else
                copy.deepcopy(h).to(getattr(torch, d)) for h in heads] for d in HEAD_DTYPES}
    for dtype, n, batched in itertools.product(HEAD_DTYPES, (1, 4, 8), (True, False)):
        pool = HeadPool([cast[dtype][i % len(heads)] for i in range(n)], model, batched=batched)
        times = []
        for _ in range(reps):
            pool.reset()
            pool.extend(ctx, ids[:200])
            t = time.perf_counter()
            pool.extend(new, ids[200:])
            times.append(time.perf_counter() - t)
        out[f"{dtype} {n}-{'stacked' if batched else 'one-by-one'}"] = float(np.median(times))
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
    ap.add_argument("--per-domain", type=int_arg(1), default=5, help="prompts per domain")
    ap.add_argument("--tokens", type=ints_arg(1), default=(128, 256),
                    help="new tokens per prompt, comma-separated (default 128,256)")
    ap.add_argument("--temperatures", type=floats_arg(0.0), default=(0.0, 0.7),
                    help="comma-separated; 0: greedy (default 0,0.7)")
    ap.add_argument("--targets", type=names_arg(MODES), default=MODES,
                    help="the target eager, compiled or both (default eager,compiled)")
    ap.add_argument("--head-dtype", choices=HEAD_DTYPES, default="bfloat16",
                    help="the heads' weights and arithmetic (default bfloat16: half the "
                         "weight traffic of float32 on a CPU)")
    ap.add_argument("--delta-rank", type=int_arg(0), default=0,
                    help="the specialists as rank-R deltas of the generalist, so the pool's "
                         "evaluation reads one decoder layer (spec_adapters.eagle.lowrank; "
                         "default 0: as shipped)")
    ap.add_argument("--k", type=int_arg(1), default=4, help="the longest draft K")
    ap.add_argument("--threads", type=int_arg(1), default=2)
    ap.add_argument("--out", default="results/mixed-pool", help="results folder")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    try:
        check_settings(out, _settings(args))
        model, tok = load_target(args.target, args.cache_dir)
        prepare_domains(args.cache_dir, DOMAINS)
        domains = load_domains(args.cache_dir, DOMAINS)
        pool = load_pool(model, tok, args.cache_dir, PoolConfig(NGramPoolSettings(DOMAINS)),
                         domains=domains)
        heads = _heads(args, model, tok)
    except (ValueError, OSError, RuntimeError) as err:
        ap.error(" ".join(str(err).split()))
    if "compiled" in args.targets:  # inductor's graphs kept with the cache, as `hedgespec bench`
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(args.cache_dir) / "inductor"))
    records = Records(out / "records.jsonl")
    prompts = [(f"{d}-{i}", d, p) for d in DOMAINS
               for i, p in enumerate(domains[d].prompts[:args.per_domain])]
    cells = [(mode, n, t) for mode in args.targets for n in args.tokens
             for t in args.temperatures]
    methods = ["target", *(f"HedgeSpec {n}" for n in POOLS), *FIXED]
    todo = [(c, q, m) for c in cells for q in prompts for m in methods
            if not records.has(c[0], q[0], c[2], m, c[1])]
    bar = tqdm(todo, desc="mixed pool", unit="run")
    decoders: dict = {}
    for cell, (qid, domain, prompt), method in bar:
        mode, n_tokens, temp = cell
        bar.set_postfix_str(f"{mode} {n_tokens} T={temp} {qid} {method}")
        if cell not in decoders:  # fresh per cell: the suffix drafters learn from the cell only
            decoders = {cell: _decoders(model, pool, heads, args.k, mode == "compiled")}
        ids = chat_ids(tok, prompt).view(1, -1)
        seed = prompts.index((qid, domain, prompt))
        if method != "target":
            r = run_decoder(decoders[cell][method], ids, n_tokens, temp, seed)
            r["names"] = decoders[cell][method].scheme.names
        elif mode == "compiled":
            r = run_target_rows_first(model, ids, n_tokens, temp, seed, compiled=True)
        else:
            r = run_target(model, ids, n_tokens, temp, seed)
        records.add({"section": mode, "qid": qid, "temperature": temp, "method": method,
                     "n": n_tokens, "domain": domain, "repeated": repeated_share(r["tokens"]),
                     **r})
    summary = {f"{mode} {n} T={t}": _summary(_cell_rows(records, (mode, n, t), prompts),
                                             methods, heads, f"{mode} target, {n} tokens, "
                                             f"T = {t}", greedy=t == 0)
               for mode, n, t in _complete_cells(records, prompts, methods)}
    _print_targets(summary)
    summary["eval_cost"] = _eval_cost(model, heads)
    print("\nbatched evaluation of the heads, one extend of 3 verified pairs (ms): " + ", ".join(
        f"{k} {1000 * v:.2f}" for k, v in summary["eval_cost"].items()))
    (out / "results.json").write_text(json.dumps({"args": vars(args), "summary": summary},
                                                 indent=1))
    print(f"results: {out}/results.json, records: {records.path}")


def _settings(args) -> dict:
    """What a results folder is tied to: every argument but the grid's axes."""
    return {k: v for k, v in vars(args).items() if k not in GRID_AXES}


def _complete_cells(records: Records, prompts: list[tuple], methods: list[str]
                    ) -> list[tuple]:
    """The cells ``(mode, tokens, temperature)`` of ``records`` (this run's and earlier runs'
    into the folder) in which every prompt ran with every method, in grid order."""
    cells = {(r["section"], r["n"], float(r["temperature"])) for r in records.rows.values()}
    return sorted((c for c in cells if all(records.has(c[0], q[0], c[2], m, c[1])
                                           for q in prompts for m in methods)),
                  key=lambda c: (MODES.index(c[0]), c[1], c[2]))


def _decoders(model, pool, heads: list[EagleHead], k: int, compiled: bool) -> dict:
    """Every method's decoder over one target (eager or compiled): the three pools
    cost-aware, the fixed drafters alone."""
    group = HeadDrafters(heads, model)
    model_free = list(pool.drafters)
    by_name = dict(zip(pool.names, model_free, strict=True))
    pools = {"model-free": model_free, "heads": [group], "mixed": [group, *model_free]}
    fixed = {f"fixed {n}": [by_name[n]] for n in MODEL_FREE_FIXED} | {
        "fixed head general": [HeadDrafters(heads[:1], model)]}
    assert list(pools) == list(POOLS) and list(fixed) == list(FIXED)

    def decoder(drafters, cost_aware: bool) -> HedgeSpecDecoder:
        own = [copy.deepcopy(d) if isinstance(d, SuffixDrafter) else d for d in drafters]
        return HedgeSpecDecoder(TargetModel(model, compiled=compiled), own, draft_length=k,
                                policy="normalhedge" if cost_aware else "fixed:0",
                                cost_aware=cost_aware)

    return {f"HedgeSpec {n}": decoder(p, True) for n, p in pools.items()} | {
        n: decoder(p, False) for n, p in fixed.items()}


def _cell_rows(records: Records, cell: tuple, prompts: list[tuple]) -> list[dict]:
    """One cell's runs as one row per prompt, ``{domain, <method>: record, ...}``, in prompt
    order; the target's record also gives ``repeated``, and each greedy run ``lossless``: its
    tokens equal ``model.generate``'s (the eager cell's target; without it, the cell's)."""
    mode, n_tokens, temp = cell
    rows = []
    for qid, domain, _ in prompts:
        runs = {r["method"]: r for r in records.select(section=mode, qid=qid, n=n_tokens)
                if float(r["temperature"]) == temp}
        ref = (records.rows.get(("eager", qid, temp, "target", n_tokens))
               or runs["target"])["tokens"]
        for r in runs.values():
            r["lossless"] = r["tokens"] == ref if not temp else True
        rows.append({"domain": domain, "repeated": runs["target"]["repeated"], **runs})
    return rows


def _summary(records: list[dict], methods: list[str], heads: list[EagleHead], title: str,
             greedy: bool) -> dict:
    """One cell: stream tok/s (all tokens / all seconds) and MAT per method, overall and per
    domain; choice shares and the heads' share of a round for the mixed pool; printed as a
    table under ``title``."""
    def tps(rows, m):
        return sum(r[m]["new_tokens"] for r in rows) / sum(r[m]["seconds"] for r in rows)

    def mat(rows, m):
        return sum(r[m]["new_tokens"] for r in rows) / max(1, sum(r[m]["target_calls"]
                                                                   for r in rows))

    domains = list(dict.fromkeys(r["domain"] for r in records))
    out = {"methods": {}, "domains": domains}
    base = tps(records, "HedgeSpec model-free")
    print(f"\n{title} ({len(records)} prompts)\n\n| method | MAT | tok/s | x target | "
          "x model-free pool | " + " | ".join(f"{d} x mf" for d in domains) + " |")
    print("|---" * (5 + len(domains)) + "|")
    target = tps(records, "target")
    for m in methods:
        per = {d: tps([r for r in records if r["domain"] == d], m) /
               tps([r for r in records if r["domain"] == d], "HedgeSpec model-free")
               for d in domains}
        row = {"tok_s": tps(records, m), "per_domain_over_model_free": per,
               "lossless": all(r[m]["lossless"] for r in records)}
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
    head_rounds = sum(1 for r in mixed for c in r["chosen"] if c < len(heads))
    timing = {k: sum(r["timing"][k] for r in mixed) for k in mixed[0]["timing"]}
    out["mixed_timing"] = timing
    per_round = {p: _ms_per_round([r[f"HedgeSpec {p}"] for r in records])
                 for p in ("mixed", "model-free")}
    out["ms_per_round"] = per_round
    mixed_ms, free_ms = per_round["mixed"], per_round["model-free"]
    out["draft_eval_share_of_verify"] = (mixed_ms["draft"] + mixed_ms["eval"]) / mixed_ms["verify"]
    out["heads_share_of_verify"] = (mixed_ms["draft"] + mixed_ms["eval"] - free_ms["draft"]
                                    - free_ms["eval"]) / mixed_ms["verify"]
    out["repeated_share"] = float(np.mean([r["repeated"] for r in records]))
    print(f"\nmixed pool: {head_rounds} of {chosen.sum()} rounds drafted by a head; choice "
          "shares " + ", ".join(f"{n} {s:.0%}" for n, s in out["mixed_choice_share"].items()
                                if s > 0))
    print("ms per round, mixed / model-free pool: " + ", ".join(
        f"{k} {mixed_ms[k]:.2f} / {free_ms[k]:.2f}" for k in mixed_ms)
          + f"; the mixed pool's draft + eval = {out['draft_eval_share_of_verify']:.0%} of its "
          f"verification, the heads' part of it (over the model-free pool's) "
          f"{out['heads_share_of_verify']:.0%} (the heads' evaluation runs every round)")
    print(f"repetition: {out['repeated_share']:.0%} of the target's tokens repeat a 5-gram"
          + (f"; all outputs equal the target's: "
             f"{all(v['lossless'] for v in out['methods'].values())}" if greedy else ""))
    return out


def _ms_per_round(runs: list[dict]) -> dict[str, float]:
    """Milliseconds per round (per target call) of each timed phase over ``runs``."""
    rounds = max(1, sum(r["target_calls"] for r in runs))
    return {k: 1000 * sum(r["timing"][k] for r in runs) / rounds for k in runs[0]["timing"]}


def _print_targets(summary: dict) -> None:
    """One line per cell against issue 22's targets (generalist head MAT >= 2.2 greedy; heads
    alone >= 1.2x the target; mixed >= 1.1x the model-free pool and the best fixed drafter,
    no domain under 0.97x the model-free pool; the heads' share <= 15 % of verification)."""
    print("\n| cell | generalist head MAT (2.2) | heads alone x target (1.2) | mixed x "
          "model-free (1.1) | mixed x best fixed (1.1) | lowest domain x model-free (0.97) | "
          "heads' share (15%) | repeated |")
    print("|---" * 8 + "|")
    for cell, s in summary.items():
        m = s["methods"]
        best = max(FIXED, key=lambda n: m[n]["tok_s"])
        mixed = m["HedgeSpec mixed"]
        print(f"| {cell} | {m['fixed head general']['mat']:.2f} | "
              f"{m['HedgeSpec heads']['tok_s'] / m['target']['tok_s']:.2f} | "
              f"{mixed['tok_s'] / m['HedgeSpec model-free']['tok_s']:.2f} | "
              f"{mixed['tok_s'] / m[best]['tok_s']:.2f} ({best}) | "
              f"{min(mixed['per_domain_over_model_free'].values()):.2f} | "
              f"{s['heads_share_of_verify']:.0%} | {s['repeated_share']:.0%} |")


if __name__ == "__main__":
    main()
