"""Update time per step of every learner: ``python -m onlinelearn.bench [--json] [--quick]``.

For each learner and each ``n`` the timer runs ``repeats`` blocks of ``steps`` consecutive
``update`` calls on pre-drawn losses (full information: a loss vector; bandit: the arm the
learner samples and its loss, the sampling not timed) and reports the median over blocks of the
mean time per update, in microseconds. Input validation is included: it is part of every call.
Time is the process's CPU time (``time.process_time``), so other jobs on a shared machine
inflate it far less than wall-clock time; on an idle machine the two agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from . import UCB1, AdaHedge, AdaNormalHedge, Exp3, Exp3IX, Hedge, Learner, NormalHedge

SIZES = (2, 8, 32, 128, 1024)
LEARNERS: dict[str, Callable[[int], Learner]] = {
    "Hedge": Hedge,
    "AdaHedge": AdaHedge,
    "NormalHedge": NormalHedge,
    "AdaNormalHedge": AdaNormalHedge,
    "Exp3": Exp3,
    "Exp3IX": Exp3IX,
    "UCB1": UCB1,
}


def time_updates(factory: Callable[[int], Learner], n: int, steps: int, repeats: int,
                 seed: int = 0) -> float:
    """Median over ``repeats`` blocks of the mean seconds per ``update`` (``steps`` per block)."""
    rng = np.random.default_rng(seed)
    learner = factory(n)
    # losses with a slightly better expert 0, so regrets and weights evolve as in real use
    losses = rng.random((steps * repeats, n))
    losses[:, 0] *= 0.8
    warm = 50
    for loss in losses[:warm]:
        _step(learner, loss, rng)
    times = []
    for r in range(repeats):
        block = losses[r * steps : (r + 1) * steps]
        if learner.full_information:
            start = time.process_time()
            for loss in block:
                learner.update(loss)
            times.append((time.process_time() - start) / steps)
        else:
            arms = [learner.sample(rng) for _ in range(steps)]  # fixed arms: time update only
            start = time.process_time()
            for arm, loss in zip(arms, block, strict=True):
                learner.update(arm, float(loss[arm]))
            times.append((time.process_time() - start) / steps)
    return statistics.median(times)


def time_weights(factory: Callable[[int], Learner], n: int, steps: int, repeats: int,
                 seed: int = 0) -> float:
    """Median seconds per read of ``weights`` (after 50 updates), same protocol as updates."""
    rng = np.random.default_rng(seed)
    learner = factory(n)
    for loss in rng.random((50, n)):
        _step(learner, loss, rng)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(steps):
            learner.weights  # noqa: B018
        times.append((time.process_time() - start) / steps)
    return statistics.median(times)


def _step(learner: Learner, loss: np.ndarray, rng: np.random.Generator) -> None:
    if learner.full_information:
        learner.update(loss)
    else:
        arm = learner.sample(rng)
        learner.update(arm, float(loss[arm]))


def run(sizes=SIZES, steps: int = 200, repeats: int = 25,
        timer: Callable[..., float] = time_updates) -> dict[str, dict[int, float]]:
    """Microseconds per call: ``{learner: {n: us}}`` (``timer``: time_updates / time_weights)."""
    return {
        name: {n: 1e6 * timer(factory, n, steps, repeats) for n in sizes}
        for name, factory in LEARNERS.items()
    }


def format_table(results: dict[str, dict[int, float]]) -> str:
    sizes = sorted(next(iter(results.values())))
    head = "| learner | " + " | ".join(f"n={n}" for n in sizes) + " |"
    rule = "|---|" + "---:|" * len(sizes)
    rows = [
        f"| {name} | " + " | ".join(f"{us:.1f}" for us in row.values()) + " |"
        for name, row in results.items()
    ]
    return "\n".join([head, rule, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onlinelearn.bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help=f"numbers of experts (default: {' '.join(map(str, SIZES))})")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1:
        parser.error(f"--sizes must all be >= 1 (numbers of experts), got {args.sizes}")
    steps, repeats = (20, 3) if args.quick else (200, 25)
    results = run(args.sizes, steps=steps, repeats=repeats)
    weights = run(args.sizes, steps=steps, repeats=repeats, timer=time_weights)
    if args.json:
        print(json.dumps({"unit": "us_cpu", "statistic": "median", "steps": steps,
                          "repeats": repeats, "update": results, "weights": weights}))
    else:
        print(f"update CPU time per step, microseconds (median of {repeats} blocks of {steps})")
        print(format_table(results))
        print()
        print("reading .weights, microseconds (same protocol)")
        print(format_table(weights))
    return 0


if __name__ == "__main__":
    sys.exit(main())
