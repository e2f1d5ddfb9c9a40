"""HedgeSpec converges to the right drafter within a few rounds; bandits are slower.

Pool: an unrelated model, a fixed unigram drafter, an exact copy of the target (gamma = 1 at
every position, so its EAL loss is 0) and a noisy copy. Full information sees every drafter's
loss each round; EXP3Spec / UCBSpec only the chosen drafter's accepted length.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spec_adapters.decoding.chain import HedgeSpecDecoder
from tests.spec_adapters.single_helpers import UnigramDrafter, pool

COPY = 2


def _rounds_to(weights, threshold=0.9):
    """First round from which the copy's weight stays >= threshold (None if never)."""
    w = np.array(weights)[:, COPY]
    for t in range(len(w)):
        if (w[t:] >= threshold).all():
            return t
    return None


@pytest.fixture(scope="module")
def models():
    target, drafters = pool(vocab_size=96)
    drafters = [drafters[0], UnigramDrafter(torch.linspace(0, 3, 96)), drafters[2], drafters[1]]
    return target, drafters


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_hedgespec_weight_on_the_target_copy_goes_to_one(models, temperature):
    target, drafters = models
    ids = torch.tensor([[1, 50, 51, 52]])
    rows = {}
    for policy in ("normalhedge", "hedge", "exp3spec", "ucbspec"):
        reached, share = [], []
        for seed in range(3):
            dec = HedgeSpecDecoder(target, drafters, draft_length=4, policy=policy)
            out = dec.generate(ids, max_new_tokens=80, temperature=temperature, seed=seed)
            reached.append(_rounds_to(out.stats["weights"]))
            chosen = np.array(out.stats["chosen"])
            share.append(float((chosen == COPY).mean()))
        rows[policy] = (reached, share)
    print(f"\ntemperature {temperature}: rounds until the copy's weight stays >= 0.9 "
          "(3 seeds), share of rounds choosing it")
    for policy, (reached, share) in rows.items():
        print(f"  {policy:12s} {reached!s:22s} {np.mean(share):.2f}")
    reached, share = rows["normalhedge"]  # the default: parameter-free, fast
    assert all(r is not None and r <= 8 for r in reached), reached
    assert np.mean(share) >= 0.85, share
    # full information beats bandit feedback at picking the copy (averaged over seeds)
    assert np.mean(share) > max(np.mean(rows[b][1]) for b in ("exp3spec", "ucbspec"))
