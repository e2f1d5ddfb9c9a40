"""The benchmark's measure of degeneration: the share of an output inside repeated 5-grams."""

from __future__ import annotations

import pytest

from spec_adapters.app.bench.repetition import is_looping, repeated_share


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
