"""benchmarks/eagle_scaling.py's bookkeeping: the stratified document split and the held-out
top-1 gained per doubling of the documents."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import load_script

LABELS = ["code"] * 10 + ["news"] * 4 + ["code"] * 2 + ["sql"]


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_the_split_is_stratified_disjoint_and_seeded(fraction):
    split = load_script("eagle_scaling").split_documents
    trained, insample, unseen = split(LABELS, fraction, per_domain=2, seed=3)
    assert split(LABELS, fraction, per_domain=2, seed=3) == (trained, insample, unseen)
    for domain, n in (("code", 12), ("news", 4), ("sql", 1)):
        mine = [i for i in trained if LABELS[i] == domain]
        assert len(mine) == max(1, round(fraction * n))  # every domain keeps its share
        assert len([i for i in insample if LABELS[i] == domain]) == min(2, len(mine))
        assert len([i for i in unseen if LABELS[i] == domain]) == min(2, n - len(mine))
    assert set(insample) <= set(trained) and not set(unseen) & set(trained)
    assert (unseen == []) == (fraction == 1.0)
    assert trained == sorted(trained) and len(set(trained)) == len(trained)


def test_another_seed_draws_other_documents_and_a_bad_fraction_is_refused():
    split = load_script("eagle_scaling").split_documents
    assert split(LABELS, 0.5, 2, seed=0)[0] != split(LABELS, 0.5, 2, seed=1)[0]
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="fraction must be in"):
            split(LABELS, bad, 2, seed=0)


def test_the_gain_per_doubling_is_the_slope_on_log2_tokens():
    gain = load_script("eagle_scaling").doubling_gain
    runs = [{"tokens": t, "heldout": {"top1": y}}
            for t, y in ((1000, 0.40), (2000, 0.42), (4000, 0.44))]
    assert gain(runs) == pytest.approx(0.02)
    assert gain(runs[:1]) is None
