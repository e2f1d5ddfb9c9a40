"""acceptance_probability (Thm 1) and the tree forms (Thm 2) against naive loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from spec_adapters.core.acceptance import (
    acceptance_probability,
    greedy_tree_acceptance,
    tree_acceptance,
)

torch.set_num_threads(1)
F64 = torch.float64


def simplex(V: int, n: int = 1):
    """Probability vectors built from non-negative weights (some exactly zero)."""
    return (
        arrays(np.float64, (n, V), elements=st.floats(0, 10))
        .filter(lambda a: bool(np.all(a.sum(-1) > 1e-3)))
        .map(lambda a: torch.tensor(a / a.sum(-1, keepdims=True)))
    )


@settings(max_examples=80, deadline=None)
@given(data=st.data(), V=st.integers(1, 7))
def test_acceptance_equals_sum_min_and_one_minus_tv(data, V):
    p = data.draw(simplex(V, 3))
    q = data.draw(simplex(V, 3))
    got = acceptance_probability(p, q)
    for r in range(3):
        naive = sum(min(float(p[r, x]), float(q[r, x])) for x in range(V))
        tv = 0.5 * sum(abs(float(p[r, x]) - float(q[r, x])) for x in range(V))
        assert float(got[r]) == pytest.approx(naive, abs=1e-14)
        assert float(got[r]) == pytest.approx(1 - tv, abs=1e-12)
        assert 0.0 <= float(got[r]) <= 1.0


def test_acceptance_batches_positions_by_drafters():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, 11, dtype=F64, generator=g), -1)  # (K, V)
    q = torch.softmax(torch.randn(3, 5, 11, dtype=F64, generator=g), -1)  # (N, K, V)
    got = acceptance_probability(p, q)
    assert got.shape == (3, 5) and got.dtype == F64
    for i in range(3):
        for k in range(5):
            assert float(got[i, k]) == pytest.approx(
                float(torch.minimum(p[k], q[i, k]).sum()), abs=1e-15
            )


def test_acceptance_extremes():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
    assert acceptance_probability(p, p).tolist() == [1.0, 1.0]
    disjoint = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]], dtype=F64)
    assert acceptance_probability(p, disjoint).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("p", "q", "word"),
    [
        (torch.tensor([0.5, 0.6], dtype=F64), torch.tensor([0.5, 0.5], dtype=F64), "sum to 1"),
        (torch.tensor([0.5, 0.5], dtype=F64), torch.tensor([1.2, -0.2], dtype=F64), "negative"),
        (
            torch.tensor([0.5, 0.5], dtype=F64),
            torch.tensor([0.2, 0.3, 0.5], dtype=F64),
            "vocabulary",
        ),
        (torch.full((2, 2), 0.5, dtype=F64), torch.full((3, 2), 0.5, dtype=F64), "broadcast"),
        (torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.5]), "sum to 1"),
    ],
)
def test_acceptance_rejects_bad_input(p, q, word):
    with pytest.raises(ValueError, match=word):
        acceptance_probability(p, q)


# ----------------------------------------------------------------------------------- trees
def naive_tree(p: torch.Tensor, kids: list[list[int]]) -> list[float]:
    return [sum(float(p[r, t]) for t in set(ks)) for r, ks in enumerate(kids)]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), V=st.integers(2, 7), C=st.integers(1, 4))
def test_tree_acceptance_is_mass_of_distinct_kept_children(data, V, C):
    p = data.draw(simplex(V, 4))
    kids = data.draw(arrays(np.int64, (4, C), elements=st.integers(0, V - 1)))
    mask = data.draw(arrays(np.bool_, (4, C)))
    got = tree_acceptance(p, torch.tensor(kids), torch.tensor(mask))
    kept = [[int(kids[r, c]) for c in range(C) if mask[r, c]] for r in range(4)]
    assert got.tolist() == pytest.approx(naive_tree(p, kept), abs=1e-14)
    greedy = greedy_tree_acceptance(p, torch.tensor(kids), torch.tensor(mask))
    assert greedy.tolist() == [float(int(p[r].argmax()) in kept[r]) for r in range(4)]


def test_tree_acceptance_padding_broadcast_and_dtype():
    p = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], dtype=F64)  # (K=2, V)
    kids = torch.tensor([[[0, -1], [1, 1]], [[2, 1], [0, 2]]])  # (N=2, K=2, C=2)
    mask = torch.tensor([[[True, False], [True, True]], [[True, True], [True, True]]])
    got = tree_acceptance(p, kids, mask)
    assert got.shape == (2, 2) and got.dtype == F64
    want = torch.tensor([[0.1, 0.25], [0.9, 0.75]], dtype=F64)
    assert torch.allclose(got, want, rtol=0, atol=1e-15)
    assert greedy_tree_acceptance(p, kids, mask).tolist() == [[0.0, 0.0], [1.0, 1.0]]


def test_greedy_tree_equals_tree_acceptance_of_one_hot():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(6, 5, dtype=F64, generator=g), -1)
    kids = torch.randint(0, 5, (6, 2), generator=g)
    one_hot = torch.nn.functional.one_hot(p.argmax(-1), 5).to(F64)
    assert torch.equal(greedy_tree_acceptance(p, kids), tree_acceptance(one_hot, kids))


def test_tree_acceptance_rejects_bad_input():
    p = torch.full((2, 3), 1 / 3, dtype=F64)
    with pytest.raises(ValueError, match="outside"):
        tree_acceptance(p, torch.tensor([[0, 3], [1, 2]]))
    with pytest.raises(ValueError, match="integer"):
        tree_acceptance(p, torch.tensor([[0.0, 1.0], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="mask"):
        tree_acceptance(p, torch.tensor([[0, 1], [1, 2]]), torch.tensor([True, False]))
    with pytest.raises(ValueError, match="broadcast"):
        tree_acceptance(p, torch.tensor([[0], [1], [2]]))
    with pytest.raises(ValueError, match="sum to 1"):
        greedy_tree_acceptance(p * 2, torch.tensor([[0], [1]]))
    negative = torch.tensor([[1.5, -0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]], dtype=F64)
    with pytest.raises(ValueError, match="negative"):
        tree_acceptance(negative, torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match="NaN"):
        greedy_tree_acceptance(torch.full((2, 3), float("nan"), dtype=F64),
                               torch.tensor([[0], [1]]))
