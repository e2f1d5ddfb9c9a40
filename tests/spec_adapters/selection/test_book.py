"""RoundBook: window losses from the live block equal a naive recomputation over the whole
history, the history is still returned, it refuses windows it no longer holds; rounds opened
with point-mass drafts are scored from the verified tokens alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spec_adapters.core import estimators
from spec_adapters.selection.book import RoundBook, Window
from spec_adapters.selection.experts import window_losses


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
    table = RoundBook(n, k, corrected)
    table.reset(first)
    gammas, rhos, starts, got = [], [], {}, {}
    pos = first
    for rid, m in enumerate(chunks):  # one round per chunk, opened where the sequence ends
        table.open(rid, pos)
        starts[rid] = pos
        gamma, rho = torch.rand(n, m, generator=g).double(), torch.rand(n, m, generator=g).double()
        gammas.append(gamma)
        rhos.append(rho)
        table.record(np.zeros(m), gamma, rho)
        pos += m
        got.update((w.round_id, window_losses(w, loss, corrected))
                   for w in table.pop_completed())
    full_g, full_r = torch.cat(gammas, 1), torch.cat(rhos, 1)
    np.testing.assert_array_equal(table.gamma, full_g.numpy())
    np.testing.assert_array_equal(table.rho, full_r.numpy())
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
    table = RoundBook(2, 2, True)
    table.reset(0)
    table.open(0, 0)
    table.record([5, 6, 7], torch.ones(2, 3).double(), torch.ones(2, 3).double())
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
    table = RoundBook(3, 4, False)
    table.reset(10)
    table.open(0, 10)
    g = torch.zeros(3, 5).double()
    proposes = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 1, 1], [0, 1, 1, 0, 1]]).bool()
    table.record([1, 2], g[:, :2], g[:, :2], proposes[:, :2])
    table.open(1, 12)
    table.record([3, 4, 5], g[:, 2:], g[:, 2:], proposes[:, 2:])
    (w,) = table.pop_completed()
    assert w.round_id == 0 and w.lengths.tolist() == [4, 2, 0]
    table.record([6], g[:, :1], g[:, :1])  # no mask: proposes everywhere
    (w,) = table.pop_completed()  # round 1: positions 12..15 = proposes[:, 2:5] then all True
    assert w.round_id == 1 and w.lengths.tolist() == [4, 0, 1]
    with pytest.raises(ValueError, match="proposes"):
        table.record([1, 2], g[:, :2], g[:, :2], proposes[:2, :2])


def test_rounds_with_drafts_are_scored_from_the_verified_tokens():
    """A round opened with every drafter's point-mass draft: gamma = rho = 1{draft = token},
    lengths = the drafts before the first -1; the data attached comes back; close() hands back
    the rounds still open for censoring and drops what nobody reads."""
    book = RoundBook(3, 3)
    book.reset(4)
    drafts = np.array([[7, 8, 9], [7, 0, 9], [-1, -1, -1]])
    book.open(0, 4, drafts, data="played (0, 3)")
    book.record([7, 8])
    assert book.pop_completed() == []
    book.open(1, 6, np.array([[1, 2, 3], [9, -1, -1], [9, 5, 6]]))
    book.record([9, 1])
    (w,) = book.pop_completed()
    assert w.round_id == 0 and w.data == "played (0, 3)"
    np.testing.assert_array_equal(w.gamma, [[1, 1, 1], [1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(w.rho, w.gamma)
    assert w.lengths.tolist() == [3, 3, 0]
    assert book.gamma.shape == (3, 0)  # no per-position statistics were recorded
    assert book.close() == [1] and book.open_rounds == {}
    book.open(2, 8)  # nothing before the end is kept once no round reads it
    with pytest.raises(ValueError, match="before the first position still kept"):
        book.open(3, 7)


def test_a_round_without_drafts_needs_statistics():
    book = RoundBook(2, 2)
    book.open(0, 0)
    book.record([1, 2])  # tokens alone: nothing to score round 0 with
    with pytest.raises(ValueError, match="without statistics"):
        book.pop_completed()
    with pytest.raises(ValueError, match=r"drafts must be \(2, 2\)"):
        book.open(1, 2, np.zeros((2, 3), int))


def test_statistics_after_tokens_alone_line_up_with_their_positions():
    """Tokens recorded alone (a round with drafts open) and then with statistics: a round
    without drafts reads the statistics at its own positions, and one that reaches back into
    the tokens recorded alone is refused."""
    book = RoundBook(2, 2)
    book.open(0, 0, np.array([[5, 6], [5, 0]]))
    book.open(1, 1)        # reads positions 1, 2: the first recorded without statistics
    book.record([5, 6])    # tokens alone
    (w,) = book.pop_completed()
    assert w.round_id == 0 and w.gamma.tolist() == [[1, 1], [1, 0]]
    book.open(2, 2)
    g = np.array([[0.25, 0.5], [0.75, 1.0]])
    book.record([7, 8], g, g)
    with pytest.raises(ValueError, match="without statistics"):
        book.pop_completed()   # round 1's position 1 has none
    assert sorted(book.open_rounds) == [1, 2]  # nothing taken out by the refusal
    book.open_rounds.pop(1)
    (w,) = book.pop_completed()
    assert w.round_id == 2
    np.testing.assert_array_equal(w.gamma, g)


def test_an_expert_pays_for_the_tokens_its_drafter_would_have_drafted():
    """Cost-aware: expert (i, k) pays c(min(k, lengths_i)), one (K + 1,) cost row serving
    every drafter (the vLLM proposer's); an unknown loss is refused by name."""
    K = 4
    costs = np.linspace(0.01, 0.05, K + 1)  # c(k), k = 0 .. K
    gamma = np.zeros((3, K))  # nothing accepted
    w = Window(0, gamma, gamma, np.array([0, 2, K]))
    losses = window_losses(w, "time", False, costs, tau=0.02).reshape(3, K + 1)
    np.testing.assert_allclose(losses[0], losses[0, 0])  # abstained: every k costs a plain step
    np.testing.assert_allclose(losses[1, 2:], losses[1, 2])  # drafts 2 at most
    assert np.all(np.diff(losses[1, :3]) > 0) and np.all(np.diff(losses[2]) > 0)
    np.testing.assert_allclose(losses[:, 0], losses[0, 0])  # k = 0 is the same for all
    with pytest.raises(ValueError, match="unknown loss 'mat'"):
        window_losses(w, "mat", False)
