"""benchmarks/seeded_acceptance.py: the race coupling's closed form against Monte Carlo and its
bounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.benchmarks.scripts import load_script

sa = load_script("seeded_acceptance")


def _row(rng: np.random.Generator, V: int, zeros: bool = False) -> torch.Tensor:
    x = rng.gamma(0.4, size=V)
    if zeros:
        x[rng.random(V) < 0.4] = 0.0
        x[0] += 0.1
    return torch.tensor(x / x.sum(), dtype=torch.float64)


@pytest.mark.parametrize("zeros", [False, True])
def test_race_coupling_is_the_frequency_two_races_on_the_same_noise_agree(zeros):
    """argmax p/E = argmax q/E over 40,000 draws of E ~ Exp(1)^V, within 5 sigma of the
    closed form; rows with zeros (top-p cuts, n-gram supports) and ties in p/q included."""
    rng = np.random.default_rng(3)
    g = torch.Generator().manual_seed(4)
    V, n = 9, 40_000
    for trial in range(4):
        p, q = _row(rng, V, zeros), _row(rng, V, zeros)
        if trial == 3:  # ties in the ratio p/q: q proportional to p on half the tokens
            q[: V // 2] = p[: V // 2] * 0.5
            q = q / q.sum()
        e = torch.empty(n, V, dtype=torch.float64).exponential_(generator=g)
        freq = float(((p / e).argmax(-1) == (q / e).argmax(-1)).double().mean())
        closed = sa.race_coupling(p, q)
        assert abs(freq - closed) < 5 * np.sqrt(closed * (1 - closed) / n) + 1e-9, trial


def test_race_coupling_bounds():
    """1 for q = p; never above sum min(p, q) (no coupling keeps more); 0 for disjoint rows."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        p, q = _row(rng, 30, zeros=True), _row(rng, 30, zeros=True)
        argmax, race, best = sa.position_acceptance(p, q)
        assert race <= best + 1e-12 and argmax <= best + 1e-12
        assert sa.race_coupling(p, p) == pytest.approx(1.0)
    a = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)
    assert sa.race_coupling(a, a.flip(0)) == 0.0
