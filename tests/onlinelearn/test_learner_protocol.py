"""The Learner protocol on every learner: simplex weights, state round trip, reset, bad input."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import onlinelearn as ol
from tests.onlinelearn.normalhedge_oracle import brentq_v

FULL = {
    "Hedge_fixed": lambda n: ol.Hedge(n, eta=0.5),
    "Hedge_horizon": lambda n: ol.Hedge(n, horizon=1000),
    "Hedge_anytime": lambda n: ol.Hedge(n),
    "AdaHedge": ol.AdaHedge,
    "NormalHedge": ol.NormalHedge,
    "AdaNormalHedge": ol.AdaNormalHedge,
}
BANDIT = {
    "Exp3": ol.Exp3,
    "Exp3_horizon": lambda n: ol.Exp3(n, horizon=1000),
    "Exp3IX": ol.Exp3IX,
    "Exp3IX_fixed": lambda n: ol.Exp3IX(n, eta=0.3, gamma=0.05),
    "UCB1": ol.UCB1,
}
ALL = {**FULL, **BANDIT}


def feed(learner, rng, steps: int) -> None:
    """Drive a learner with random feedback of the kind it takes."""
    n = learner.n
    for _ in range(steps):
        if learner.full_information:
            learner.update(rng.random(n))
        else:
            arm = learner.sample(rng)
            learner.update(arm, rng.random())


def assert_on_simplex(w: np.ndarray, n: int) -> None:
    assert w.dtype == np.float64 and w.shape == (n,)
    assert np.all(np.isfinite(w)), "weights contain NaN or inf"
    assert np.all(w >= 0.0)
    assert abs(w.sum() - 1.0) <= 1e-9 * max(1, n) ** 0.5


# ---------------------------------------------------------------- simplex invariants


@pytest.mark.parametrize("name", ["Hedge_anytime", "AdaHedge", "NormalHedge", "AdaNormalHedge"])
def test_weights_on_simplex_while_real_updates_reach_the_underflow_range(name):
    """T = 25 000 real updates (n = 128), the weights of every round checked at once.

    Every loss is in [0.7, 1], so the smallest cumulative loss is above 0.8 t: anytime Hedge's
    ``eta_t L_min >= 0.8 sqrt(8 ln n t)`` passes 745 (``exp`` underflows to 0) near t = 21 000,
    the range where weights not shifted by ``min L`` become 0 / 0. The leader changes halfway.
    (Fixed and horizon Hedge share the anytime code path; only eta differs.)
    """
    T, n = 25_000, 128
    rng = np.random.default_rng(0)
    losses = 1.0 - 0.1 * rng.random((T, n))
    losses[: T // 2, 0] -= 0.2  # a leader that changes halfway
    losses[T // 2 :, 1] -= 0.2
    learner = FULL[name](n)
    ws = np.empty((T, n))
    for t in range(T):
        ws[t] = learner.weights
        learner.update(losses[t])
    assert np.all(np.isfinite(ws)) and np.all(ws >= 0.0)
    assert np.abs(ws.sum(axis=1) - 1.0).max() <= 1e-12


@pytest.mark.parametrize("name", ["Exp3IX", "Exp3IX_fixed", "UCB1"])
def test_bandit_weights_on_simplex_for_2e4_steps(name):
    """T = 20 000 real plays; with eta = 0.3 the smallest loss estimate passes 745 / eta near
    t = 5 000, where unshifted exponential weights underflow to 0 / 0."""
    T, n = 20_000, 3
    rng = np.random.default_rng(1)
    means = np.array([0.3, 0.5, 0.7])
    learner = BANDIT[name](n)
    uniform = rng.random(T)
    worst = 0.0
    for t in range(T):
        w = learner.weights
        worst = max(worst, abs(w.sum() - 1.0))
        assert w.min() >= 0.0
        arm = min(int(np.searchsorted(np.cumsum(w), uniform[t], side="right")), n - 1)
        learner.update(arm, float(uniform[t] < means[arm]))
    assert worst <= 1e-12
    assert_on_simplex(learner.weights, n)


@pytest.mark.parametrize("name", sorted(ALL))
def test_weights_on_simplex_with_1e4_experts_and_huge_cumulative_losses(name):
    """n = 10^4; state as after ~10^5 rounds (cumulative statistics ~ 10^5), then 30 updates."""
    n = 10_000
    rng = np.random.default_rng(2)
    learner = ALL[name](n)
    state = learner.state_dict()
    scale = 1e5
    for key in ("L", "L_hat"):
        if key in state:
            state[key] = (scale * (0.5 + 0.5 * rng.random(n))).tolist()
    if "R" in state:
        R = scale * (rng.random(n) - 0.9) / 10
        state["R"] = R.tolist()
        if "C" in state:
            state["C"] = (np.abs(R) + (scale - np.abs(R)) * rng.random(n)).tolist()
        if "v" in state:  # NormalHedge's scale is a function of R: load the consistent one
            state["v"] = brentq_v(R)
    if "counts" in state:
        counts = rng.integers(1, 20, n)
        state["counts"] = counts.tolist()
        state["rewards"] = (counts * rng.random(n)).tolist()
    if "t" in state:
        state["t"] = 100_000
    learner.load_state_dict(state)
    for _ in range(30):
        assert_on_simplex(learner.weights, n)
        if learner.full_information:
            losses = rng.random(n)
            losses[7] = 0.0
            learner.update(losses)
        else:
            learner.update(learner.sample(rng), rng.random())
    assert_on_simplex(learner.weights, n)


@pytest.mark.parametrize("name", sorted(ALL))
def test_weights_are_a_fresh_array_each_call(name):
    learner = ALL[name](4)
    feed(learner, np.random.default_rng(0), 5)
    w = learner.weights
    w[:] = -1.0
    assert_on_simplex(learner.weights, 4)


@pytest.mark.parametrize("name", sorted(ALL))
def test_sample_draws_arms_with_the_law_of_the_weights(name):
    """10^4 seeded draws: each arm's frequency within 5 standard errors of its weight (never an
    arm of weight 0), and every draw a plain ``int``."""
    rng = np.random.default_rng(3)
    learner = ALL[name](5)
    feed(learner, rng, 20)
    w = learner.weights
    draws = [learner.sample(rng) for _ in range(10_000)]
    assert all(type(arm) is int for arm in draws)
    freq = np.bincount(draws, minlength=5) / len(draws)
    assert freq.shape == (5,)
    np.testing.assert_array_less(np.abs(freq - w), 5 * np.sqrt(w * (1 - w) / len(draws)) + 1e-12)


@pytest.mark.parametrize("name", sorted(ALL))
def test_sample_is_the_draw_of_rng_choice_for_the_same_generator_state(name):
    """sample reads the inverse CDF of one uniform: the index ``rng.choice(n, p=weights)``
    draws from the same generator state (numpy's own rule), 2,000 times."""
    learner = ALL[name](6)
    feed(learner, np.random.default_rng(4), 15)
    ours, numpys = np.random.default_rng(9), np.random.default_rng(9)
    got = [learner.sample(ours) for _ in range(2000)]
    assert got == [int(numpys.choice(6, p=learner.weights)) for _ in range(2000)]


@pytest.mark.parametrize("name", sorted(ALL))
def test_single_expert_always_gets_weight_one(name):
    learner = ALL[name](1)
    feed(learner, np.random.default_rng(0), 20)
    assert learner.weights.tolist() == [1.0]


# ---------------------------------------------------------------- AdaHedge invariance


@settings(max_examples=60, deadline=None)
@given(
    grid=arrays(np.int64, st.tuples(st.integers(1, 40), st.integers(1, 6)),
                elements=st.integers(0, 16)),
    a_exp=st.integers(1, 4),
    b_num=st.integers(0, 16),
)
def test_adahedge_weights_invariant_under_affine_loss_transform(grid, a_exp, b_num):
    """l -> a l + b with a = 2^-k > 0 and b in [0, 1 - a]: identical weights every round.

    Losses live on the dyadic grid k/16 and a, b are dyadic, so all sums are exact in float64
    and ties between leaders (follow-the-leader phase) are the same in both runs.
    """
    losses = grid / 16.0
    a = 2.0**-a_exp
    b = (1.0 - a) * b_num / 16.0
    n = losses.shape[1]
    h1, h2 = ol.AdaHedge(n), ol.AdaHedge(n)
    for loss in losses:
        np.testing.assert_allclose(h1.weights, h2.weights, rtol=1e-9, atol=1e-15)
        h1.update(loss)
        h2.update(a * loss + b)
    np.testing.assert_allclose(h1.weights, h2.weights, rtol=1e-9, atol=1e-15)
    assert math.isclose(h2.Delta, a * h1.Delta, rel_tol=1e-9, abs_tol=1e-12)


# ---------------------------------------------------------------- state_dict / reset


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(ALL)), n=st.integers(1, 6), before=st.integers(0, 30),
       seed=st.integers(0, 2**32 - 1))
def test_state_dict_json_round_trip_reproduces_future_weights_exactly(name, n, before, seed):
    rng = np.random.default_rng(seed)
    original = ALL[name](n)
    feed(original, rng, before)
    saved = json.loads(json.dumps(original.state_dict()))
    restored = ALL[name](n).load_state_dict(saved)
    assert restored.state_dict() == original.state_dict()
    # drive both with the same feedback; weights must agree bit for bit
    rng_a, rng_b = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
    for _ in range(20):
        assert np.array_equal(original.weights, restored.weights)
        if original.full_information:
            losses = rng_a.random(n)
            rng_b.random(n)
            original.update(losses)
            restored.update(losses.copy())
        else:
            arm_a, arm_b = original.sample(rng_a), restored.sample(rng_b)
            assert arm_a == arm_b
            loss = rng_a.random()
            rng_b.random()
            original.update(arm_a, loss)
            restored.update(arm_b, loss)
    assert np.array_equal(original.weights, restored.weights)


def test_state_dict_restores_hyper_parameters():
    src = ol.Exp3IX(3, eta=0.2, gamma=0.01)
    dst = ol.Exp3IX(3).load_state_dict(json.loads(json.dumps(src.state_dict())))
    assert (dst.eta, dst.gamma, dst.horizon) == (0.2, 0.01, None)
    src = ol.Hedge(3, horizon=50)
    dst = ol.Hedge(3, eta=1.0).load_state_dict(src.state_dict())
    assert (dst.eta, dst.horizon) == (None, 50)


@pytest.mark.parametrize("name", sorted(ALL))
def test_update_and_load_state_dict_return_self(name):
    learner = ALL[name](3)
    if learner.full_information:
        assert learner.update([0.1, 0.5, 0.9]) is learner
    else:
        assert learner.update(1, 0.5) is learner
    assert learner.load_state_dict(ALL[name](3).state_dict()) is learner


@pytest.mark.parametrize("name", sorted(ALL))
def test_reset_returns_to_fresh_state(name):
    learner = ALL[name](4)
    fresh = ALL[name](4).state_dict()
    feed(learner, np.random.default_rng(0), 25)
    assert learner.state_dict() != fresh
    assert learner.reset() is learner
    assert learner.state_dict() == fresh
    assert np.array_equal(learner.weights, ALL[name](4).weights)


# ---------------------------------------------------------------- bad input


def bad_full_losses(n: int):
    return {
        "wrong shape": (np.zeros(n + 1), "shape"),
        "2-d": (np.zeros((1, n)), "shape"),
        "scalar": (0.5, "shape"),
        "NaN": (np.r_[np.zeros(n - 1), np.nan], "finite"),
        "inf": (np.r_[np.zeros(n - 1), np.inf], "finite"),
        "above 1": (np.r_[np.zeros(n - 1), 1.5], r"\[0, 1\]"),
        "negative": (np.r_[np.zeros(n - 1), -1e-9], r"\[0, 1\]"),
        "not numbers": (["a"] * n, "real numbers"),
        "numbers as strings": (["0.5"] * n, "real numbers, got dtype <U3"),
        "booleans": ([True] + [0.5] * (n - 1), "real numbers, got booleans"),
        "boolean array": (np.zeros(n, dtype=bool), "real numbers, got booleans"),
        "object array": (np.full(n, 0.5, dtype=object), "real numbers, got dtype object"),
        "None": (None, "real numbers"),
    }


BAD_BANDIT = {
    "arm too large": ((3, 0.5), "arm"),
    "negative arm": ((-1, 0.5), "arm"),
    "float arm": ((1.0, 0.5), "arm"),
    "bool arm": ((True, 0.5), "arm"),
    "loss above 1": ((0, 1.5), r"\[0, 1\]"),
    "negative loss": ((0, -0.1), r"\[0, 1\]"),
    "NaN loss": ((0, float("nan")), "finite"),
    "inf loss": ((0, float("inf")), "finite"),
    "string loss": ((0, "x"), "real number"),
    "number as a string": ((0, "0.5"), "real number"),
    "bool loss": ((0, True), "real number"),
    "numpy bool loss": ((0, np.False_), "real number"),
}


def trained(name: str, n: int = 3):
    learner = ALL[name](n)
    feed(learner, np.random.default_rng(5), 10)
    return learner


@pytest.mark.parametrize("case", sorted(bad_full_losses(3)))
@pytest.mark.parametrize("name", sorted(FULL))
def test_bad_losses_raise_value_error_and_leave_state_unchanged(name, case):
    learner = trained(name)
    before = copy.deepcopy(learner.state_dict())
    value, match = bad_full_losses(3)[case]
    with pytest.raises(ValueError, match=match):
        learner.update(value)
    assert learner.state_dict() == before


@pytest.mark.parametrize("case", sorted(BAD_BANDIT))
@pytest.mark.parametrize("name", sorted(BANDIT))
def test_bad_bandit_feedback_raises_value_error_and_leaves_state_unchanged(name, case):
    learner = trained(name)
    before = copy.deepcopy(learner.state_dict())
    args, match = BAD_BANDIT[case]
    with pytest.raises(ValueError, match=match):
        learner.update(*args)
    assert learner.state_dict() == before


@pytest.mark.parametrize("bad_n", [0, -3, True, False, 2.0, "3", None])
@pytest.mark.parametrize("name", sorted(ALL))
def test_bad_n_raises_value_error(name, bad_n):
    with pytest.raises(ValueError, match="n must be"):
        ALL[name](bad_n)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ol.Hedge(3, eta=0.0), "eta must be finite and > 0"),
        (lambda: ol.Hedge(3, eta=-1.0), "eta must be finite and > 0"),
        (lambda: ol.Hedge(3, eta=float("nan")), "eta must be finite and > 0"),
        (lambda: ol.Hedge(3, eta=True), "eta must be a real number"),
        (lambda: ol.Hedge(3, horizon=0), "horizon must be >= 1"),
        (lambda: ol.Hedge(3, horizon=10.0), "horizon must be an integer"),
        (lambda: ol.Hedge(3, eta=0.1, horizon=10), "at most one of eta and horizon"),
        (lambda: ol.Exp3(3, eta=float("inf")), "eta must be finite and > 0"),
        (lambda: ol.Exp3IX(3, gamma=-0.1), "gamma must be finite and >= 0"),
        (lambda: ol.Exp3IX(3, gamma=float("nan")), "gamma must be finite and >= 0"),
    ],
)
def test_bad_hyper_parameters_raise_value_error(make, words):
    with pytest.raises(ValueError, match=words):
        make()


@pytest.mark.parametrize("name", sorted(ALL))
def test_sample_rejects_a_non_generator(name):
    with pytest.raises(ValueError, match="rng"):
        ALL[name](3).sample(np.random.RandomState(0))


@pytest.mark.parametrize("name", sorted(ALL))
def test_bad_state_dict_raises_value_error_and_leaves_state_unchanged(name):
    learner = trained(name)
    before = copy.deepcopy(learner.state_dict())
    other = "Hedge" if name != "Hedge_fixed" else "AdaHedge"
    wrong = [
        ({**before, "class": other if other != type(learner).__name__ else "UCB1"},
         "state was made by"),
        ({**before, "n": 4}, "state is for n=4"),
        ({k: v for k, v in before.items() if k not in ("class", "n")} | {"class": None},
         "state was made by None"),
        ("not a dict", "state must be a dict"),
    ]
    for key, value in before.items():
        if isinstance(value, list):
            wrong.append(({**before, key: value[:-1]}, rf"state\['{key}'\] must have shape"))
            wrong.append(({**before, key: [float("nan")] * len(value)},
                          rf"state\['{key}'\] must be finite"))
        if key == "t":
            wrong.append(({**before, "t": -1}, r"state\['t'\] must be >= 0"))
    first_key = next(k for k in before if k not in ("class", "n"))
    wrong.append(({k: v for k, v in before.items() if k != first_key},
                  rf"missing keys \['{first_key}'\]"))
    for state, words in wrong:
        with pytest.raises(ValueError, match=words):
            learner.load_state_dict(state)
        assert learner.state_dict() == before
