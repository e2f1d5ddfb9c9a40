"""NormalHedge.warm_start: a learner started from another's regrets shrunk to m rounds plays
the other's weights, holds |R| <= m, and learns from there."""

from __future__ import annotations

import numpy as np
import pytest

import onlinelearn as ol


def _trained(n: int, rounds: int, seed: int) -> ol.NormalHedge:
    rng = np.random.default_rng(seed)
    src = ol.NormalHedge(n)
    for _ in range(rounds):
        src.update(rng.random(n) * np.linspace(0.2, 1.0, n))
    return src


@pytest.mark.parametrize("m", [1, 8, 50])
def test_a_warm_start_plays_the_sources_weights_with_m_rounds_of_evidence(m):
    src = _trained(6, 40, 0)
    warm = ol.NormalHedge(6).warm_start(src, m)
    np.testing.assert_allclose(warm.weights, src.weights, rtol=1e-12, atol=1e-15)
    assert warm.t == min(m, 40) and np.all(np.abs(warm.R) <= warm.t)
    np.testing.assert_allclose(warm.R, src.R * warm.t / 40)
    ol.NormalHedge(6).load_state_dict(warm.state_dict())  # a consistent state
    before = src.state_dict()
    warm.update(np.linspace(1.0, 0.0, 6))  # it learns from there; the source is untouched
    assert warm.t == min(m, 40) + 1
    np.testing.assert_array_equal(src.state_dict()["R"], before["R"])


def test_a_source_without_rounds_or_zero_rounds_leaves_the_learner_uniform():
    assert ol.NormalHedge(3).warm_start(ol.NormalHedge(3), 8).t == 0
    warm = ol.NormalHedge(3).warm_start(_trained(3, 10, 1), 0)
    assert warm.t == 0 and np.allclose(warm.weights, 1 / 3)


def test_a_source_of_another_size_or_kind_and_negative_rounds_are_refused():
    src = _trained(4, 5, 2)
    with pytest.raises(ValueError, match="NormalHedge over 3 experts"):
        ol.NormalHedge(3).warm_start(src, 2)
    with pytest.raises(ValueError, match="NormalHedge over 4 experts"):
        ol.NormalHedge(4).warm_start(ol.Hedge(4), 2)
    with pytest.raises(ValueError, match="rounds must be >= 0"):
        ol.NormalHedge(4).warm_start(src, -1)
