"""The ``hedgespec`` commands that run vLLM: ``serve`` (its OpenAI-compatible server with the
HedgeSpec proposer, :mod:`spec_adapters.app.serve`) and ``bench-vllm`` (HedgeSpec inside vLLM
against vLLM plain and ngram, :mod:`spec_adapters.app.bench.vllm`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from spec_adapters.app.cli.common import UserError, prepared_domains, target_from_args
from spec_adapters.hf.models import default_cache_dir

__all__ = ["cmd_bench_vllm", "cmd_serve", "vllm_bench_of"]


def vllm_bench_of(args: argparse.Namespace, target: Path, tok, domains: dict, cfg, out: Path
                  ) -> dict:
    """:func:`spec_adapters.app.bench.vllm.run_bench_vllm` on the served ``target`` folder and
    its pool under ``args.cache_dir``, with ``args.threads`` (default ``min(2, cores)``)."""
    from spec_adapters.app.bench.vllm import run_bench_vllm
    from spec_adapters.vllm.target_pool import pool_folder

    return run_bench_vllm(target, tok, domains, pool_folder(target, args.cache_dir), cfg, out,
                          cache_dir=args.cache_dir,
                          threads=args.threads or min(2, os.cpu_count() or 1))


def cmd_serve(args: argparse.Namespace) -> int:
    """vLLM's OpenAI-compatible server speculating with HedgeSpec (spec_adapters.app.serve):
    the settings merged and checked first, then the target, then vLLM."""
    import sys

    from spec_adapters.app.serve import check_proposer, find_vllm_python, proposer_config, serve

    cache = Path(args.cache_dir).resolve()
    given = {"policy": args.policy, "k": args.k,  # None: not given
             "cache_dir": str(cache) if cache != default_cache_dir() else None}
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


def cmd_bench_vllm(args: argparse.Namespace) -> int:
    """HedgeSpec inside vLLM against vLLM plain and ngram (spec_adapters.app.bench.vllm)."""
    from spec_adapters.app.bench.vllm import PRESETS, markdown

    chosen = {"queries_per_domain": args.queries_per_domain,
              "max_new_tokens": args.max_new_tokens, "concurrencies": args.concurrencies,
              "methods": args.methods, "arrival_rates": args.arrival_rates,
              "temperature": args.temperature, "stop_at_eos": False if args.ignore_eos else None,
              "proposer": tuple(args.proposer_settings.items())
              if args.proposer_settings is not None else None}
    try:
        cfg = replace(PRESETS[args.preset], **{k: v for k, v in chosen.items() if v is not None})
    except ValueError as err:
        raise UserError(f"bench-vllm: {err}") from None
    model, tok = target_from_args(args)  # a .gguf (default: the wheel's) is converted once
    target = Path(model.config.name_or_path)
    del model
    domains = prepared_domains(args)
    out = Path(args.out or f"results/bench-vllm-{args.preset}")
    try:
        summary = vllm_bench_of(args, target, tok, domains, cfg, out)
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    print(markdown(summary))
    print(f"results: {out}/results.json, {out}/tables.md, {out}/bench_vllm.png")
    return 0
