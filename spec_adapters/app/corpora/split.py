"""Deterministic splits by source unit (file, template, page, headword), shared by every corpus
builder: training text and benchmark prompts never come from the same unit. :data:`Split` is
what a builder returns."""

from __future__ import annotations

import hashlib
import random

__all__ = ["Split", "cap_total", "held_out", "pick"]

Split = tuple[list[str], list[str], list[str], str]
"""A builder's result: (training documents, benchmark prompts, training-side prompts, a
description of the split)."""


def held_out(key: str, fraction: float, salt: str) -> bool:
    """Deterministic split by a hash of the unit's key (stable across runs and machines)."""
    h = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64 < fraction


def cap_total(docs: list, budget: int | None) -> list:
    """The first ``budget`` items of ``docs`` taken as one sequence (characters of strings,
    tokens of token lists), the last document cut; all of them for ``None``."""
    if budget is None:
        return docs
    out, total = [], 0
    for d in docs:
        if total >= budget:
            break
        out.append(d[: budget - total])
        total += len(out[-1])
    return out


def pick(prompts: list[str], n: int, seed: int, salt: str) -> list[str]:
    """``n`` distinct prompts in an order fixed by ``seed`` and ``salt``."""
    prompts = list(dict.fromkeys(prompts))  # dedupe, keep order
    random.Random(f"{seed}:{salt}").shuffle(prompts)
    return prompts[:n]
