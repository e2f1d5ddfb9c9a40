"""Specialists as low-rank deltas of their generalist, so a pool's evaluation reads one decoder
layer instead of one per head.

A specialist fine-tuned from the generalist with ``TrainConfig.midlayer_only`` differs from it
in the decoder layer only, and there by a small update (6-8 % of the weights' norm for the
shipped heads). :func:`lowrank_specialists` rewrites every linear layer of the decoder layer
of every head of a family as

    y = x W_g^T + (x A^T) B^T,        W_s - W_g ~= B A  (rank r, truncated SVD)

with ``W_g`` the generalist's weight (the generalist itself gets ``A = B = 0``). Every member
then holds the same ``W_g``: the stacked evaluation of :class:`~.pool.HeadPool` maps a weight
every member holds identically unbatched, so its matmul runs once over all heads' rows and
``W_g`` is read once; only the factors (``r (in + out)`` numbers per layer instead of
``in * out``) are read per head. On a CPU, where the evaluation costs the weights' memory
traffic, that is most of the cost of every head but the first.

The rewritten specialist is an approximation of the specialist (its delta's best rank-``r``
approximation in the Frobenius norm, Eckart-Young); it is what drafts *and* what is evaluated,
so the counterfactual gamma of a head is still that of the drafter that would run. The target
verifies every draft: the output is unchanged whatever the rank. ``rank >= min(in, out)``
keeps the delta whole (the specialist exactly, up to rounding).

This is a runtime form: it is built from loaded heads (:func:`~.shipped.load_shipped`) and is
not saved; save or export the heads it was made from.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as fn
from torch import nn

from .head import EagleHead

__all__ = ["DeltaLinear", "lowrank_specialists"]

# the decoder layer's linear layers (the rest of EagleHead.MIDLAYER are norms)
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class DeltaLinear(nn.Module):
    """``y = x W^T + (x A^T) B^T``: a shared weight ``W (out, in)`` plus a rank-``r`` delta
    ``B (out, r) A (r, in)``."""

    def __init__(self, weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.delta_a = nn.Parameter(a, requires_grad=False)
        self.delta_b = nn.Parameter(b, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fn.linear(x, self.weight) + fn.linear(fn.linear(x, self.delta_a), self.delta_b)


def _factors(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A, B)`` with ``B A`` the best rank-``rank`` approximation of ``delta`` (float32 SVD,
    the singular values split evenly between the factors), of rank ``min(rank, in, out)``:
    the same for every member of a family (one architecture), and never more than the delta
    has."""
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(rank, s.numel())
    root = s[:r].sqrt()
    a, b = root[:, None] * vh[:r], u[:, :r] * root[None, :]
    return a.to(delta.dtype), b.to(delta.dtype)


def lowrank_specialists(heads: dict[str, EagleHead], base: str, rank: int
                        ) -> dict[str, EagleHead]:
    """Every head of ``heads`` with its decoder layer's linear layers as ``base``'s weight plus
    a rank-``rank`` delta (see the module docstring); new heads, bound to the same target, in
    the same dtype, the inputs untouched.

    Parameters
    ----------
    heads : name -> head; ``heads[base]`` is the generalist, every other head a specialist
        fine-tuned from it (same architecture, same ``fc``, ``norm``, ``lm_head`` and draft
        vocabulary).
    base : the generalist's name.
    rank : ``>= 1``.

    Raises
    ------
    ValueError
        ``rank < 1``; ``base`` missing; a head whose architecture, draft vocabulary or weights
        outside the decoder layer differ from the base's (named).
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
    if base not in heads:
        raise ValueError(f"the base head {base!r} is not among the heads {sorted(heads)}")
    general = heads[base]
    shared = {k: v for k, v in general.state_dict().items() if not EagleHead.in_midlayer(k)}
    out = {}
    for name, head in heads.items():
        if head.config.hidden_size != general.config.hidden_size or \
                head.config.intermediate_size != general.config.intermediate_size:
            raise ValueError(f"head {name!r} has another architecture than {base!r}")
        state = head.state_dict()
        if any(k not in state or not torch.equal(state[k], v) for k, v in shared.items()):
            raise ValueError(f"head {name!r} is not a specialist of {base!r}: its weights "
                             "outside the decoder layer (fc, norm, lm_head, d2t) differ; "
                             f"fine-tune it from {base!r} with midlayer_only")
        embed = head.embed_weight  # the target's table: shared, not copied
        twin = copy.deepcopy(head, memo={} if embed is None else {id(embed): embed})
        for layer in LINEARS:
            w_g = getattr(general, layer).weight.detach()
            delta = getattr(head, layer).weight.detach() - w_g
            setattr(twin, layer, DeltaLinear(w_g, *_factors(delta, rank)))
        out[name] = twin
    return out
