"""The ``hedgespec`` commands that run vLLM: ``serve`` (its OpenAI-compatible server with the
HedgeSpec proposer, :mod:`spec_adapters.app.serve`) and ``bench-vllm`` (HedgeSpec inside vLLM
against vLLM plain and ngram, :mod:`spec_adapters.app.bench.vllm`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from spec_adapters.app.args import (
    comma_list,
    distinct_list,
    float_arg,
    folder_arg,
    int_arg,
    ints_arg,
    json_object,
)
from spec_adapters.app.bench.config import TOP_P
from spec_adapters.app.cli.common import (
    UserError,
    add_command,
    add_size_options,
    add_workload_option,
    gguf_of,
    prepared_domains,
    target_from_args,
    workload_of,
    workload_suffix,
)
from spec_adapters.app.serve import DEFAULT_K
from spec_adapters.store.location import default_cache_dir
from spec_adapters.vllm.config import ProposerConfig

__all__ = ["ENGINES", "VLLM_BENCH_PRESETS", "add_bench_vllm", "add_serve", "cmd_bench_vllm",
           "cmd_serve", "serve_llamacpp", "vllm_bench_of"]

ENGINES = ("vllm", "llamacpp")  # serve: vLLM's server, or ours over llama.cpp
# the names of spec_adapters.app.bench.vllm.PRESETS (which imports the proposer: not for --help)
VLLM_BENCH_PRESETS = ("quick", "targets", "full", "demo", "load", "headline")


def add_serve(sub) -> None:
    """``hedgespec serve``."""
    s = add_command(sub, "serve", cmd_serve, domains=False)
    s.add_argument("--port", type=int_arg(1, 65535), default=8000,
                   help="default %(default)s")
    s.add_argument("--policy", default=None,
                   help="normalhedge, hedge, adahedge, exp3spec, ucbspec, fixed:<i> (default: "
                        f"$HEDGESPEC_VLLM_CONFIG's, else {ProposerConfig.policy})")
    s.add_argument("--k", type=int_arg(1), default=None,
                   help=f"K, the longest draft (default: $HEDGESPEC_VLLM_CONFIG's, else "
                        f"{DEFAULT_K})")
    s.add_argument("--stats", type=Path, default=None, metavar="FILE",
                   help="per-drafter telemetry for operators: the proposer rewrites FILE "
                        "(JSON) as it serves, with per drafter its counterfactual acceptance "
                        "and the share of steps it drafted (spec_adapters/vllm/telemetry.py)")
    s.add_argument("--engine", choices=ENGINES, default="vllm",
                   help="vllm (default): vLLM's server with the HedgeSpec proposer; llamacpp: "
                        "this project's server over the GGUF in llama.cpp (--target then a "
                        ".gguf file, decoded as is)")
    s.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then vLLM server options")


def add_bench_vllm(sub) -> None:
    """``hedgespec bench-vllm``."""
    s = add_command(sub, "bench-vllm", cmd_bench_vllm)
    s.add_argument("--preset", choices=VLLM_BENCH_PRESETS, default="quick",
                   help="quick (default: 2 prompts per domain, 64 tokens, 1 and 4 concurrent, "
                        "plain / ngram / HedgeSpec), headline (3 per domain, 128 tokens, one "
                        "at a time, plain / ngram / suffix at its depth and at K / HedgeSpec), "
                        "load (5 per domain, 128 tokens, 1 to 32 "
                        "concurrent and 1 request/s arriving, plain / ngram / HedgeSpec) or "
                        "full (5 per domain, 256 tokens, 1 / 4 / 16 concurrent, every method; "
                        "hours)")
    add_size_options(s)
    add_workload_option(s)
    s.add_argument("--methods", type=comma_list, default=None,
                   help="comma-separated methods (plain, ngram, suffix and suffix-k (at most "
                        "K tokens): after `make vllm-suffix`, hedgespec, exp3spec, ucbspec, "
                        "fixed:<drafter>; ablations: hedgespec-lengths (stop rules off), "
                        "hedgespec-unpriced (drafting price off), hedgespec-allscored (every "
                        "round scored), hedgespec-noconsensus (no consensus drafter); "
                        "diagnostic: plain-sync (vLLM plain with asynchronous scheduling off, "
                        "as vLLM runs speculation); default: the preset's)")
    s.add_argument("--concurrencies", type=ints_arg(1), default=None,
                   help="comma-separated concurrencies, e.g. 1,4,16 (default: the preset's)")
    s.add_argument("--arrival-rates", type=distinct_list(float_arg(0.0, lo_open=True)),
                   default=None, help="comma-separated requests/s of phases where requests "
                   "arrive over time (Poisson), e.g. 0.5,1 (default: the preset's)")
    s.add_argument("--k", type=int_arg(1), default=None,
                   help="K, num_speculative_tokens of every speculating method but suffix at "
                        "its defaults (its own depth, 24); default: the preset's (4)")
    s.add_argument("--temperature", type=float_arg(0.0), default=None,
                   help=f"0: greedy (default); above, sampled with top-p {TOP_P}")
    s.add_argument("--seeded", action="store_true",
                   help="sampled requests carry a seed each (the OpenAI API's seed): every "
                        "method's outputs must then equal plain's")
    s.add_argument("--proposer-settings", type=json_object, default=None, metavar="JSON",
                   help="more HedgeSpec proposer settings, e.g. '{\"prior_rounds\": 0}' (keys of "
                        "$HEDGESPEC_VLLM_CONFIG but those each method sets)")
    s.add_argument("--ignore-eos", action="store_true",
                   help="every request runs to --max-new-tokens (a stress setting: the target "
                        "repeats itself past its answer)")
    s.add_argument("--repeats", type=int_arg(1), default=None,
                   help="runs of every (method, phase), interleaved (every method's first run, "
                        "then every method's second, ...); the tables pool them and show each "
                        "run's x plain (default 1)")
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/bench-vllm-PRESET); phases of "
                        "other methods or concurrencies, and more repeats, on the same "
                        "prompts add to it")


def vllm_bench_of(args: argparse.Namespace, target: Path, tok, domains: dict, cfg, out: Path
                  ) -> dict:
    """:func:`spec_adapters.app.bench.vllm.run_bench_vllm` on the served ``target`` folder and
    its pool under ``args.cache_dir``, with ``args.threads`` (default ``min(2, cores)``)."""
    from spec_adapters.app.bench.vllm import run_bench_vllm
    from spec_adapters.store.target_pool import pool_folder

    return run_bench_vllm(target, tok, domains, pool_folder(target, args.cache_dir), cfg, out,
                          cache_dir=args.cache_dir,
                          threads=args.threads or min(2, os.cpu_count() or 1))


def cmd_serve(args: argparse.Namespace) -> int:
    """vLLM's OpenAI-compatible server speculating with HedgeSpec (spec_adapters.app.serve):
    the settings merged and checked first, then the target, then vLLM; or, with ``--engine
    llamacpp``, :func:`serve_llamacpp`."""
    import sys

    if args.engine == "llamacpp":
        return serve_llamacpp(args)
    from spec_adapters.app.serve import check_proposer, find_vllm_python, proposer_config, serve

    cache = Path(args.cache_dir).resolve()
    given = {"policy": args.policy, "k": args.k,  # None: not given
             "cache_dir": str(cache) if cache != default_cache_dir() else None,
             "stats": str(args.stats.expanduser().resolve()) if args.stats else None}
    try:
        config, notes = proposer_config(given)
        if config.cache_dir is None:
            config = replace(config, cache_dir=str(cache))
        find_vllm_python()
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    for note in notes:
        print(f"hedgespec serve: {note}", file=sys.stderr)
    target = Path(args.target).expanduser() if args.target else None
    if target is None or not (target / "config.json").is_file():
        model, _tok = target_from_args(args)  # a .gguf (default: the wheel's) is converted once
        target = Path(model.config.name_or_path)
        del model
    extra = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    try:
        check_proposer(config, target)
        return serve(target, port=args.port, config=config, threads=args.threads,
                     vllm_args=extra)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None


def serve_llamacpp(args: argparse.Namespace) -> int:
    """``hedgespec serve --engine llamacpp``: :class:`spec_adapters.app.serve_llamacpp.
    LlamaCppServer` over the GGUF and the target's model-free pool until Ctrl-C."""
    import sys

    from spec_adapters.app.pool.point_pool import point_pool
    from spec_adapters.app.serve_llamacpp import LlamaCppServer
    from spec_adapters.llamacpp import GGUFTarget, LlamaCppDecoder
    from spec_adapters.store.target_pool import loaded_target_id

    extra = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    if extra:
        raise UserError(f"options after -- are vLLM's; --engine llamacpp takes none "
                        f"({' '.join(extra)})")
    gguf = gguf_of(args)
    model, tok = target_from_args(args)  # the pool's key: the target the GGUF holds
    folder = Path(args.cache_dir) / "pool" / loaded_target_id(model, tok)
    del model
    try:
        target = GGUFTarget(gguf, n_ctx=2048, round_rows=(args.k or DEFAULT_K) + 1,
                            n_threads=args.threads or min(2, os.cpu_count() or 1),
                            prompt_cache=True)  # requests share a chat template's prefix
        decoder = LlamaCppDecoder(target, point_pool(folder, target.vocab_size),
                                  draft_length=args.k or DEFAULT_K,
                                  policy=args.policy or "normalhedge")
        server = LlamaCppServer(decoder, ("127.0.0.1", args.port), stats_path=args.stats)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    print(f"hedgespec serve: http://127.0.0.1:{server.server_address[1]}/v1 (model "
          f"{server.model_name!r}; {target.path.name} in llama.cpp, drafters "
          f"{', '.join(decoder.names)}); Ctrl-C stops", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        target.close()
    return 0


def cmd_bench_vllm(args: argparse.Namespace) -> int:
    """HedgeSpec inside vLLM against vLLM plain and ngram (spec_adapters.app.bench.vllm)."""
    from spec_adapters.app.bench.vllm import PRESETS
    from spec_adapters.app.bench.vllm_summary import markdown

    chosen = {"queries_per_domain": args.queries_per_domain,
              "max_new_tokens": args.max_new_tokens, "concurrencies": args.concurrencies,
              "methods": args.methods, "arrival_rates": args.arrival_rates,
              "temperature": args.temperature, "stop_at_eos": False if args.ignore_eos else None,
              "seeded": args.seeded or None, "k": args.k, "repeats": args.repeats,
              "proposer": tuple(args.proposer_settings.items())
              if args.proposer_settings is not None else None}
    try:
        cfg = replace(PRESETS[args.preset], **{k: v for k, v in chosen.items() if v is not None})
    except ValueError as err:
        raise UserError(f"bench-vllm: {err}") from None
    model, tok = target_from_args(args)  # a .gguf (default: the wheel's) is converted once
    target = Path(model.config.name_or_path)
    del model
    domains = workload_of(args, prepared_domains(args))
    out = Path(args.out or f"results/bench-vllm-{args.preset}" + workload_suffix(args))
    try:
        summary = vllm_bench_of(args, target, tok, domains, cfg, out)
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    print(markdown(summary))
    print(f"results: {out}/results.json, {out}/tables.md, {out}/bench_vllm.png, "
          f"{out}/speedup_vs_repetition.png")
    return 0
