"""Every drafter's acceptance statistics at verified positions, from the distributions.

For each verified position ``j`` and drafter ``i``: ``gamma[i, j]``, the probability that the
drafter would have had its token at ``j`` accepted given the verified prefix (Theorem 1:
``sum_x min(p_j(x), q_ij(x))``), and ``rho[i, j] = min(1, q_ij(x_j) / p_j(x_j))`` for the
realized token ``x_j``. The round book (:class:`spec_adapters.selection.book.RoundBook`)
turns them into round windows; under greedy decoding the numpy
:func:`spec_adapters.selection.book.greedy_stats` needs no distribution at all.
"""

from __future__ import annotations

import torch

from spec_adapters.core.proposal import PointMass, Rows, as_rows, stack_rows

__all__ = ["position_stats"]


def position_stats(p: torch.Tensor, q, tokens: torch.LongTensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gamma, rho and abstentions of ``N`` drafters at ``m`` verified positions.

    Parameters
    ----------
    p : torch.Tensor
        ``(m, V)`` warped target distributions at the positions.
    q : torch.Tensor, Rows or sequence of Rows
        The drafters' warped distributions given the same verified prefixes: ``(N, m, V)``
        probabilities, one stacked :mod:`~spec_adapters.core.proposal` form with lead
        ``(N, m)``, or one form per drafter (lead ``(m,)``, forms may differ between drafters:
        the drafters of each form are stacked and evaluated together).
    tokens : torch.LongTensor
        ``(m,)`` realized (verified) tokens.

    Returns
    -------
    gamma, rho : torch.Tensor
        ``(N, m)`` each, float64: ``gamma = sum_x min(p, q)`` (Theorem 1, via
        :func:`spec_adapters.core.acceptance.acceptance_probability`) and
        ``rho = min(1, q(x) / p(x))`` (:func:`spec_adapters.core.estimators.realized_ratio`).
    proposes : torch.Tensor
        ``(N, m)`` bool: ``False`` where the drafter abstains (a zero row: it would have
        drafted nothing from there; its ``gamma`` is 0).

    Nothing is validated here: ``p`` and ``q`` are checked where they are produced. Point
    masses cost two gathers for all drafters; under greedy decoding :func:`greedy_stats` needs
    not even those.
    """
    from spec_adapters.core.acceptance import acceptance_probability
    from spec_adapters.core.estimators import realized_ratio

    tokens = tokens.to(p.device)
    if isinstance(q, torch.Tensor | Rows):
        q = as_rows(q)
        gamma = acceptance_probability(p, q, validate=False)  # p broadcasts over drafters
        rho = realized_ratio(p, q, tokens, validate=False)
        proposes = q.dense().sum(-1) > 0 if not isinstance(q, PointMass) else q.tokens >= 0
        return gamma.double(), rho.double(), proposes
    q = [as_rows(rows) for rows in q]
    if q and all(type(rows) is PointMass for rows in q):
        return _point_stats(p, torch.stack([rows.tokens for rows in q]), tokens)
    gamma = torch.zeros(len(q), p.shape[0], dtype=torch.float64, device=p.device)
    rho = torch.zeros_like(gamma)
    kinds: dict[type, list[int]] = {}
    for i, rows in enumerate(q):
        kinds.setdefault(type(rows), []).append(i)
    for members in kinds.values():
        stacked = stack_rows([q[i] for i in members])
        idx = torch.tensor(members, device=p.device)
        gamma[idx] = acceptance_probability(p, stacked, validate=False).double()
        rho[idx] = realized_ratio(p, stacked, tokens, validate=False).double()
    proposes = torch.stack([rows.argmax().to(p.device) >= 0 for rows in q])
    return gamma, rho, proposes


def _point_stats(p: torch.Tensor, drafts: torch.LongTensor, tokens: torch.LongTensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`position_stats` of point masses ``drafts`` ``(N, m)`` (``-1``: abstained) in a
    few tensor operations: ``gamma = p(d)`` and ``rho = min(1, 1{x = d} / p(x))``, i.e.
    ``1{x = d}`` where ``p(x) > 0`` and 1 on the probability-zero event ``p(x) = 0`` (as
    :func:`~spec_adapters.core.estimators.realized_ratio`)."""
    if drafts.shape[1] != p.shape[0] or tokens.shape != (p.shape[0],):
        raise ValueError(f"p {tuple(p.shape)}, drafts {tuple(drafts.shape)} and tokens "
                         f"{tuple(tokens.shape)} do not broadcast")
    drafts = drafts.to(p.device)
    at = torch.arange(p.shape[0], device=p.device)
    proposes = drafts >= 0
    gamma = torch.where(proposes, p[at, drafts.clamp_min(0)].double(), 0.0)
    rho = torch.where((drafts == tokens) | (p[at, tokens] == 0), 1.0, 0.0).double()
    return gamma, rho, proposes
