"""``hedgespec generate``: stream one reply, each verified chunk coloured (or prefixed with
``[drafter]``) by the drafter chosen for its round."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spec_adapters.app.args import float_arg, int_arg
from spec_adapters.app.cli.common import (
    MAX_SEED,
    UserError,
    add_command,
    gguf_of,
    pool_config,
    setup_threads,
    target_from_args,
)

__all__ = ["DTYPES", "ENGINES", "add_generate", "cmd_generate", "device_arg", "llamacpp_decoder"]

DTYPES = ("float32", "float16", "bfloat16")
ENGINES = ("transformers", "llamacpp")


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


def add_generate(sub) -> None:
    """``hedgespec generate``."""
    s = add_command(sub, "generate", cmd_generate, pool=True)
    s.add_argument("--prompt", required=True)
    s.add_argument("--completion", action="store_true",
                   help="continue --prompt as it stands (a base model) instead of asking it as "
                        "a user turn in the target's chat template")
    s.add_argument("--policy", default="normalhedge",
                   help="normalhedge (default), hedge, adahedge, exp3spec, ucbspec, fixed:<i>")
    s.add_argument("--max-new-tokens", type=int_arg(1), default=128)
    s.add_argument("--draft-length", type=int_arg(1), default=4, help="K (default %(default)s)")
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
    s.add_argument("--engine", choices=ENGINES, default="transformers",
                   help="transformers (default): the target in torch; llamacpp: the GGUF in "
                        "llama.cpp (the model-free pool: prompt lookup, suffix, the n-gram "
                        "specialists; a full-information policy), --target then a .gguf "
                        "file, decoded as is")


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

    from spec_adapters.app.domains import CompletionPrompt, chat_ids
    from spec_adapters.app.pool.cache import load_pool
    from spec_adapters.decoding.chain import HedgeSpecDecoder

    setup_threads(args.threads)
    model, tok = target_from_args(args)
    pool = load_pool(model, tok, args.cache_dir, pool_config(args), domains=None,
                     build=not args.no_build)
    try:
        if args.engine == "llamacpp":
            dec, names = llamacpp_decoder(args, model, tok)
        else:
            dec = HedgeSpecDecoder(model, pool.drafters, draft_length=args.draft_length,
                                   policy=args.policy)
            names = pool.names
    except ValueError as err:
        raise UserError(str(err)) from None
    colour = args.colour == "always" or (args.colour == "auto" and sys.stdout.isatty())
    printer = _ChunkPrinter(tok, colour)
    if colour:
        legend = "  ".join(f"{_ChunkPrinter.COLOURS[i % 10]}{n}\033[0m"
                           for i, n in enumerate(names))
        print(f"drafters: {legend}")
    ids = chat_ids(tok, CompletionPrompt(args.prompt) if args.completion else args.prompt)
    ids = ids.view(1, -1)
    try:  # the prompt is checked against the target's context before the first round
        with torch.inference_mode():
            out = dec.generate(ids[0].tolist() if args.engine == "llamacpp" else ids,
                               max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, seed=args.seed, on_round=printer)
    except ValueError as err:
        raise UserError(f"--prompt: {err}") from None
    finally:
        printer.end()
    s = out.stats
    counts = {}
    for i in s["chosen"]:
        counts[names[i]] = counts.get(names[i], 0) + 1
    print(f"-- {s['new_tokens']} tokens in {s['target_calls']} target calls "
          f"(MAT {s['mean_accepted_tokens']:.2f}), {s['new_tokens'] / s['total_seconds']:.1f} "
          f"tok/s; rounds per drafter: {counts}", file=sys.stderr)
    return 0


def llamacpp_decoder(args: argparse.Namespace, model, tok) -> tuple:
    """The llama.cpp decoder of ``hedgespec generate --engine llamacpp`` and its drafter
    names: the GGUF (``--target``, default the shipped one) over prompt lookup (n = 1..4), the
    suffix drafter and the cached pool's n-gram drafters of ``args``' pool settings (read as
    point masses)."""
    from spec_adapters.app.pool.point_pool import point_pool
    from spec_adapters.llamacpp import GGUFTarget, LlamaCppDecoder
    from spec_adapters.store.target_pool import loaded_target_id

    target = GGUFTarget(gguf_of(args), n_threads=args.threads or 2,
                        round_rows=args.draft_length + 1)
    pool = point_pool(Path(args.cache_dir) / "pool" / loaded_target_id(model, tok),
                      target.vocab_size, pool_config(args).ngram)
    dec = LlamaCppDecoder(target, pool, draft_length=args.draft_length, policy=args.policy)
    return dec, dec.names
