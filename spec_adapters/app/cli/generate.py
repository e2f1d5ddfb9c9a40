"""``hedgespec generate``: stream one reply, each verified chunk coloured (or prefixed with
``[drafter]``) by the drafter chosen for its round."""

from __future__ import annotations

import argparse
import sys

from spec_adapters.app.cli.common import UserError, pool_config, setup_threads, target_from_args

__all__ = ["cmd_generate"]


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


def cmd_generate(args: argparse.Namespace) -> int:
    """Decode ``args.prompt`` with HedgeSpec over the cached pool, streaming the reply to
    stdout and a one-line summary (tokens, MAT, tok/s, rounds per drafter) to stderr."""
    import torch

    from spec_adapters.app.domains import chat_ids
    from spec_adapters.app.pool.cache import load_pool
    from spec_adapters.decoding.chain import HedgeSpecDecoder

    setup_threads(args.threads)
    model, tok = target_from_args(args)
    pool = load_pool(model, tok, args.cache_dir, pool_config(args), domains=None,
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
