"""Theorem 3 estimators, realized ratio and losses against naive loops and the toy case."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from spec_adapters.core.estimators import (
    corrected_acceptance_length,
    eal_loss,
    paper_acceptance_length,
    realized_ratio,
    tap_loss,
)

torch.set_num_threads(1)
F64 = torch.float64
unit = st.floats(0, 1)


def naive_paper(g):
    out, prod = 1.0, 1.0
    for x in g:
        prod *= x
        out += prod
    return out


def naive_corrected(g, r):
    out, prod = 1.0, 1.0
    for k, x in enumerate(g):
        out += prod * x
        prod *= r[k] if k < len(r) else 1.0
    return out


@settings(max_examples=80, deadline=None)
@given(data=st.data(), K=st.integers(1, 6))
def test_estimators_match_naive_and_stay_in_range(data, K):
    g = data.draw(arrays(np.float64, (3, K), elements=unit))
    r = data.draw(arrays(np.float64, (3, K), elements=unit))
    paper = paper_acceptance_length(torch.tensor(g))
    corr = corrected_acceptance_length(torch.tensor(g), torch.tensor(r))
    corr_short = corrected_acceptance_length(torch.tensor(g), torch.tensor(r[:, : K - 1]))
    for i in range(3):
        assert float(paper[i]) == pytest.approx(naive_paper(g[i]), abs=1e-12)
        assert float(corr[i]) == pytest.approx(naive_corrected(g[i], r[i]), abs=1e-12)
        assert float(corr_short[i]) == pytest.approx(float(corr[i]), abs=1e-15)
        assert 1.0 <= float(corr[i]) <= K + 1 and 1.0 <= float(paper[i]) <= K + 1
    tap = tap_loss(torch.tensor(g))
    assert tap.tolist() == pytest.approx((1 - g.mean(-1)).tolist(), abs=1e-15)
    eal = eal_loss(corr, K)
    assert eal.tolist() == pytest.approx(((K + 1 - corr) / (K + 1)).tolist(), abs=1e-15)
    assert bool((eal >= 0).all() and (eal <= 1).all())


def test_greedy_corrected_equals_paper():
    g = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 1.0]], dtype=F64)
    assert torch.equal(corrected_acceptance_length(g, g), paper_acceptance_length(g))
    assert paper_acceptance_length(g).tolist() == [3.0, 2.0]


def test_toy_case_paper_biased_corrected_exact():
    """p = (1/2, 1/2); the drafter proposes a; gamma_2(a) = 1, gamma_2(b) = 0. True E[L+1] = 2."""
    p1 = torch.tensor([0.5, 0.5], dtype=F64)
    q1 = torch.tensor([1.0, 0.0], dtype=F64)
    expectations = {"paper": 0.0, "corrected": 0.0}
    for x, gamma2 in ((0, 1.0), (1, 0.0)):
        g = torch.tensor([0.5, gamma2], dtype=F64)
        rho = realized_ratio(p1, q1, torch.tensor(x))
        expectations["paper"] += 0.5 * float(paper_acceptance_length(g))
        expectations["corrected"] += 0.5 * float(corrected_acceptance_length(g, rho.view(1)))
    assert expectations["paper"] == pytest.approx(1.75, abs=1e-15)
    assert expectations["corrected"] == pytest.approx(2.0, abs=1e-15)


def test_realized_ratio_naive_and_broadcast():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 6, dtype=F64, generator=g), -1)  # (K, V)
    q = torch.softmax(torch.randn(3, 4, 6, dtype=F64, generator=g), -1)  # (N, K, V)
    q[0, 1] = torch.nn.functional.one_hot(torch.tensor(5), 6).to(F64)
    x = torch.tensor([0, 1, 2, 3])
    rho = realized_ratio(p, q, x)
    assert rho.shape == (3, 4)
    for i in range(3):
        for k in range(4):
            want = min(1.0, float(q[i, k, x[k]]) / float(p[k, x[k]]))
            assert float(rho[i, k]) == pytest.approx(want, abs=1e-15)
    assert float(rho[0, 1]) == 0.0
    # p(x) = 0 (a probability-zero event) gives rho = 1, not NaN
    p0 = torch.tensor([1.0, 0.0], dtype=F64)
    assert realized_ratio(p0, torch.tensor([0.5, 0.5], dtype=F64), torch.tensor(1)).item() == 1.0


def _ratio(p, q, x):
    """``realized_ratio`` of float64 ``p``, ``q`` and token ids ``x`` (nested lists), deferred."""
    return lambda: realized_ratio(torch.tensor(p, dtype=F64), torch.tensor(q, dtype=F64),
                                  torch.tensor(x))


@pytest.mark.parametrize(
    ("fn", "word"),
    [
        (lambda: paper_acceptance_length(torch.zeros(3, 0, dtype=F64)), "K"),
        (lambda: paper_acceptance_length(torch.tensor([0.5, 1.2], dtype=F64)), "\\[0, 1\\]"),
        (lambda: paper_acceptance_length(torch.tensor([0.5, -0.2], dtype=F64)), "\\[0, 1\\]"),
        (lambda: paper_acceptance_length(torch.tensor([0.5, float("nan")])), "NaN"),
        (lambda: paper_acceptance_length(torch.tensor([1, 0])), "floating"),
        (
            lambda: corrected_acceptance_length(torch.ones(3, dtype=F64), torch.ones(5, dtype=F64)),
            "rho",
        ),
        (
            lambda: corrected_acceptance_length(
                torch.ones(2, 3, dtype=F64), torch.ones(3, 3, dtype=F64)
            ),
            "broadcast",
        ),
        (lambda: tap_loss(torch.zeros(0, dtype=F64)), "K"),
        (lambda: eal_loss(torch.tensor([2.0]), 0), "K"),
        (lambda: eal_loss(torch.tensor([5.0]), 3), "\\[1, K\\+1\\]"),
        (lambda: eal_loss(torch.tensor([0.5]), 3), "\\[1, K\\+1\\]"),
        (_ratio([0.5, 0.5], [0.2, 0.3, 0.5], 0), "vocabulary"),
        (_ratio([0.5, 0.5], [0.5, 0.5], 2), "outside"),
        (_ratio([[0.5, 0.5]] * 2, [[0.5, 0.5]] * 2, [0, 1, 1]), "broadcast"),
        (_ratio([0.5, 0.7], [0.5, 0.5], 0), "sum to 1"),
    ],
)
def test_bad_input_raises_value_error_naming_it(fn, word):
    with pytest.raises(ValueError, match=word):
        fn()
