"""The exponential race (spec_adapters.core.race): plain decoding's draw read ahead, and drafts
raced against it, checked against torch.multinomial and against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from spec_adapters.core.proposal import Base, Dense, PointMass, Sparse
from spec_adapters.core.race import PlainNoise, race

torch.set_num_threads(1)


def _row(rng: np.random.Generator, V: int, dtype=torch.float32, zeros: bool = False):
    x = rng.gamma(0.3, size=V)
    if zeros:
        x[rng.random(V) < 0.5] = 0.0
        x[0] += 0.1
    return torch.tensor(x / x.sum(), dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sample_is_torch_multinomial_bit_for_bit_and_moves_the_generator_as_it_does(dtype):
    """PlainNoise.sample draws the token and leaves the generator where multinomial would,
    also when noise was read ahead (by drafting) before each draw."""
    rng = np.random.default_rng(0)
    V = 300
    ours, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    noise = PlainNoise(ours, V, dtype)
    for step in range(60):
        noise.sync()
        for j in range(step % 4):  # drafting reads 0..3 positions ahead
            noise.at(j)
        p = _row(rng, V, dtype, zeros=step % 2 == 0)
        assert noise.sample(p) == int(torch.multinomial(p, 1, generator=theirs))
        assert torch.equal(ours.get_state(), theirs.get_state())
    assert torch.equal(torch.rand(3, generator=ours), torch.rand(3, generator=theirs))


def test_noise_read_ahead_is_the_noise_each_position_is_drawn_with():
    """E_j read at round start is the noise the j-th sample uses; spent holds it after."""
    rng = np.random.default_rng(1)
    g = torch.Generator().manual_seed(3)
    noise = PlainNoise(g, 50)
    noise.sync()
    ahead = [noise.at(j).clone() for j in range(3)]
    for _ in range(3):
        noise.sample(_row(rng, 50))
    assert all(torch.equal(a, s) for a, s in zip(ahead, noise.spent, strict=True))
    noise.sync()
    assert noise.spent == []


def test_a_foreign_draw_between_rounds_drops_the_noise_read_ahead():
    """The request's generator is the caller's: if something else draws from it between
    rounds, the next sample is still multinomial's on its state then."""
    rng = np.random.default_rng(2)
    g, ref = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    noise = PlainNoise(g, 40)
    noise.sync()
    noise.at(2)
    torch.rand(5, generator=g)
    torch.rand(5, generator=ref)
    noise.sync()
    p = _row(rng, 40)
    assert noise.sample(p) == int(torch.multinomial(p, 1, generator=ref))
    assert torch.equal(g.get_state(), ref.get_state())


def test_sample_refuses_a_row_of_another_shape_or_dtype():
    noise = PlainNoise(torch.Generator().manual_seed(0), 10, torch.float32)
    with pytest.raises(ValueError, match=r"\(10,\) torch.float32"):
        noise.sample(torch.full((11,), 1 / 11))
    with pytest.raises(ValueError, match="float32"):
        noise.sample(torch.full((10,), 0.1, dtype=torch.float64))


def test_race_winners_are_distributed_as_q_for_every_form():
    """Against fresh exponentials the race draws from q (chi-square), for a dense row and a
    sparse mixture; a point mass is its token; a zero row abstains (-1)."""
    rng = np.random.default_rng(4)
    g = torch.Generator().manual_seed(11)
    V, n = 12, 20_000
    dense = Dense(_row(rng, V, torch.float64).view(1, V))
    base = Base(_row(rng, V, torch.float64))
    support = torch.tensor([[2, 7, -1]])
    values = torch.tensor([[0.5, 0.2, 0.0]], dtype=torch.float64)
    lam = torch.tensor([0.3 / float(1 - base.probs[2] - base.probs[7])], dtype=torch.float64)
    sparse = Sparse(support, values, lam, base)
    for q in (dense, sparse):
        noise = torch.empty(n, V, dtype=torch.float64).exponential_(generator=g)
        winners = torch.stack([race(q, noise[t:t + 1]) for t in range(n)]).view(-1)
        counts = np.bincount(winners.numpy(), minlength=V)
        expected = q.dense()[0].numpy() * n
        on = expected > 0
        assert counts[~on].sum() == 0
        assert stats.chisquare(counts[on], expected[on]).pvalue > 1e-3
    e = torch.ones(2, V)
    assert race(PointMass(torch.tensor([4, -1]), V), e).tolist() == [4, -1]
    zero = Dense(torch.zeros(1, V, dtype=torch.float64))
    assert race(zero, e[:1]).tolist() == [-1]


def test_race_coupling_keeps_a_draft_with_the_closed_form_probability():
    """P(argmax p/E = argmax q/E) = sum_x 1 / sum_y max(p_y/p_x, q_y/q_x) (module docstring),
    above p(argmax q), the probability an argmax draft is kept: Monte Carlo within 5 sigma."""
    rng = np.random.default_rng(6)
    g = torch.Generator().manual_seed(2)
    V, n = 8, 40_000
    for _ in range(3):
        p, q = _row(rng, V, torch.float64), _row(rng, V, torch.float64)
        ratio = torch.maximum(p.view(1, V) / p.view(V, 1), q.view(1, V) / q.view(V, 1))
        closed = float((1 / ratio.sum(1)).sum())
        noise = torch.empty(n, V, dtype=torch.float64).exponential_(generator=g)
        same = (race(Dense(p.expand(n, V)), noise) == race(Dense(q.expand(n, V)), noise))
        freq = float(same.double().mean())
        assert abs(freq - closed) < 5 * np.sqrt(closed * (1 - closed) / n)
        assert closed > float(p[q.argmax()])
    p = _row(rng, V, torch.float64)  # q = p: always the same token
    ratio = p.view(1, V) / p.view(V, 1)
    assert float((1 / ratio.sum(1)).sum()) == pytest.approx(1.0)
