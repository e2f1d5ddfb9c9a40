"""The ``hedgespec`` commands that build into the cache: ``prepare-data`` (the domain
corpora), ``distill`` (the target's answers), ``train-drafters`` (the drafter pool) and
``train-head`` (one EAGLE head)."""

from __future__ import annotations

import argparse
import time

from spec_adapters.app.cli.common import (
    UserError,
    pool_config,
    prepared_domains,
    require_router_package,
    setup_threads,
    target_from_args,
)

__all__ = ["cmd_distill", "cmd_prepare_data", "cmd_train_drafters", "cmd_train_head"]


def cmd_prepare_data(args: argparse.Namespace) -> int:
    """Fetch and prepare ``args.domains``; print one row of sizes per domain."""
    from spec_adapters.app.domains import prepare_domains

    try:
        metas = prepare_domains(args.cache_dir, args.domains, n_prompts=args.n_prompts,
                                force=args.force)
    except RuntimeError as err:
        raise UserError(f"preparing the domain data failed: {err}") from None
    print(f"{'domain':10} {'train docs':>10} {'train chars':>12} {'prompts':>8}")
    for d, m in metas.items():
        print(f"{d:10} {m['train_docs']:>10} {m['train_chars']:>12} {m['prompts']:>8}")
    return 0


def cmd_distill(args: argparse.Namespace) -> int:
    """Generate (or finish) the target's answer set; print tokens per domain and the time."""
    from pathlib import Path

    from spec_adapters.app.distill.answers import DistillConfig, distill

    setup_threads(args.threads)
    model, tok = target_from_args(args)
    domains = prepared_domains(args)
    cfg = DistillConfig(args.tokens_per_domain, args.max_new_tokens, args.batch_size)
    out = args.out if args.out is not None else Path(args.cache_dir) / "distilled"
    try:
        m = distill(model, tok, domains, out, cfg, engine=args.engine)
    except (FileNotFoundError, RuntimeError) as err:
        raise UserError(f"distill: {err}") from None
    print(f"answers of target {m['target']['id']} (fingerprint {m['target']['fingerprint']}) "
          f"in {Path(out) / m['target']['id']}:")
    for d, row in m["domains"].items():
        print(f"  {d:10} {row['answers']:5} answers {row['tokens']:7} tokens")
    print(f"generation {m['seconds']:.0f} s, {m['tokens_per_s']} tok/s")
    return 0


def cmd_train_drafters(args: argparse.Namespace) -> int:
    """Build (or reuse) the drafter pool; print its entries."""
    from spec_adapters.app.pool.cache import describe, load_pool

    setup_threads(args.threads)
    model, tok = target_from_args(args)
    domains = prepared_domains(args)
    if args.router:
        require_router_package()
    t = time.perf_counter()
    pool = load_pool(model, tok, args.cache_dir, pool_config(args, router=args.router),
                     domains=domains)
    print(f"pool in {pool.folder} ({time.perf_counter() - t:.1f} s):")
    for row in describe(pool):
        print(f"  {row['name']:22} {row['kind']:14} {row['bytes'] / 1e6:8.1f} MB")
    for x in pool.extras:
        print(f"  {x.name:22} {'ngram (extra)':14}")
    if pool.router is not None:
        print(f"  {'router':22} {'router':14}")
    return 0


def cmd_train_head(args: argparse.Namespace) -> int:
    """Train (or resume) one EAGLE head on a token file; print the last history row."""
    import json

    from spec_adapters.eagle.train import TrainConfig, load_token_ids, train_head

    setup_threads(args.threads)
    try:
        cfg = TrainConfig(**{k: getattr(args, k) for k in TrainConfig.__dataclass_fields__})
        corpus = load_token_ids(args.corpus)
        heldout = load_token_ids(args.heldout) if args.heldout else None
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read token ids: {err}") from None
    model, _tok = target_from_args(args)
    try:
        _, hist = train_head(model, corpus, args.out, cfg, heldout=heldout,
                             progress=not args.no_progress)
    except ValueError as err:
        raise UserError(f"train-head: {err}") from None
    print(json.dumps(hist[-1] if hist else {}, indent=2))
    return 0
