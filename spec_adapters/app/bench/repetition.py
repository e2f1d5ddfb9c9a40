"""How much of an output repeats itself: the benchmark's measure of degeneration.

A small target loops (docs/benchmark.md: up to 66% of a news answer repeats its own 5-grams),
and a drafter that copies the answer's recent text is then nearly always right; every
benchmark table puts the share of repeated text beside its speed-ups and splits the speed-up
between prompts whose plain output loops and those whose output does not.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LOOP_SCOPES", "REPEAT_THRESHOLD", "is_looping", "repeated_share"]

REPEAT_THRESHOLD = 0.2  # plain's output this share inside repeated 5-grams or more: looping
# the scopes a table splits prompts into, by whether the plain output loops (False, True)
LOOP_SCOPES = ("not looping", "looping")


def repeated_share(tokens: Sequence[int], n: int = 5) -> float:
    """Share of ``tokens`` whose ``n``-gram (ending at them) occurred earlier in ``tokens``."""
    seen, hits = set(), 0
    for j in range(n - 1, len(tokens)):
        gram = tuple(tokens[j - n + 1:j + 1])
        hits += gram in seen
        seen.add(gram)
    return hits / len(tokens) if tokens else 0.0


def is_looping(tokens: Sequence[int]) -> bool:
    """Whether an output loops: :data:`REPEAT_THRESHOLD` of it or more in repeated 5-grams."""
    return repeated_share(tokens) >= REPEAT_THRESHOLD
