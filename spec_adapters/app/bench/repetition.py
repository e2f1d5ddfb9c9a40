"""How much of an output repeats itself: the benchmark's measure of degeneration.

A small target loops (docs/benchmark.md: up to 66% of a news answer repeats its own 5-grams),
and a drafter that copies the answer's recent text is then nearly always right; every
benchmark table puts the share of repeated text beside its speed-ups and splits the speed-up
between prompts whose plain output loops and those whose output does not, and computes it again
on the loop-free prefix of every output (:func:`loop_free_length`, :func:`prefix_tok_s`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

__all__ = ["LOOP_SCOPES", "REPEAT_THRESHOLD", "is_looping", "loop_free_length", "prefix_tok_s",
           "repeated_share"]

REPEAT_THRESHOLD = 0.2  # plain's output this share inside repeated 5-grams or more: looping
# the scopes a table splits prompts into, by whether the plain output loops (False, True)
LOOP_SCOPES = ("not looping", "looping")


def _repeated(tokens: Sequence[int], n: int) -> Iterator[bool]:
    """For each token from the ``n``-th on, whether its ``n``-gram (ending at it) occurred
    earlier in ``tokens``."""
    seen = set()
    for j in range(n - 1, len(tokens)):
        gram = tuple(tokens[j - n + 1:j + 1])
        yield gram in seen
        seen.add(gram)


def repeated_share(tokens: Sequence[int], n: int = 5) -> float:
    """Share of ``tokens`` whose ``n``-gram (ending at them) occurred earlier in ``tokens``."""
    return sum(_repeated(tokens, n)) / len(tokens) if tokens else 0.0


def is_looping(tokens: Sequence[int]) -> bool:
    """Whether an output loops: :data:`REPEAT_THRESHOLD` of it or more in repeated 5-grams."""
    return repeated_share(tokens) >= REPEAT_THRESHOLD


def loop_free_length(tokens: Sequence[int], n: int = 5) -> int:
    """Length of the loop-free prefix of ``tokens``: the tokens before the first one whose
    ``n``-gram (ending at it) occurred earlier in ``tokens`` (all of them if none does)."""
    return next((j + n - 1 for j, hit in enumerate(_repeated(tokens, n)) if hit), len(tokens))


def prefix_tok_s(rows: Sequence[dict]) -> tuple[float | None, float | None]:
    """Tokens/s on the loop-free prefix of each output, pooled over ``rows``, and the share of
    the new tokens in those prefixes.

    ``sum_i L_i / sum_i t_i(L_i)``: ``L_i`` is :func:`loop_free_length` of row ``i``'s
    ``tokens`` and ``t_i(L)`` = ``token_seconds[L - 1]``, the wall time from the call's start
    until the ``L``-th new token arrived (prefill included). Each method's own output is cut
    (greedy outputs are identical, so the same prefix). ``(None, None)`` unless every row
    has ``token_seconds``.
    """
    if not rows or not all(r.get("token_seconds") for r in rows):
        return None, None
    lengths = [loop_free_length(r["tokens"]) for r in rows]
    seconds = sum(r["token_seconds"][n - 1] for r, n in zip(rows, lengths, strict=True) if n)
    tokens = sum(lengths)
    share = tokens / max(1, sum(len(r["tokens"]) for r in rows))
    return (tokens / seconds if seconds > 0 else None), share
