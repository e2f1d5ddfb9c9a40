"""Abstention: the played length is the longest that pays; a new request decides from the
stream's evidence, its own rounds taking over."""

from __future__ import annotations

import numpy as np

from spec_adapters.selection.abstention import AcceptanceBook, expected_gains, paying_k


def test_the_played_length_is_the_longest_that_pays_up_to_the_learners():
    acc = np.array([[0.0, 0.9, 1.6, 2.0, 2.1], [0.0, 0.0, 0.0, 0.0, 0.0]])  # A(k)
    drafted = np.array([np.arange(5.0), np.zeros(5)])  # the second drafter abstains
    gain = expected_gains(acc, drafted, tau=0.01, draft_s=0.001)
    np.testing.assert_allclose(gain[0], [0, 0.008, 0.014, 0.017, 0.017])  # by hand
    assert paying_k(gain[0], 4) == 3  # the 4th token adds nothing: the shorter of the tie
    assert paying_k(gain[0], 2) == 2  # never above the learner's
    assert paying_k(gain[1], 4) == 0  # drafts nothing: gains nothing
    assert expected_gains(acc, drafted, tau=0.01, draft_s=0.0095).max() == 0  # nothing pays


def test_a_request_without_rounds_decides_from_the_streams_evidence():
    stream, own = AcceptanceBook(2, 2), AcceptanceBook(2, 2)
    assert own.estimate(stream, 8) is None and own.estimate(None, 8) is None
    stream.add(np.array([[0, 1, 2], [0, 0, 0]]), np.array([[0, 1, 2], [0, 1, 1]]))
    stream.add(np.array([[0, 1, 1], [0, 0, 0]]), np.array([[0, 1, 2], [0, 1, 1]]))
    acc, dr = own.estimate(stream, 8)
    np.testing.assert_allclose(acc, [[0, 1, 1.5], [0, 0, 0]])  # the stream's means
    np.testing.assert_allclose(dr, [[0, 1, 2], [0, 1, 1]])
    own.add(np.array([[0, 0, 0], [0, 1, 1]]), np.array([[0, 1, 2], [0, 1, 1]]))
    acc, _dr = own.estimate(stream, 1)  # one own round against one of prior
    np.testing.assert_allclose(acc, [[0, 0.5, 0.75], [0, 0.5, 0.5]])
    assert own.estimate(stream, 0)[0].tolist() == [[0, 0, 0], [0, 1, 1]]  # its own alone


def test_a_priced_curve_charges_each_draft_what_its_rows_add():
    """A curve of what a round drafting d = 0..K tokens adds (llama.cpp: a second row nearly
    free, a third most of a step) is read at the expected drafted tokens, between lengths
    linearly; a scalar price is the straight line through 0."""
    acc = np.array([[0.0, 0.9, 1.6, 2.0]])
    drafted = np.array([[0.0, 1.0, 2.0, 2.5]])  # the drafter drafts fewer than 3 at times
    curve = np.array([0.0, 0.001, 0.009, 0.019])
    gain = expected_gains(acc, drafted, tau=0.01, draft_s=curve)
    np.testing.assert_allclose(gain[0], [0, 0.009 - 0.001, 0.016 - 0.009, 0.020 - 0.014])
    assert paying_k(gain[0], 3) == 1
    np.testing.assert_allclose(expected_gains(acc, drafted, 0.01, np.array([0, 1, 2, 3]) * 1e-3),
                               expected_gains(acc, drafted, 0.01, 1e-3))


def test_the_price_of_drafting_at_all_keeps_a_drafter_that_does_not_cover_it_idle():
    """f_i: a drafter's proposal time and the step's price of speculating, charged once for
    any k > 0; a drafter whose best gain does not cover it is not run."""
    acc = np.array([[0.0, 0.9, 1.6], [0.0, 0.9, 1.6]])
    drafted = np.array([np.arange(3.0), np.arange(3.0)])
    free = expected_gains(acc, drafted, tau=0.01, draft_s=0.001)
    priced = expected_gains(acc, drafted, tau=0.01, draft_s=0.001,
                            fixed_s=np.array([0.002, 0.02]))  # the second drafts slowly
    np.testing.assert_allclose(priced[:, 1:], free[:, 1:] - [[0.002], [0.02]])
    assert (priced[:, 0] == 0).all()
    assert paying_k(priced[0], 2) == 2 and paying_k(priced[1], 2) == 0
    np.testing.assert_allclose(expected_gains(acc, drafted, 0.01, 0.001, 0.002)[:, 1:],
                               free[:, 1:] - 0.002)  # one price for every drafter
