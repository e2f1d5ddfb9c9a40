"""The coupled rule for point-mass drafts (a seeded request's verification), written once and
free of torch so that every engine can run it on its own rows (llama.cpp: numpy).

At position ``k = 0, 1, ...`` of a round, the token plain decoding would emit there is drawn
with the request's own noise, ``t_k = draw(k)``; draft ``d_k`` is kept iff ``t_k = d_k``. The
first ``t_k != d_k`` is the round's next token; with every draft kept, ``t_K`` is the bonus
token. The emitted tokens are plain decoding's for the same noise whatever was drafted, and
``P(keep d_k) = p_k(d_k)``, the point-mass speculative rule's acceptance
(:func:`spec_adapters.core.sampling.coupled_accept` states the law; ``python -m proofs_check
--only seeded`` checks it by enumeration).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["coupled_walk"]


def coupled_walk(draft: Sequence[int], draw: Callable[[int], int]) -> tuple[int, int]:
    """``(n_accepted, next_token)`` of the coupled rule over ``draft``; ``draw(k)`` is the
    request's own draw for the round's ``k``-th position, called once per position emitted
    and in position order (so the request's generator ends where plain decoding's would)."""
    for k, x in enumerate(draft):
        token = int(draw(k))
        if token != int(x):
            return k, token
    return len(draft), int(draw(len(draft)))
