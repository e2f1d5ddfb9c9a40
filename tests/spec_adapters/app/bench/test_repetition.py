"""The benchmark's measure of degeneration: the share of an output inside repeated 5-grams."""

from __future__ import annotations

import pytest

from spec_adapters.app.bench.repetition import (
    is_looping,
    loop_free_length,
    prefix_tok_s,
    repeated_share,
)


def test_the_repeated_share_counts_tokens_whose_five_gram_was_seen_before():
    assert repeated_share([]) == 0.0
    assert repeated_share(list(range(20))) == 0.0
    assert repeated_share([7] * 10) == pytest.approx(5 / 10)  # 5-grams ending at tokens 5..9
    loop = [1, 2, 3] * 4  # the 5-gram ending at token j repeats from j = 7 on
    assert repeated_share(loop) == pytest.approx(5 / 12)
    assert repeated_share([1, 2, 3, 4] * 2, n=4) == pytest.approx(1 / 8)  # the last 4-gram


def test_an_output_loops_from_a_fifth_of_it_repeated():
    assert is_looping([1, 2, 3] * 4) and not is_looping(list(range(30)))
    assert not is_looping(list(range(16)) + list(range(5)))  # 1 of 21 repeated


def test_the_loop_free_prefix_ends_before_the_first_repeated_five_gram():
    assert loop_free_length([]) == 0 and loop_free_length(list(range(9))) == 9
    assert loop_free_length([1, 2, 3] * 4) == 7  # the 5-gram ending at token 7 repeats
    assert loop_free_length([7] * 10) == 5
    assert loop_free_length([1, 2, 1, 2, 9], n=2) == 3  # (1, 2) again at token 3


def test_prefix_tokens_per_second_by_hand():
    """Two outputs: a loop (prefix 7 tokens, the 7th at 0.7 s) and one without (all 6 tokens,
    the last at 3.0 s): (7 + 6) tokens / (0.7 + 3.0) s, 13 of the 18 new tokens."""
    loop = {"tokens": [1, 2, 3] * 4, "token_seconds": [0.1 * (i + 1) for i in range(12)]}
    flat = {"tokens": list(range(6)), "token_seconds": [0.5, 1, 1, 2, 2, 3.0]}
    rate, share = prefix_tok_s([loop, flat])
    assert rate == pytest.approx(13 / 3.7) and share == pytest.approx(13 / 18)
    assert prefix_tok_s([loop, {"tokens": [1, 2]}]) == (None, None)  # one row untimed
    assert prefix_tok_s([]) == (None, None)
