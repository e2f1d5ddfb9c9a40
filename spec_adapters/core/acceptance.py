"""Acceptance probabilities of a drafter against the target (Theorems 1 and 2 of HedgeSpec).

These are the per-position quantities ``gamma`` that make HedgeSpec a full-information problem:
once the target has verified a chunk, every drafter's acceptance probability at every verified
position can be computed from its distribution there, whether or not it drafted the round.

All functions are pure torch, batched over any leading dimensions (positions x drafters), keep
the input dtype (float64 in, float64 out) and validate their input unless ``validate=False``
(a decoder validates ``p`` and ``q`` once, where they are produced). None builds a tensor of
the vocabulary's size per drafter except for dense (or, at temperature > 0, sparse) ``q``.
"""

from __future__ import annotations

import torch

from spec_adapters.core.proposal import Rows, check_distribution, target_and_draft
from spec_adapters.core.proposal.rows import broadcast_lead

__all__ = ["acceptance_probability", "greedy_tree_acceptance", "tree_acceptance"]


def acceptance_probability(
    p: torch.Tensor, q: torch.Tensor | Rows, *, validate: bool = True
) -> torch.Tensor:
    """Probability that one speculative step accepts a token drafted from ``q``.

    Theorem 1 (HedgeSpec; Leviathan et al. 2023): with ``x ~ q`` accepted with probability
    ``min(1, p(x) / q(x))``,

    .. math:: \\gamma = \\sum_x q(x) \\min(1, p(x)/q(x)) = \\sum_x \\min(p(x), q(x))
              = 1 - \\mathrm{TV}(p, q).

    Parameters
    ----------
    p : torch.Tensor
        ``(..., V)`` warped target probabilities.
    q : torch.Tensor or Rows
        ``(..., V)`` warped drafter probabilities, or a :mod:`~spec_adapters.core.proposal` form
        (point mass: ``gamma = p(d)``, one gather; sparse mixture: its support gathered plus the
        closed-form base term, one pass over ``V``); leading dimensions broadcast against
        ``p`` (e.g. ``p`` ``(K, V)`` and ``q`` ``(N, K, V)`` for ``N`` drafters).
    validate : bool, default True
        Check both inputs (see :func:`spec_adapters.core.proposal.check_distribution`).

    Returns
    -------
    torch.Tensor
        ``gamma`` with the broadcast leading shape, clamped to ``[0, 1]`` against rounding;
        dtype is the promotion of ``p`` and ``q``.

    Raises
    ------
    ValueError
        Bad probabilities, different vocabulary sizes, or leading shapes that do not broadcast.

    Notes
    -----
    Dense ``q``: O(prod(shape)) time, materialises the broadcast ``min`` once.
    """
    q = target_and_draft(p, q, validate)
    broadcast_lead(p.shape[:-1], q.lead, ("p", "q"))
    return q.to(p.device).overlap(p).clamp_(0.0, 1.0)


def _kept_mask(p: torch.Tensor, children: torch.Tensor, mask: torch.Tensor | None, validate: bool):
    if validate:
        check_distribution(p, "p")
    if (
        not isinstance(children, torch.Tensor)
        or children.is_floating_point()
        or children.dtype == torch.bool
    ):
        raise ValueError("children must be an integer tensor (..., C) of token ids")
    if children.dim() < 1:
        raise ValueError(f"children must have shape (..., C), got {tuple(children.shape)}")
    if mask is None:
        mask = torch.ones(children.shape, dtype=torch.bool, device=children.device)
    elif not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ValueError("mask must be a bool tensor shaped like children")
    elif mask.shape != children.shape:
        raise ValueError(
            f"mask {tuple(mask.shape)} must have the shape of children {tuple(children.shape)}"
        )
    V = p.shape[-1]
    mask = mask.to(children.device)
    kept = children[mask]
    if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= V):
        raise ValueError(f"children has kept token ids outside [0, {V})")
    lead = broadcast_lead(p.shape[:-1], children.shape[:-1], ("p", "children"))
    return lead, children.to(p.device), mask.to(p.device)


def tree_acceptance(
    p: torch.Tensor,
    children: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Probability that EAGLE's tree sampling accepts one of a node's children (Theorem 2).

    Under recursive rejection sampling over siblings (see
    :func:`spec_adapters.core.sampling.tree_accept`), child ``c_1`` is accepted with probability
    ``p(c_1)``; if not, ``c_2`` with ``p(c_2) / (1 - p(c_1))``; and so on. Telescoping,

    .. math:: \\gamma = P(\\text{some child accepted}) = \\sum_{c \\in S} p(c),

    the target mass of the set ``S`` of distinct child tokens the drafter keeps at the node.

    Parameters
    ----------
    p : torch.Tensor
        ``(..., V)`` target probabilities at the node (after its root-to-node path).
    children : torch.LongTensor
        ``(..., C)`` child tokens the drafter keeps there; leading dims broadcast against ``p``
        (e.g. ``p`` ``(K, V)``, ``children`` ``(N, K, C)``). Repeated tokens count once.
    mask : torch.BoolTensor, optional
        Shaped like ``children``; ``False`` marks padding (for nodes with fewer than ``C``
        children; padded entries may hold any id, e.g. -1). Default: all kept.
    validate : bool, default True
        Check ``p``.

    Returns
    -------
    torch.Tensor
        ``gamma`` in ``[0, 1]``, broadcast leading shape, ``p``'s dtype.

    Notes
    -----
    A gather of ``p`` at the children (sorted to count repeats once): ``O(C log C)`` per node,
    nothing of the vocabulary's size is built.
    """
    lead, children, mask = _kept_mask(p, children, mask, validate)
    C = children.shape[-1]
    # each distinct kept token once: sort (padding as -1 first), keep the first of each run
    key = torch.where(mask.expand(*lead, C), children.expand(*lead, C), -1).sort(-1).values
    first = torch.ones_like(key, dtype=torch.bool)
    first[..., 1:] = key[..., 1:] != key[..., :-1]
    px = p.expand(*lead, p.shape[-1]).gather(-1, key.clamp_min(0))
    return (px * (first & (key >= 0))).sum(-1).clamp_(0.0, 1.0)


def greedy_tree_acceptance(
    p: torch.Tensor,
    children: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Greedy form of Theorem 2: 1 if the target's argmax is a kept child, else 0.

    With a greedy (one-hot) target, tree sampling accepts exactly the child equal to
    ``argmax p``; this equals :func:`tree_acceptance` applied to ``one_hot(argmax p)``.

    Parameters
    ----------
    p, children, mask, validate
        As in :func:`tree_acceptance`; ``p`` may be the raw (unwarped) target distribution.
        Ties in ``argmax`` resolve to the first index, as in ``SamplingConfig(temperature=0)``.

    Returns
    -------
    torch.Tensor
        0.0 / 1.0 in ``p``'s dtype, broadcast leading shape.
    """
    lead, children, mask = _kept_mask(p, children, mask, validate)
    top = p.argmax(-1, keepdim=True).expand(*lead, 1)
    hit = (children.expand(*lead, children.shape[-1]) == top) & mask.expand(*lead, mask.shape[-1])
    return hit.any(-1).to(p.dtype)
