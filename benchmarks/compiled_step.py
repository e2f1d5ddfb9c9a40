"""The compiled target step, with and without hidden states: compile time and step cost.

Builds :class:`~spec_adapters.hf.target.TargetModel` eager and compiled (``compiled=True``),
each also reading EAGLE-3's feature layers (``reading``: the step that returns
``output_hidden_states``, what EAGLE heads read from a verification), and times
:meth:`~spec_adapters.hf.target.TargetModel.verify` and ``verify_features`` of 1, 3 and 5 rows
after ``--context`` cached tokens (medians of ``--repeats``). Prints the seconds each compiled
warm-up took (minutes with an empty inductor cache) and how many frames dynamo was asked to
compile while timing (0 when the warm-up built every graph the steps need).

    .venv/bin/python benchmarks/compiled_step.py [--context 300] [--repeats 7] [--threads 2]
"""

from __future__ import annotations

import logging
import statistics
import time

import torch
from torch._dynamo.utils import counters

from spec_adapters.app.args import OneLineParser, int_arg
from spec_adapters.eagle.head import default_feature_layers
from spec_adapters.hf.models import load_target
from spec_adapters.hf.target import TargetModel

ROWS = (1, 3, 5)


def _median_ms(target: TargetModel, features: bool, ids: torch.Tensor, context: int,
               rows: int, repeats: int) -> float:
    step = target.verify_features if features else target.verify
    times = []
    for _ in range(repeats):
        target.prefill(ids[:context + 1])  # caches `context` tokens; the last one is verified
        t = time.perf_counter()
        step(ids[context:context + 1], ids[context + 1:context + rows])
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model folder or .gguf (default SmolLM2-135M)")
    ap.add_argument("--context", type=int_arg(8), default=300, help="cached tokens")
    ap.add_argument("--repeats", type=int_arg(1), default=7)
    ap.add_argument("--threads", type=int_arg(1), default=2)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    model, _tok = load_target(args.target)
    layers = default_feature_layers(model.config.num_hidden_layers)
    ids = (torch.arange(args.context + max(ROWS)) * 7919) % model.config.vocab_size
    for compiled in (False, True):
        t = time.perf_counter()
        plain = TargetModel(model, compiled=compiled)
        built = time.perf_counter()
        reader = plain.reading(layers)
        warmed = time.perf_counter()
        print(f"{'compiled' if compiled else 'eager'}: step ready in {built - t:.1f} s, "
              f"the hidden-state step in {warmed - built:.1f} s more")
        frames = counters["frames"]["total"]
        for name, target, features in (("verify", plain, False),
                                       ("verify_features", reader, True)):
            ms = [_median_ms(target, features, ids, args.context, r, args.repeats) for r in ROWS]
            cells = [f"{r} rows {m:.1f} ms" for r, m in zip(ROWS, ms, strict=True)]
            print(f"  {name:16s} " + ", ".join(cells))
        print(f"  frames compiled while timing: {counters['frames']['total'] - frames}")


if __name__ == "__main__":
    main()
