"""(drafter, k) experts: truncated acceptance lengths, online step costs, the time loss."""

import numpy as np
import pytest

from spec_adapters.selection.costs import StepCosts
from spec_adapters.selection.experts import (
    acceptance_lengths,
    expert_losses,
    expert_of,
    n_experts,
)


def test_acceptance_lengths_truncate_the_estimator_by_hand():
    gamma = [[1.0, 0.5, 0.2], [0.0, 1.0, 1.0]]
    rho = [[1.0, 0.5, 1.0], [0.0, 1.0, 1.0]]
    al = acceptance_lengths(gamma, rho)
    # drafter 0: 1, 1 + 1, + 1*0.5, + (1*0.5)*0.2 ; drafter 1: rejected at once
    np.testing.assert_allclose(al, [[1.0, 2.0, 2.5, 2.6], [1.0, 1.0, 1.0, 1.0]])
    # the paper's product form: weights are products of gammas
    np.testing.assert_allclose(acceptance_lengths([[0.5, 0.5]]), [[1.0, 1.5, 1.75]])


def test_expert_index_round_trips():
    assert n_experts(3, 4) == 15
    assert [expert_of(e, 4) for e in (0, 4, 5, 14)] == [(0, 0), (0, 4), (1, 0), (2, 4)]


def test_time_loss_by_hand_prefers_not_drafting_when_verification_is_dear():
    # one drafter, K = 2, greedy: its first draft is right, the second wrong
    gamma = [[1.0, 0.0]]
    al = acceptance_lengths(gamma)  # [1, 2, 2]
    costs = np.array([[1.0, 3.0, 3.5]])  # a 2-token verify costs 3 plain steps
    loss = expert_losses(gamma, None, costs, "time")
    tau, K = 1.0, 2
    expect = (costs - tau * al + tau * (K + 1)) / (costs.max() + tau * K)
    np.testing.assert_allclose(loss, expect.reshape(-1))
    assert int(np.argmin(loss)) == 0  # k = 0: 1 s/token beats 1.5 s/token
    # cheap verification: the same acceptance now makes k = 1 the best expert
    cheap = expert_losses(gamma, None, np.array([[1.0, 1.2, 1.4]]), "time")
    assert int(np.argmin(cheap)) == 1


def test_time_loss_orders_experts_like_time_per_token_at_the_optimum():
    rng = np.random.default_rng(0)
    for _ in range(200):
        g = rng.uniform(size=(3, 4))
        c = np.sort(rng.uniform(0.5, 3.0, size=(3, 5)), axis=1)
        al = acceptance_lengths(g)
        ratio = c / al
        tau = ratio.min()  # Dinkelbach at the optimum: argmin of the loss = argmin of c / AL
        loss = expert_losses(g, None, c, "time", tau=tau)
        assert int(np.argmin(loss)) == int(np.argmin(ratio))
        assert loss.min() >= 0 and loss.max() <= 1


def test_mat_loss_is_the_truncated_eal_loss_and_prefers_full_length():
    gamma = [[0.9, 0.8, 0.7]]
    loss = expert_losses(gamma, None, None, "mat")
    al = acceptance_lengths(gamma)[0]
    np.testing.assert_allclose(loss, (4 - al) / 4)
    assert int(np.argmin(loss)) == 3


def test_nothing_measured_falls_back_to_acceptance_only():
    costs = StepCosts(2, 3).round_costs()
    assert costs.shape == (2, 4) and not costs.any()
    g = [[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]]
    np.testing.assert_allclose(expert_losses(g, None, costs, "time"),
                               expert_losses(g, None, None, "mat"))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"loss": "speed"}, "unknown draft-length loss"),
    ({"costs": None}, "needs the round costs"),
    ({"costs": np.ones((1, 2))}, "costs must have shape"),
    ({"costs": -np.ones((1, 3))}, "finite and >= 0"),
    ({"costs": np.ones((1, 3)), "tau": float("inf")}, "tau"),
    ({"gamma": [[1.5, 0.0]], "costs": np.ones((1, 3))}, "gamma must lie"),
    ({"gamma": [[0.5, 0.5]], "rho": [[0.5]], "costs": np.ones((1, 3))}, "rho must have"),
])
def test_expert_losses_reject_bad_input(kwargs, match):
    args = {"gamma": [[0.5, 0.5]], "rho": None, "costs": np.ones((1, 3)), "loss": "time"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        expert_losses(**args)


@pytest.mark.parametrize("seed", range(5))
def test_numpy_acceptance_lengths_equal_theorem_3_in_torch_at_every_k(seed):
    """The selection core's numpy estimator (every (drafter, k)) and core.estimators' torch
    one (Theorem 3, paper and corrected) are one formula: truncating at k is the estimator of
    a k-token draft."""
    import torch

    from spec_adapters.core.estimators import (
        corrected_acceptance_length,
        paper_acceptance_length,
    )

    rng = np.random.default_rng(seed)
    gamma, rho = rng.random((4, 5)), rng.random((4, 5))
    gamma[0, 2] = rho[1, 0] = 0.0  # a zero cuts every later term
    corrected, paper = acceptance_lengths(gamma, rho), acceptance_lengths(gamma)
    for k in range(1, 6):
        g, r = torch.from_numpy(gamma[:, :k]), torch.from_numpy(rho[:, :k])
        np.testing.assert_allclose(corrected[:, k], corrected_acceptance_length(g, r).numpy(),
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(paper[:, k], paper_acceptance_length(g).numpy(),
                                   rtol=0, atol=1e-12)


def test_theorem3_in_numpy_agrees_with_the_torch_estimators():
    """The selection core's acceptance lengths (numpy) and core.estimators' (torch) are one
    formula: the full length and every truncation, paper and corrected."""
    import torch

    from spec_adapters.core.estimators import corrected_acceptance_length, paper_acceptance_length
    from spec_adapters.selection.experts import acceptance_lengths

    rng = np.random.default_rng(7)
    gamma, rho = rng.random((6, 5)), rng.random((6, 5))
    ours = acceptance_lengths(gamma, rho)
    paper = acceptance_lengths(gamma)
    for k in range(1, 6):
        g, r = torch.from_numpy(gamma[:, :k]), torch.from_numpy(rho[:, :k])
        np.testing.assert_allclose(ours[:, k], corrected_acceptance_length(g, r).numpy(),
                                   rtol=1e-12)
        np.testing.assert_allclose(paper[:, k], paper_acceptance_length(g).numpy(), rtol=1e-12)
