"""``python -m proofs_check [--quick] [--json] [--only NAME ...] [--seed S]``.

Runs every check (see :mod:`proofs_check.checks`), prints one row per claim (claim, what was
measured, the bound, the verdict) and exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from proofs_check.checks import CHECKS
from proofs_check.result import CheckResult, Settings


def format_table(rows: list[CheckResult]) -> str:
    """A plain-text table, one row per check (claim and measurement on their own lines)."""
    lines = []
    for r in rows:
        lines.append(f"[{r.verdict}] {r.check}: {r.claim}")
        lines.append(f"       measured: {r.measured}")
        lines.append(f"       bound:    {r.bound}   ({r.seconds:.1f} s)")
    n_fail = sum(not r.passed for r in rows)
    lines.append(f"{len(rows) - n_fail}/{len(rows)} checks passed")
    return "\n".join(lines)


def run(names: list[str] | None, settings: Settings, stream=None) -> list[CheckResult]:
    """Run the named checks (all by default) and return their rows."""
    rows: list[CheckResult] = []
    for name in names or list(CHECKS):
        try:
            new = CHECKS[name](settings)
        except Exception as exc:  # a crash is a failed check, reported, not a traceback
            new = [
                CheckResult(
                    name,
                    "check ran to completion",
                    f"{type(exc).__name__}: {exc}",
                    "no exception",
                    False,
                )
            ]
        rows.extend(new)
        if stream is not None:
            print(format_table(new).rsplit("\n", 1)[0], file=stream, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m proofs_check",
        description="Check the HedgeSpec paper's theorems by exact enumeration on small Markov "
                    "models: one row per claim (what was measured, the bound, the verdict); "
                    "exits non-zero if any check fails.")
    parser.add_argument("--quick", action="store_true", help="small enumeration (for tests)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), help="run only these checks")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random models")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    settings = Settings(quick=args.quick, seed=args.seed)
    rows = run(args.only, settings, stream=None if args.json else sys.stdout)
    if args.json:
        print(
            json.dumps(
                {
                    "quick": args.quick,
                    "seed": args.seed,
                    "passed": all(r.passed for r in rows),
                    "checks": [r.to_dict() for r in rows],
                },
                indent=2,
                default=str,
            )
        )
    else:
        n_fail = sum(not r.passed for r in rows)
        print(f"{len(rows) - n_fail}/{len(rows)} checks passed")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
