"""Bandit learners against their bounds: seeded and averaged over fixed seeds (never flaky).

EXP3's bound is on the pseudo-regret ``E[sum_t l_{t,I_t}] - min_i L_{T,i}`` against an oblivious
adversary; we estimate the expectation by averaging, over fixed seeds, the conditional expected
loss ``sum_t <p_t, l_t>`` (an unbiased, lower-variance stand-in for ``sum_t l_{t,I_t}``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import onlinelearn as ol
from onlinelearn import bounds

SEEDS = range(12)


def sample(w: np.ndarray, u: float) -> int:
    """Inverse-CDF draw (same law as Learner.sample, but cheap inside long loops)."""
    return min(int(np.searchsorted(np.cumsum(w), u, side="right")), w.size - 1)


def run_bandit(learner, losses: np.ndarray, seed: int) -> tuple[float, float]:
    """Play ``losses`` (T, K) with bandit feedback; return (expected loss, realized loss)."""
    u = np.random.default_rng(seed).random(losses.shape[0])
    expected = realized = 0.0
    for t, loss in enumerate(losses):
        w = learner.weights
        arm = sample(w, u[t])
        expected += float(w @ loss)
        realized += float(loss[arm])
        learner.update(arm, float(loss[arm]))
    return expected, realized


def switching_losses(T: int, K: int, seed: int) -> np.ndarray:
    """Oblivious adversary: arm 1 looks best for the first 60% of rounds, arm 0 is best overall.

    Bernoulli losses; arm 0 has mean 0.7 then 0.1, arm 1 mean 0.4 then 0.9, the rest 0.6.
    """
    rng = np.random.default_rng(1000 + seed)
    means = np.full((T, K), 0.6)
    cut = int(0.6 * T)
    means[:cut, 0], means[cut:, 0] = 0.7, 0.1
    means[:cut, 1], means[cut:, 1] = 0.4, 0.9
    return (rng.random((T, K)) < means).astype(float)


@pytest.mark.parametrize("anytime", [False, True])
def test_exp3_expected_regret_within_bound(anytime):
    T, K = 2_000, 4
    regrets = []
    for seed in SEEDS:
        losses = switching_losses(T, K, seed)
        learner = ol.Exp3(K) if anytime else ol.Exp3(K, horizon=T)
        expected, _ = run_bandit(learner, losses, seed)
        regrets.append(expected - losses.sum(axis=0).min())
    bound = bounds.exp3_bound(K, T, anytime=anytime)
    assert np.mean(regrets) <= bound, (np.mean(regrets), bound)
    # and it actually learns: far better than the uniform policy's regret
    uniform = np.mean([switching_losses(T, K, s).mean(axis=1).sum()
                       - switching_losses(T, K, s).sum(axis=0).min() for s in SEEDS])
    assert np.mean(regrets) < 0.5 * uniform


def test_exp3ix_regret_within_high_probability_bound():
    """With delta = 0.1, at most a delta-fraction of the fixed seeds may exceed the bound."""
    T, K, delta = 2_000, 4, 0.1
    bound = bounds.exp3ix_bound(K, T, delta)
    exceed = 0
    realized_regrets = []
    for seed in SEEDS:
        losses = switching_losses(T, K, seed)
        _, realized = run_bandit(ol.Exp3IX(K, horizon=T), losses, seed)
        regret = realized - losses.sum(axis=0).min()
        realized_regrets.append(regret)
        exceed += regret > bound
    assert exceed <= math.floor(delta * len(SEEDS)), (exceed, max(realized_regrets), bound)
    assert np.mean(realized_regrets) <= bounds.exp3_bound(K, T)


def test_exp3ix_estimates_are_capped_by_implicit_exploration():
    learner = ol.Exp3IX(3, eta=5.0, gamma=0.25)
    for _ in range(50):
        learner.update(0, 1.0)  # arm 0's probability collapses; estimates stay <= 1/gamma
    for _ in range(5):
        before, p0 = learner.L_hat.copy(), learner.weights[0]
        learner.update(0, 1.0)
        increment = learner.L_hat - before
        # loss / (p + gamma): biased down by gamma, and so never above 1 / gamma
        np.testing.assert_allclose(increment, [1.0 / (p0 + 0.25), 0.0, 0.0], rtol=1e-12)
        assert increment[0] <= 1 / 0.25
    assert p0 < 1e-6  # the cap binds: without gamma the estimate would be 1 / p0


def run_ucb1(means: np.ndarray, T: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """UCB1 on Bernoulli rewards; returns the pull counts at every t and the final counts."""
    rng = np.random.default_rng(seed)
    rewards = rng.random((T, means.size)) < means
    learner = ol.UCB1(means.size)
    pulls = np.zeros((T, means.size), dtype=np.int64)
    for t in range(T):
        arm = learner.sample(rng)
        learner.update(arm, 1.0 - float(rewards[t, arm]))
        pulls[t] = learner.counts
    return pulls, learner.counts


def test_ucb1_regret_within_bound_and_logarithmic():
    means = np.array([0.8, 0.6, 0.5])
    gaps = means.max() - means
    T = 3_000
    pulls = np.mean([run_ucb1(means, T, seed)[0] for seed in SEEDS], axis=0)  # E[n_j(t)]
    regret = pulls @ gaps  # pseudo-regret sum_j gap_j E[n_j(t)] for every t
    for t in (300, 1_000, T):
        assert regret[t - 1] <= bounds.ucb1_bound(gaps, t), (t, regret[t - 1])
        for j in (1, 2):
            assert pulls[t - 1, j] <= bounds.ucb1_pulls_bound(gaps[j], t)
    # logarithmic growth: each doubling of t adds at most the bound's own increment,
    # 8 sum_j ln 2 / gap_j (a policy with linear regret adds ~ t * mean gap = ~125 here)
    per_doubling = 8 * math.log(2) * sum(1 / g for g in gaps if g > 0)
    for t in (375, 750, 1_500):
        assert regret[2 * t - 1] - regret[t - 1] <= per_doubling, (t, regret[2 * t - 1])
    # the best arm dominates
    assert pulls[-1, 0] > 0.8 * T


def test_ucb1_plays_each_arm_once_first():
    learner = ol.UCB1(5)
    rng = np.random.default_rng(0)
    first = []
    for _ in range(5):
        arm = learner.sample(rng)
        first.append(arm)
        learner.update(arm, 1.0)  # worst possible reward: an index rule would avoid it again
    assert sorted(first) == list(range(5))


def test_ucb1_index_is_mean_reward_plus_confidence_radius():
    learner = ol.UCB1(2)
    for arm, loss in [(0, 0.25), (1, 1.0), (0, 0.75), (1, 0.0), (1, 0.5)]:
        learner.update(arm, loss)
    t = 5
    expected = [0.5 + math.sqrt(2 * math.log(t) / 2), 0.5 + math.sqrt(2 * math.log(t) / 3)]
    np.testing.assert_allclose(learner.index, expected, rtol=1e-15)
    assert learner.weights.tolist() == [1.0, 0.0]


def test_exp3_uses_importance_weighted_estimates():
    learner = ol.Exp3(4, eta=0.1)
    p = learner.weights[2]
    learner.update(2, 0.5)
    np.testing.assert_allclose(learner.L_hat, [0, 0, 0.5 / p, 0], rtol=1e-15)
