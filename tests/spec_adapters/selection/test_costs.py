"""The round costs of one request at a time (StepCosts: interpolated, averaged, bad input
refused unchanged, time per token) and the batch step-time model (the fit tells a row from a
drafted token, prices a draft like a row where it cannot, splits a step exactly among the
batch; speculation switches off at load)."""

from __future__ import annotations

import numpy as np
import pytest

from spec_adapters.selection.costs import StepCosts, StepTimeModel, TokenRate
from spec_adapters.selection.experts import expert_losses


def _fitted(a: float, br: float, bd: float | None = None, seed: int = 0, c: float = 0.0,
            **options) -> StepTimeModel:
    """A model fed 200 steps of a true ``a + br R + bd D + c [D > 0]`` (``bd`` None: nobody
    drafts)."""
    model, rng = StepTimeModel(**options), np.random.default_rng(seed)
    for _ in range(200):
        rows = int(rng.integers(1, 17))
        drafted = 0 if bd is None else int(rng.integers(0, 4 * rows + 1))
        model.observe(rows, drafted, a + br * rows + (bd or 0.0) * drafted + c * (drafted > 0))
    return model


def test_step_model_tells_a_row_from_a_drafted_token_when_the_steps_do():
    np.testing.assert_allclose(_fitted(0.02, 0.003, 0.001).coefficients(),
                               (0.02, 0.003, 0.001, 0.0), rtol=1e-2, atol=1e-5)
    np.testing.assert_allclose(_fitted(0.01, 0.0005, 0.002).coefficients(),
                               (0.01, 0.0005, 0.002, 0.0), rtol=1e-2, atol=1e-5)


def test_step_model_finds_the_price_of_speculating_at_all():
    """c [D > 0]: a step where any row drafted costs c more, whatever it drafted."""
    model = _fitted(0.02, 0.003, 0.001, c=0.008)
    np.testing.assert_allclose(model.coefficients(), (0.02, 0.003, 0.001, 0.008), rtol=1e-2)
    costs = model.expert_costs(4, 2)  # the request's share: c / B once it drafts
    np.testing.assert_allclose(np.diff(costs), [0.001 + 0.002, 0.001], rtol=2e-2)
    blind = _fitted(0.02, 0.003, 0.001, c=0.008, speculation_term=False)
    assert blind.coefficients()[3] == 0.0  # the ablation: no term, its price spread elsewhere


def test_a_drafted_token_is_priced_like_a_row_until_the_steps_show_otherwise():
    a, br, bd, c = _fitted(0.02, 0.003).coefficients()  # D = 0 in every step
    np.testing.assert_allclose((a, br, c), (0.02, 0.003, 0.0), rtol=1e-6, atol=1e-9)
    assert bd == pytest.approx(br, rel=1e-6)
    one = StepTimeModel().observe(4, 0, 0.05)  # one kind of step: only T(4, 0) is known
    assert one(4, 0) == pytest.approx(0.05, rel=1e-6)
    assert StepTimeModel().coefficients() == (0.0, 0.0, 0.0, 0.0)


def test_a_fixed_step_model_ignores_the_steps_and_bad_input_is_named():
    model = StepTimeModel(fixed=(0.01, 0.002, 0.5)).observe(3, 2, 9.0)
    assert model.coefficients() == (0.01, 0.002, 0.5, 0.0) and model.draft_seconds() == 0.5
    # a drafted token is priced no lower than a row (the fitted split is kept for the costs)
    cheap = StepTimeModel(fixed=(0.01, 0.004, 0.001))
    assert cheap.draft_seconds() == 0.004
    np.testing.assert_allclose(cheap.expert_costs(1, 2), [0.014, 0.015, 0.016])
    with pytest.raises(ValueError, match="need rows >= 1, drafted >= 0"):
        StepTimeModel().observe(0, 0, 0.1)
    with pytest.raises(ValueError, match="fixed must be three or four finite seconds >= 0"):
        StepTimeModel(fixed=(0.1, -1.0, 0.0))


def test_expert_costs_split_the_whole_step_among_the_batch():
    model = _fitted(0.02, 0.003, 0.001)
    np.testing.assert_allclose(model.expert_costs(1, 4), model(1, np.arange(5)), rtol=1e-6)
    k = np.random.default_rng(0).integers(0, 5, size=16)
    shares = model.expert_costs(16, 4)[k]
    np.testing.assert_allclose(shares.sum(), model(16, np.sum(k)), rtol=1e-9)  # the step
    with pytest.raises(ValueError, match="n_requests must be an integer >= 1"):
        model.expert_costs(0, 4)


@pytest.mark.parametrize(("batch", "speculates"), [(1, True), (16, False)])
def test_speculation_switches_off_where_drafted_tokens_cost_the_batch(batch, speculates):
    costs = StepTimeModel(fixed=(0.02, 0.002, 0.002)).expert_costs(batch, 4)
    gamma = np.full((1, 4), 0.5)
    al = 1 + np.concatenate([[0.0], np.cumsum(0.5 ** np.arange(1, 5))])  # by hand
    ratio = costs / al  # seconds per token of drafting k, k = 0..4
    assert (ratio[1:].min() < ratio[0]) == speculates
    losses = expert_losses(gamma, costs=costs[None, :], loss="time", tau=costs[0])
    assert (int(np.argmin(losses)) > 0) == speculates


def test_step_costs_interpolate_and_average():
    c = StepCosts(2, 3, alpha=0.5)
    c.observe_target(1, 1.0).observe_target(4, 4.0)
    np.testing.assert_allclose(c.target_curve(), [1.0, 2.0, 3.0, 4.0])
    c.observe_target(1, 2.0)  # EMA with alpha 0.5
    assert c.target_curve()[0] == pytest.approx(1.5)
    c.observe_draft(0, 2, 0.2)  # 0.1 s per token; drafter 1 unmeasured -> the mean
    c.observe_overhead(0.05)
    rc = c.round_costs()
    np.testing.assert_allclose(rc[0], c.target_curve() + 0.1 * np.arange(4) + 0.05)
    np.testing.assert_allclose(rc[1], rc[0])
    assert c.state_dict()["per_token"] == [pytest.approx(0.1), None]


@pytest.mark.parametrize(("call", "match"), [
    (lambda c: c.observe_target(0, 1.0), "n_tokens"),
    (lambda c: c.observe_target(5, 1.0), "n_tokens"),
    (lambda c: c.observe_target(1, float("nan")), "seconds"),
    (lambda c: c.observe_draft(2, 1, 1.0), "drafter"),
    (lambda c: c.observe_draft(0, 0, 1.0), "k must"),
    (lambda c: c.observe_overhead(-1.0), "seconds"),
])
def test_step_costs_reject_bad_observations_unchanged(call, match):
    c = StepCosts(2, 3)
    c.observe_target(1, 1.0)
    before = c.state_dict()
    with pytest.raises(ValueError, match=match):
        call(c)
    assert c.state_dict() == before


def test_time_per_token_accumulates_rounds():
    c = StepCosts(1, 2)
    assert c.time_per_token is None
    c.observe_round(0.3, 2).observe_round(0.1, 2)
    assert c.time_per_token == pytest.approx(0.1)
    with pytest.raises(ValueError, match="tokens must be an integer"):
        c.observe_round(0.1, -1)
    assert c.state_dict()["tokens"] == 4


def test_a_forgetting_rate_weighs_seconds_and_tokens_alike_from_the_first_step():
    r = TokenRate(alpha=0.2)
    assert r.value is None
    assert r.observe(0.3, 2).value == pytest.approx(0.15)  # no start-up bias
    r.observe(0.1, 2)
    assert r.value == pytest.approx((0.8 * 0.3 + 0.1) / (0.8 * 2 + 2))
    for _ in range(60):  # the old rate is forgotten
        r.observe(0.02, 1)
    assert r.value == pytest.approx(0.02, rel=1e-4)


@pytest.mark.parametrize(("args", "match"), [
    ((float("nan"), 1), "seconds must be finite"), ((0.1, 1.5), "tokens must be an integer")])
def test_a_token_rate_refuses_bad_observations_and_keeps_its_value(args, match):
    r = TokenRate(alpha=0.2).observe(0.2, 2)
    with pytest.raises(ValueError, match=match):
        r.observe(*args)
    assert r.value == pytest.approx(0.1)
    with pytest.raises(ValueError, match="alpha must be None or in"):
        TokenRate(alpha=0.0)
