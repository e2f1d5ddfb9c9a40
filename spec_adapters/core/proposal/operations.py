"""What the decoders do with any form: read a tensor as rows, warp a prediction, draw a
token, join rows along positions or drafters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from spec_adapters.core.proposal.dense import Dense
from spec_adapters.core.proposal.point import PointMass
from spec_adapters.core.proposal.rows import Rows, check_distribution, pad_last
from spec_adapters.core.proposal.sparse import Base, Sparse

if TYPE_CHECKING:
    from spec_adapters.core.warping import SamplingConfig

__all__ = ["as_rows", "cat_rows", "draw", "stack_rows", "target_and_draft", "warp"]


def as_rows(q) -> Rows:
    """``q`` as :class:`Rows`: a dense probability tensor becomes :class:`Dense`."""
    if isinstance(q, Rows):
        return q
    if isinstance(q, torch.Tensor):
        return Dense(q)
    raise ValueError(f"q must be a Rows form or a tensor of probabilities, got "
                     f"{type(q).__name__}")


def target_and_draft(p: torch.Tensor, q, validate: bool = True) -> Rows:
    """``q`` as :class:`Rows`, checked against the dense target rows ``p`` (the shared input
    check of gamma and rho): with ``validate``, both are probability vectors; always, they
    share the vocabulary dimension (``ValueError`` otherwise)."""
    q = as_rows(q)
    if validate:
        check_distribution(p, "p")
        q.check("q")
    if p.shape[-1] != q.vocab_size:
        raise ValueError(
            f"p and q must share the vocabulary dimension, got {p.shape[-1]} and {q.vocab_size}"
        )
    return q


def warp(pred, sampling: SamplingConfig) -> Rows:
    """Apply ``sampling`` to a drafter's prediction.

    Parameters
    ----------
    pred : torch.Tensor or Rows
        Logits ``(..., V)`` (a model drafter), or an unwarped form: :class:`PointMass` (warping
        keeps it), :class:`Sparse` (the mixture at temperature 1), :class:`Dense`
        (probabilities).
    sampling : SamplingConfig

    Returns
    -------
    Rows
        Greedy: the :class:`PointMass` at the argmax (first index on ties, as
        :meth:`SamplingConfig.probs`). Otherwise logits and dense rows give :class:`Dense`
        ``sampling.probs``; a sparse mixture stays :class:`Sparse` under temperature alone
        (exact closed form) and becomes dense under top-k / top-p.
    """
    if isinstance(pred, torch.Tensor):
        if sampling.greedy:
            return PointMass(pred.argmax(-1), pred.shape[-1])
        return Dense(sampling.probs(pred))
    if isinstance(pred, PointMass):
        return pred
    if sampling.greedy:
        return PointMass(pred.argmax(), pred.vocab_size)
    if isinstance(pred, Sparse) and sampling.top_k is None and sampling.top_p == 1.0:
        return pred.tempered(sampling.temperature)
    d = pred.dense()
    alive = (d.sum(-1) > 0).unsqueeze(-1)  # zero rows (abstentions) stay zero
    return Dense(sampling.probs(torch.where(alive, d.log(), 0.0)) * alive)


def draw(q: Rows, generator: torch.Generator | None) -> int:
    """One token from the one-row ``q``: a point mass is its token (no randomness), a dense row
    ``torch.multinomial``, a sparse mixture the base (inverse CDF, cached) with probability
    ``lam`` and its support's excess over the base otherwise (two uniforms)."""
    if len(q) != 1:
        raise ValueError(f"draw needs one row, got {len(q)}")
    if isinstance(q, PointMass):
        return int(q.tokens[0])
    if isinstance(q, Dense):
        return int(torch.multinomial(q.probs[0], 1, generator=generator))
    device = generator.device if generator is not None else torch.device("cpu")
    u_branch, u_pick = torch.rand(2, dtype=torch.float64, generator=generator,
                                  device=device).tolist()
    lam = float(q.lam[0])
    mask = q.support[0] >= 0
    excess = ((q.values[0].double() - lam * q.base.probs[q.support[0].clamp_min(0)].double())
              .clamp_min(0) * mask)
    total = lam + float(excess.sum())
    if u_branch * total < lam:  # from the base (it may land on the support: that is q too)
        cdf = q.base.cdf
        return min(int(torch.searchsorted(cdf, torch.tensor([u_pick * float(cdf[-1])],
                                                            dtype=cdf.dtype, device=cdf.device),
                                          right=True)), q.vocab_size - 1)
    cdf = excess.cumsum(0)
    at = int(torch.searchsorted(cdf, torch.tensor([u_pick * float(cdf[-1])], dtype=cdf.dtype,
                                                  device=cdf.device), right=True))
    return int(q.support[0, min(at, int(mask.sum()) - 1)])


def _join(rows: list[Rows], stack: bool) -> Rows:
    kinds = {type(r) for r in rows}
    if not rows or len(kinds) != 1 or len({r.vocab_size for r in rows}) != 1:
        raise ValueError("rows to join must be non-empty, of one form and one vocabulary")
    join = torch.stack if stack else torch.cat
    first = rows[0]
    if isinstance(first, PointMass):
        return PointMass(join([r.tokens for r in rows]), first.vocab_size)
    if isinstance(first, Dense):
        return Dense(join([r.probs for r in rows]))
    width = max(r.support.shape[-1] for r in rows)
    if stack:
        base = Base(torch.stack([r.base.probs for r in rows]))
    elif all(r.base is first.base for r in rows):
        base = first.base
    else:
        raise ValueError("sparse rows joined along positions must share one base")
    return Sparse(join([pad_last(r.support, width, -1) for r in rows]),
                  join([pad_last(r.values, width, 0.0) for r in rows]),
                  join([r.lam for r in rows]), base)


def cat_rows(rows: list[Rows]) -> Rows:
    """Concatenate one drafter's rows (one form) along the position axis."""
    return _join(list(rows), stack=False)


def stack_rows(rows: list[Rows]) -> Rows:
    """Stack drafters' rows (one form, the same positions) along a new leading axis."""
    return _join(list(rows), stack=True)
