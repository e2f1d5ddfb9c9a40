"""RoundTable: window losses from the live block equal a naive recomputation over the whole
table, the full table is still returned, and it refuses windows it no longer holds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spec_adapters.core import estimators
from spec_adapters.core.rounds import RoundTable, window_loss


def _naive_loss(gamma, rho, loss, corrected):
    """The estimators applied to one ``(n, K)`` window, written out independently."""
    k = gamma.shape[1]
    if loss == "tap":
        return (1 - gamma.mean(1)).numpy()
    if corrected:
        prefix = torch.cumprod(torch.cat([torch.ones(gamma.shape[0], 1).double(),
                                          rho[:, :-1]], 1), 1)
        al = 1 + (prefix * gamma).sum(1)
    else:
        al = 1 + torch.cumprod(gamma, 1).sum(1)
    return ((k + 1 - al) / (k + 1)).clamp(0, 1).numpy()


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 5), chunks=st.lists(st.integers(1, 6), min_size=1, max_size=25),
       loss=st.sampled_from(["eal", "tap"]), corrected=st.booleans(), seed=st.integers(0, 99))
def test_window_losses_equal_a_naive_recomputation(k, chunks, loss, corrected, seed):
    n, first = 3, 7
    g = torch.Generator().manual_seed(seed)
    table = RoundTable(n, k, corrected)
    table.reset(first)
    gammas, rhos, starts, got = [], [], {}, {}
    pos = first
    for rid, m in enumerate(chunks):  # one round per chunk, opened where the sequence ends
        table.open(rid, pos)
        starts[rid] = pos
        gamma, rho = torch.rand(n, m, generator=g).double(), torch.rand(n, m, generator=g).double()
        gammas.append(gamma)
        rhos.append(rho)
        table.record(gamma, rho)
        pos += m
        got.update((rid, window_loss(g_, r_, loss, corrected))
                   for rid, g_, r_, _ in table.pop_completed())
    full_g, full_r = torch.cat(gammas, 1), torch.cat(rhos, 1)
    torch.testing.assert_close(table.gamma, full_g, rtol=0, atol=0)
    torch.testing.assert_close(table.rho, full_r, rtol=0, atol=0)
    complete = {rid for rid, s in starts.items() if s + k <= pos}
    assert set(got) == complete and set(table.open_rounds) == set(starts) - complete
    for rid in complete:
        lo = starts[rid] - first
        ref = _naive_loss(full_g[:, lo:lo + k], full_r[:, lo:lo + k], loss, corrected)
        np.testing.assert_allclose(got[rid], ref, atol=1e-12)


def test_naive_loss_is_the_corrected_estimator_by_hand():
    """AL = 1 + g1 + r1 g2 + r1 r2 g3 = 1 + 0.9 + 0.5 + 0.4 * 0.2 = 2.48; loss (4 - AL) / 4."""
    g = torch.tensor([[0.9, 0.5, 0.2]]).double()
    r = torch.tensor([[1.0, 0.4, 0.7]]).double()
    assert float(_naive_loss(g, r, "eal", True)[0]) == pytest.approx(0.38)
    assert float(estimators.corrected_acceptance_length(g, r)[0]) == pytest.approx(2.48)


def test_a_round_before_the_kept_positions_is_refused():
    table = RoundTable(2, 2, True)
    table.reset(0)
    table.open(0, 0)
    table.record(torch.ones(2, 3).double(), torch.ones(2, 3).double())
    assert [w.round_id for w in table.pop_completed()] == [0]
    with pytest.raises(ValueError, match="before the first position still kept"):
        table.open(1, 1)  # positions 0..2 were dropped with round 0
    table.open(1, 3)
    with pytest.raises(ValueError, match="round 1 is already open"):
        table.open(1, 3)
    assert table.gamma.shape == (2, 3)


def test_window_lengths_are_the_drafts_before_the_first_abstention():
    """Drafter 0 proposes everywhere (K), 1 abstains at the window's third position (2), 2 at
    its first (0) and again later, 3 records no mask (proposes everywhere)."""
    table = RoundTable(3, 4, False)
    table.reset(10)
    table.open(0, 10)
    g = torch.zeros(3, 5).double()
    proposes = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 1, 1], [0, 1, 1, 0, 1]]).bool()
    table.record(g[:, :2], g[:, :2], proposes[:, :2])
    table.open(1, 12)
    table.record(g[:, 2:], g[:, 2:], proposes[:, 2:])
    (w,) = table.pop_completed()
    assert w.round_id == 0 and w.lengths.tolist() == [4, 2, 0]
    table.record(g[:, :1], g[:, :1])  # no mask: proposes everywhere
    (w,) = table.pop_completed()  # round 1: positions 12..15 = proposes[:, 2:5] then all True
    assert w.round_id == 1 and w.lengths.tolist() == [4, 0, 1]
    with pytest.raises(ValueError, match="proposes"):
        table.record(g[:, :2], g[:, :2], proposes[:2, :2])
