"""What the proposer did, for operators and benchmarks: a JSON file it rewrites as it runs.

The proposer lives in vLLM's engine process, out of reach of the server and of a benchmark, so
with ``"stats": "<file.json>"`` in its settings it keeps the counters below and rewrites the
file atomically (temporary file + rename) every :data:`WRITE_EVERY` steps::

    {"steps": decode steps seen (propose calls with at least one running row),
     "steps_drafted": those in which at least one row drafted,
     "rows": request-steps, "rows_drafted": those that drafted, "drafted_tokens": ...,
     "propose_s": seconds spent inside propose, "step_s": seconds between propose calls
                  (the engine's steps, the proposer's own time included),
     "evaluation_s": the part of propose_s spent evaluating rounds (drafting with every
                     drafter, scoring every expert, updating the learners),
     "overhead": propose_s / step_s,
     "evaluated": rounds scored with every drafter's draft,
     "step_model": {"step_s", "row_s", "draft_s", "spec_s"} the fitted step-time model,
     "drafters": {name: {"chosen": rows it drafted for,
                         "chosen_share": chosen / rows,
                         "acceptance": counterfactual mean accepted tokens of its K-token
                                       draft over the evaluated rounds (what it would have
                                       had had it drafted every time)}}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

__all__ = ["WRITE_EVERY", "ProposerStats"]

WRITE_EVERY = 16  # steps between two rewrites of the stats file


class ProposerStats:
    """The counters of the module docstring over ``names`` (the proposer's drafters)."""

    def __init__(self, names: list[str], path: str | None = None) -> None:
        self.names = list(names)
        self.path = Path(path) if path else None
        self.steps = self.steps_drafted = self.rows = self.rows_drafted = 0
        self.drafted_tokens = self.evaluated = 0
        self.propose_s = self.step_s = self.evaluation_s = 0.0
        self.chosen = np.zeros(len(names), np.int64)
        self.accepted_at_k = np.zeros(len(names))  # summed over evaluated rounds
        self.step_model = (0.0, 0.0, 0.0, 0.0)

    def step(self, seconds: float | None, propose_s: float,
             played: list[tuple[int | None, int]],
             step_model: tuple[float, float, float, float]) -> None:
        """One decode step: its length (``None``: unknown, the first or after an idle gap),
        the time spent proposing, per running row ``(drafter, tokens drafted)`` (``None``: no
        round played), and the
        step-time model's ``(a, b_R, b_D, c)``."""
        self.steps += 1
        self.propose_s += propose_s
        if seconds is not None:
            self.step_s += seconds
        self.rows += len(played)
        drafted = [(i, n) for i, n in played if n]
        self.rows_drafted += len(drafted)
        self.drafted_tokens += sum(n for _i, n in drafted)
        self.steps_drafted += bool(drafted)
        for i, _n in drafted:
            self.chosen[i] += 1
        self.step_model = step_model
        if self.path is not None and self.steps % WRITE_EVERY == 0:
            self.write()

    def evaluated_round(self, accepted_at_k: np.ndarray) -> None:
        """One round scored with every drafter: ``(N,)`` accepted tokens of each K-token draft."""
        self.evaluated += 1
        self.accepted_at_k += accepted_at_k

    def as_dict(self) -> dict:
        a, br, bd, c = self.step_model
        return {
            "steps": self.steps, "steps_drafted": self.steps_drafted, "rows": self.rows,
            "rows_drafted": self.rows_drafted, "drafted_tokens": self.drafted_tokens,
            "propose_s": self.propose_s, "step_s": self.step_s,
            "evaluation_s": self.evaluation_s,
            "overhead": self.propose_s / self.step_s if self.step_s > 0 else None,
            "evaluated": self.evaluated,
            "step_model": {"step_s": a, "row_s": br, "draft_s": bd, "spec_s": c},
            "drafters": {n: {"chosen": int(self.chosen[j]),
                             "chosen_share": self.chosen[j] / self.rows if self.rows else 0.0,
                             "acceptance": (self.accepted_at_k[j] / self.evaluated
                                            if self.evaluated else None)}
                         for j, n in enumerate(self.names)}}

    def write(self) -> None:
        """Rewrite the stats file atomically (a reader never sees half of it)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.as_dict()))
        os.replace(tmp, self.path)
