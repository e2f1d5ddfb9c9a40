"""The Drafter protocol checked by driving a drafter, not by ``isinstance`` (a runtime-checkable
Protocol only looks at attribute names): start / propose / extend as the decoders call them,
with the shapes and values the protocol promises."""

from __future__ import annotations

import torch

from spec_adapters.core.sampling import SamplingConfig

WARM = SamplingConfig(temperature=0.8)


def check_drafter_contract(drafter, prompt: list[int], vocab_size: int, k: int = 4) -> None:
    """Assert the promises of :class:`spec_adapters.drafters.Drafter` on one drafter.

    - ``name`` is a non-empty string and ``vocab_size`` the given ``V``;
    - ``propose(k)`` returns int64 tokens ``(k,)`` in ``[0, V)`` and ``q`` ``(k, V)`` with rows
      summing to 1 and ``q[j, tokens[j]] > 0``; the same seed gives the same draft (nothing was
      committed by the first one);
    - ``extend(tokens)`` returns ``(k, V)`` logits whose warped rows are exactly the ``q`` the
      proposal was drawn from (row ``j`` given the context plus ``tokens[:j]``);
    - after ``extend``, the next proposal starts from the extended context;
    - ``start`` resets: the same prompt and tokens give the same rows again.
    """
    assert isinstance(drafter.name, str) and drafter.name
    assert drafter.vocab_size == vocab_size
    drafter.start(torch.tensor(prompt))
    tokens, q = drafter.propose(k, WARM, torch.Generator().manual_seed(0))
    assert tokens.dtype == torch.int64 and tokens.shape == (k,)
    assert int(tokens.min()) >= 0 and int(tokens.max()) < vocab_size
    assert q.shape == (k, vocab_size)
    torch.testing.assert_close(q.sum(-1).double(), torch.ones(k, dtype=torch.float64),
                               atol=1e-5, rtol=0)
    assert bool((q[torch.arange(k), tokens] > 0).all())
    again, q_again = drafter.propose(k, WARM, torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)
    torch.testing.assert_close(q_again, q)
    rows = drafter.extend(tokens)
    assert rows.shape == (k, vocab_size)
    torch.testing.assert_close(WARM.probs(rows), q, atol=1e-5, rtol=1e-5)
    _, q_next = drafter.propose(1, WARM, torch.Generator().manual_seed(1))
    nxt = drafter.extend(tokens[:1])
    torch.testing.assert_close(WARM.probs(nxt), q_next, atol=1e-5, rtol=1e-5)
    drafter.start(torch.tensor(prompt))
    torch.testing.assert_close(drafter.extend(tokens), rows, atol=1e-5, rtol=1e-5)
