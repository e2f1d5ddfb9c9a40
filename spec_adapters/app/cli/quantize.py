"""``hedgespec quantize``: the GGUF weight type that makes HedgeSpec fastest on this machine
(:mod:`spec_adapters.llamacpp.weight_choice`), or one type asked for by name."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from spec_adapters.app.args import comma_list, float_arg, int_arg
from spec_adapters.app.cli.common import (
    UserError,
    add_command,
    gguf_of,
    prepared_domains,
)
from spec_adapters.app.log import log as _log

__all__ = ["add_quantize", "choose_gguf", "held_out_texts", "print_choice"]


def add_quantize(sub) -> None:
    """``hedgespec quantize``."""
    from spec_adapters.llamacpp.quantize import WEIGHT_TYPES
    from spec_adapters.llamacpp.weight_choice import ALPHA, BUDGET, MARGIN

    s = add_command(sub, "quantize", cmd_quantize)
    s.add_argument("--weight-type", default="auto",
                   choices=("auto", *WEIGHT_TYPES),
                   help="auto (default): measure the candidates here and keep the fastest "
                        "for HedgeSpec within the quality budget; or one type, written as is")
    s.add_argument("--types", type=comma_list, default=None,
                   help=f"auto's candidates (default all: {','.join(WEIGHT_TYPES)})")
    s.add_argument("--alpha", type=float_arg(0.0, 0.999), default=ALPHA,
                   help="per-position acceptance of the drafts the prediction assumes "
                        "(default %(default)s)")
    s.add_argument("--budget", type=float_arg(0.0), default=BUDGET,
                   help="held-out perplexity a type may add, relative (default %(default)s)")
    s.add_argument("--margin", type=float_arg(0.0, 0.999), default=MARGIN,
                   help="how much faster than the source a type must be predicted, relative "
                        "(default %(default)s: the timing's noise)")
    s.add_argument("--ppl-tokens", type=int_arg(64), default=2000,
                   help="held-out tokens each perplexity reads (default %(default)s)")
    s.add_argument("--draft-length", type=int_arg(1, 8), default=4, help="K (default 4)")


def held_out_texts(domains: Mapping, tokenize: Callable[[str], list[int]], max_tokens: int
                   ) -> list[list[int]]:
    """The domains' benchmark prompts (never trained on), one domain's after another's in
    turn, tokenized, up to ``max_tokens`` in all."""
    prompts = [d.prompts for d in domains.values()]
    texts, total = [], 0
    for j in range(max((len(p) for p in prompts), default=0)):
        for p in prompts:
            if j < len(p) and total < max_tokens:
                texts.append(tokenize(p[j]))
                total += len(texts[-1])
    return texts


def choose_gguf(source: Path, cache_dir: Path, texts: list[list[int]], types: list[str],
                draft_length: int, threads: int, alpha: float, budget: float,
                margin: float) -> tuple:
    """Every type of ``types`` written from ``source`` (once, into ``<cache>/gguf-types``),
    measured beside ``source`` itself (perplexity, whether its rows depend on their batch),
    then all timed together (:func:`~spec_adapters.llamacpp.weight_choice.row_prices_together`,
    five rounds);
    ``(chosen path, chosen, every candidate)``
    (:func:`~spec_adapters.llamacpp.weight_choice.choose`). The choice is kept in
    ``<cache>/gguf-types/<source>.choice.json``."""
    from spec_adapters.llamacpp import GGUFTarget
    from spec_adapters.llamacpp.quantize import (
        perplexity,
        quantize,
        source_of,
        weight_type_of,
    )
    from spec_adapters.llamacpp.weight_choice import Candidate, choose, row_prices_together

    folder = Path(cache_dir) / "gguf-types"
    own = weight_type_of(source)
    paths = {"source": source, **{t: folder / f"{source.stem}.{t}.gguf" for t in types
                                  if t != own}}
    targets, quality = [], []
    try:
        for name, path in paths.items():
            if name != "source" and source_of(path) != source.resolve():  # not written from it
                _log(f"writing {path.name} ({name})")
                quantize(source, path, name, threads=threads)
            targets.append(GGUFTarget(path, n_ctx=512, n_threads=threads,
                                      round_rows=draft_length + 1))
            quality.append((perplexity(targets[-1], texts), targets[-1].rows_invariant))
        _log(f"timing 1..{draft_length + 1} rows of the {len(targets)} files in turn, 5 rounds")
        prices = row_prices_together(targets, draft_length + 1)
    finally:
        for target in targets:
            target.close()
    measured = [Candidate(name, tuple(np.median(prices[:, i], axis=0)), ppl, lossless=lossless,
                          rounds=tuple(map(tuple, prices[:, i])))
                for i, (name, (ppl, lossless)) in enumerate(zip(paths, quality, strict=True))]
    for c in measured:
        _log(f"{c.name}: {' / '.join(f'{1e3 * s:.1f}' for s in c.row_seconds)} ms for "
             f"1..{len(c.row_seconds)} rows, perplexity {c.perplexity:.2f}, rows alone = "
             f"batched: {c.lossless}")
    chosen, scored = choose(measured, measured[0].perplexity, alpha, budget, margin)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{source.stem}.choice.json").write_text(json.dumps(
        {"source": str(source), "chosen": chosen.name, "path": str(paths[chosen.name]),
         "alpha": alpha, "budget": budget, "margin": margin,
         "candidates": [c.__dict__ for c in scored]}, indent=1))
    return paths[chosen.name], chosen, scored


def cmd_quantize(args: argparse.Namespace) -> int:
    """Write the chosen (or the named) weight type of ``--target``'s GGUF and say why."""
    from spec_adapters.llamacpp.quantize import WEIGHT_TYPES, quantize

    source = gguf_of(args)
    threads = args.threads or 2
    if args.weight_type != "auto":
        dest = Path(args.cache_dir) / "gguf-types" / f"{source.stem}.{args.weight_type}.gguf"
        try:
            quantize(source, dest, args.weight_type, threads=threads)
        except ValueError as err:
            raise UserError(str(err)) from None
        print(dest)
        return 0
    types = list(args.types or WEIGHT_TYPES)
    unknown = [t for t in types if t not in WEIGHT_TYPES]
    if unknown:
        raise UserError(f"--types: unknown {', '.join(unknown)}; one of {', '.join(WEIGHT_TYPES)}")
    from spec_adapters.llamacpp import GGUFTarget

    reader = GGUFTarget(source, n_ctx=512, n_threads=threads)
    texts = held_out_texts(prepared_domains(args), reader.tokenize, args.ppl_tokens)
    reader.close()
    path, chosen, scored = choose_gguf(source, Path(args.cache_dir), texts, types,
                                       args.draft_length, threads, args.alpha, args.budget,
                                       args.margin)
    print_choice(source, path, chosen, scored, args.alpha, args.budget, args.margin)
    return 0


def print_choice(source: Path, path: Path, chosen, scored: list, alpha: float, budget: float,
                 margin: float) -> None:
    """The candidates' table, the choice and why, then the chosen file's path."""
    ref = scored[0].perplexity
    print(f"{source.name}: predicted HedgeSpec ms per token at per-position acceptance "
          f"{alpha} (K = {len(scored[0].row_seconds) - 1}), held-out perplexity "
          f"(within {budget:.0%} of {ref:.2f} to be a candidate); a candidate replaces the "
          f"source where it is {margin:.0%} faster in every round of the timing")
    print("| type | ms, 1 row | ms, 2 rows | ms per token | x source, per round | best k | "
          "perplexity | candidate |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for c in scored:
        why = "yes" if c.within_budget and c.lossless else "no: " + " and ".join(
            w for w, bad in (("quality", not c.within_budget),
                             ("a row depends on its batch", not c.lossless)) if bad)
        print(f"| {c.name} | {1e3 * c.row_seconds[0]:.1f} | {1e3 * c.row_seconds[1]:.1f} | "
              f"{1e3 * c.seconds_per_token:.1f} | {min(c.vs_source):.2f}-{max(c.vs_source):.2f} "
              f"| {c.best_k} | {c.perplexity:.2f} | {why} |")
    why = "the source file itself" if chosen.name == "source" else \
        f"{chosen.name}, re-quantized: a different model (perplexity {chosen.perplexity:.2f})"
    print(f"chosen: {why}, predicted {1e3 * chosen.seconds_per_token:.1f} ms per token against "
          f"{1e3 * scored[0].seconds_per_token:.1f} for the source\n{path}")
