"""Update time per step of every learner: ``python -m onlinelearn.bench [--json] [--quick]``.

For each learner and each ``n`` the timer runs ``repeats`` blocks of ``steps`` consecutive
``update`` calls on pre-drawn losses (full information: a loss vector; bandit: the arm the
learner samples and its loss, the sampling not timed), after 50 warm-up rounds, and reports
the median over blocks of the mean time per update, in microseconds. Input validation is
included: it is part of every call. Time is the process's CPU time (``time.process_time``), so
other jobs on a shared machine inflate it far less than wall-clock time; on an idle machine the
two agree.

Every learner is timed on the ``one_better`` losses; NormalHedge, whose update solves an
equation whose cost depends on the regrets, is also timed on each family of :data:`FAMILIES`
(``--families``), with the number of solver iterations per update.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import UCB1, AdaHedge, AdaNormalHedge, Exp3, Exp3IX, Hedge, Learner, NormalHedge
from .normalhedge import solve_normalhedge_scale

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


WARM_UP = 50  # rounds played before timing, so regrets and weights evolve as in real use


def _one_better(rng: np.random.Generator, rounds: int, n: int) -> np.ndarray:
    losses = rng.random((rounds, n))
    losses[:, 0] *= 0.8
    return losses


def _iid(rng: np.random.Generator, rounds: int, n: int) -> np.ndarray:
    return rng.random((rounds, n))


def _all_equal(rng: np.random.Generator, rounds: int, n: int) -> np.ndarray:
    return np.repeat(rng.random((rounds, 1)), n, axis=1)


def _alternating(rng: np.random.Generator, rounds: int, n: int) -> np.ndarray:
    losses = np.ones((rounds, n))
    losses[0, :2] = (0.5, 0.0)
    losses[1::2, :2] = (0.0, 1.0)
    losses[2::2, :2] = (1.0, 0.0)
    return losses


def _heavy_tailed(rng: np.random.Generator, rounds: int, n: int) -> np.ndarray:
    return np.minimum(0.1 * rng.pareto(1.5, (rounds, n)), 1.0)


# Loss families ``(rng, rounds, n) -> losses`` of shape ``(rounds, n)`` in [0, 1].
FAMILIES: dict[str, Callable[[np.random.Generator, int, int], np.ndarray]] = {
    # i.i.d. uniform, expert 0's losses scaled by 0.8: one clearly better expert
    "one_better": _one_better,
    # i.i.d. uniform: the experts are indistinguishable, regrets keep changing sign
    "iid": _iid,
    # every expert loses the same (uniform) amount: regrets stay at rounding level
    "all_equal": _all_equal,
    # follow-the-leader's nemesis: experts 0 and 1 alternate 0/1 (after 1/2, 0), others lose 1
    "alternating": _alternating,
    # heavy-tailed: 0.1 x Lomax(1.5) (Pareto II), clipped to 1 (about 3% of the losses)
    "heavy_tailed": _heavy_tailed,
}


def time_updates(factory: Callable[[int], Learner], n: int, steps: int, repeats: int,
                 seed: int = 0, family: str = "one_better") -> float:
    """Median over ``repeats`` blocks of the mean seconds per ``update`` (``steps`` per block),
    on losses of ``family`` (a key of :data:`FAMILIES`)."""
    rng = np.random.default_rng(seed)
    learner = factory(n)
    losses = FAMILIES[family](rng, WARM_UP + steps * repeats, n)
    for loss in losses[:WARM_UP]:
        _step(learner, loss, rng)
    times = []
    for r in range(repeats):
        block = losses[WARM_UP + r * steps : WARM_UP + (r + 1) * steps]
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


def solver_iterations(n: int, steps: int, repeats: int, seed: int = 0,
                      family: str = "one_better") -> float:
    """Mean iterations of NormalHedge's scale solve per update, on the rounds that
    :func:`time_updates` times (same losses, same warm-up, not timed).

    Each update solves from the previous round's ``v``; re-solving from it reproduces the count.
    """
    losses = FAMILIES[family](np.random.default_rng(seed), WARM_UP + steps * repeats, n)
    learner, total = NormalHedge(n), 0
    for t, loss in enumerate(losses):
        v_before = learner.v
        learner.update(loss)
        if t >= WARM_UP:
            total += solve_normalhedge_scale(learner.R, v_before)[1]
    return total / (steps * repeats)


def time_weights(factory: Callable[[int], Learner], n: int, steps: int, repeats: int,
                 seed: int = 0) -> float:
    """Median seconds per read of ``weights`` (after the warm-up), same protocol as updates."""
    rng = np.random.default_rng(seed)
    learner = factory(n)
    for loss in rng.random((WARM_UP, n)):
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


def run_families(families=tuple(FAMILIES), sizes=SIZES, steps: int = 200,
                 repeats: int = 25) -> dict[str, dict[int, dict[str, float]]]:
    """NormalHedge on each loss family: ``{family: {n: {"us": .., "iterations": ..}}}``."""
    return {
        family: {n: {"us": 1e6 * time_updates(NormalHedge, n, steps, repeats, family=family),
                     "iterations": solver_iterations(n, steps, repeats, family=family)}
                 for n in sizes}
        for family in families
    }


def format_table(results: dict[str, dict[int, Any]], label: str = "learner",
                 cell: Callable[[Any], str] = "{:.1f}".format) -> str:
    """A markdown table: one row per key of ``results``, one column per ``n``."""
    sizes = sorted(next(iter(results.values())))
    head = f"| {label} | " + " | ".join(f"n={n}" for n in sizes) + " |"
    rule = "|---|" + "---:|" * len(sizes)
    rows = [
        f"| {name} | " + " | ".join(cell(row[n]) for n in sizes) + " |"
        for name, row in results.items()
    ]
    return "\n".join([head, rule, *rows])


def _us_and_iterations(cell: dict[str, float]) -> str:
    return f"{cell['us']:.1f} ({cell['iterations']:.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onlinelearn.bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help=f"numbers of experts (default: {' '.join(map(str, SIZES))})")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES),
                        metavar="FAMILY",
                        help=f"NormalHedge's loss families (default: all: {' '.join(FAMILIES)})")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1:
        parser.error(f"--sizes must all be >= 1 (numbers of experts), got {args.sizes}")
    steps, repeats = (20, 3) if args.quick else (200, 25)
    results = run(args.sizes, steps=steps, repeats=repeats)
    weights = run(args.sizes, steps=steps, repeats=repeats, timer=time_weights)
    families = run_families(args.families, args.sizes, steps=steps, repeats=repeats)
    if args.json:
        print(json.dumps({"unit": "us_cpu", "statistic": "median", "steps": steps,
                          "repeats": repeats, "update": results, "weights": weights,
                          "normalhedge_families": families}))
    else:
        print(f"update CPU time per step, microseconds (median of {repeats} blocks of {steps}, "
              "one_better losses)")
        print(format_table(results))
        print()
        print("reading .weights, microseconds (same protocol)")
        print(format_table(weights))
        print()
        print("NormalHedge update by loss family, microseconds (solver iterations per update)")
        print(format_table(families, label="family", cell=_us_and_iterations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
