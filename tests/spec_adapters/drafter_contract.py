"""The Drafter protocol checked by driving a drafter, not by ``isinstance`` (a runtime-checkable
Protocol only looks at attribute names): start / propose / extend as the decoders call them,
with the shapes and values the protocol promises."""

from __future__ import annotations

import torch

from spec_adapters.core.proposal import PointMass, warp
from spec_adapters.core.sampling import SamplingConfig

WARM = SamplingConfig(temperature=0.8)
GREEDY = SamplingConfig(temperature=0.0)


def check_drafter_contract(drafter, prompt: list[int], vocab_size: int, k: int = 4) -> None:
    """Assert the promises of :class:`spec_adapters.drafters.Drafter` on one drafter.

    - ``name`` is a non-empty string and ``vocab_size`` the given ``V``;
    - ``propose(k)`` returns int64 tokens ``(j,)``, ``1 <= j <= k`` (the prompts used here
      always match), in ``[0, V)`` and rows ``q`` (``j`` rows) summing to 1 with
      ``q[i, tokens[i]] > 0``; the same seed gives the same draft (nothing was committed);
    - ``extend(tokens)`` returns predictions whose warped rows are exactly the ``q`` the
      proposal was drawn from (row ``i`` given the context plus ``tokens[:i]``);
    - after ``extend``, the next proposal starts from the extended context;
    - ``start`` resets: the same prompt and tokens give the same rows again;
    - greedy: ``q`` is a point mass at the tokens, each the argmax of the temperature-1 rows.
    """
    assert isinstance(drafter.name, str) and drafter.name
    assert drafter.vocab_size == vocab_size
    drafter.start(torch.tensor(prompt))
    tokens, q = drafter.propose(k, WARM, torch.Generator().manual_seed(0))
    j = tokens.numel()
    assert tokens.dtype == torch.int64 and tokens.shape == (j,) and 1 <= j <= k
    assert int(tokens.min()) >= 0 and int(tokens.max()) < vocab_size
    dense = q.dense()
    assert len(q) == j and dense.shape == (j, vocab_size)
    torch.testing.assert_close(dense.sum(-1).double(), torch.ones(j, dtype=torch.float64),
                               atol=1e-5, rtol=0)
    assert bool((q.prob(tokens) > 0).all())
    torch.testing.assert_close(q.prob(tokens), dense[torch.arange(j), tokens])
    again, q_again = drafter.propose(k, WARM, torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)
    torch.testing.assert_close(q_again.dense(), dense)
    rows = drafter.extend(tokens)
    torch.testing.assert_close(warp(rows, WARM).dense(), dense, atol=1e-5, rtol=1e-5)
    _, q_next = drafter.propose(1, WARM, torch.Generator().manual_seed(1))
    nxt = drafter.extend(tokens[:1])
    torch.testing.assert_close(warp(nxt, WARM).dense()[:len(q_next)], q_next.dense(),
                               atol=1e-5, rtol=1e-5)
    drafter.start(torch.tensor(prompt))
    torch.testing.assert_close(warp(drafter.extend(tokens), WARM).dense(), dense,
                               atol=1e-5, rtol=1e-5)
    drafter.start(torch.tensor(prompt))
    greedy, q_greedy = drafter.propose(k, GREEDY, None)
    assert isinstance(q_greedy, PointMass) and torch.equal(q_greedy.tokens, greedy)
    rows = warp(drafter.extend(greedy), SamplingConfig(temperature=1.0)).dense()
    assert torch.equal(rows.argmax(-1), greedy)
