"""What the decoders do with any form: read a tensor as rows, warp a prediction, draw a
token, join rows along positions or drafters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from spec_adapters.core.proposal.dense import Dense
from spec_adapters.core.proposal.point import PointMass
from spec_adapters.core.proposal.reduced import Reduced
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
        keeps it), :class:`Sparse` (the mixture at temperature 1), :class:`Reduced` or
        :class:`Dense` (probabilities).
    sampling : SamplingConfig

    Returns
    -------
    Rows
        Greedy: the :class:`PointMass` at the argmax (first index on ties, as
        :meth:`SamplingConfig.probs`). Otherwise logits and dense rows give :class:`Dense`
        ``sampling.probs``; a sparse mixture stays :class:`Sparse` under temperature alone
        (exact closed form) and becomes dense under top-k / top-p; a reduced-vocabulary row
        stays :class:`Reduced` (exact: the tokens off its subset have probability 0 before
        and after any warping).
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
    if isinstance(pred, Reduced):
        return Reduced(_warp_probs(pred.probs, sampling), pred.ids, pred.vocab_size)
    return Dense(_warp_probs(pred.dense(), sampling))


def _warp_probs(probs: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """``sampling`` applied to probabilities (as logits ``log probs``); zero rows (abstentions)
    stay zero."""
    alive = (probs.sum(-1) > 0).unsqueeze(-1)
    return sampling.probs(torch.where(alive, probs.log(), 0.0)) * alive


def draw(q: Rows, generator: torch.Generator | None) -> int:
    """One token from the one-row ``q``: a point mass is its token (no randomness), a dense or
    reduced-vocabulary row ``torch.multinomial`` (over its ``Vd`` columns), a sparse mixture the
    base (inverse CDF, cached) with probability ``lam`` and its support's excess over the base
    otherwise (two uniforms)."""
    if len(q) != 1:
        raise ValueError(f"draw needs one row, got {len(q)}")
    if isinstance(q, PointMass):
        return int(q.tokens[0])
    if isinstance(q, Dense):
        return int(torch.multinomial(q.probs[0], 1, generator=generator))
    if isinstance(q, Reduced):
        return int(q.ids[int(torch.multinomial(q.probs[0], 1, generator=generator))])
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
    if isinstance(first, Reduced):
        return _join_reduced(rows, stack)
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


def _join_reduced(rows: list[Reduced], stack: bool) -> Reduced:
    """Stack subsets of different sizes padded with zero-probability columns (id 0); along
    positions the rows must share one subset."""
    if not stack:
        if any(not torch.equal(r.ids, rows[0].ids) for r in rows):
            raise ValueError("reduced rows joined along positions must share one subset")
        return Reduced(torch.cat([r.probs for r in rows]), rows[0].ids, rows[0].vocab_size)
    width = max(r.ids.shape[-1] for r in rows)
    return Reduced(torch.stack([pad_last(r.probs, width, 0.0) for r in rows]),
                   torch.stack([pad_last(r.ids, width, 0) for r in rows]), rows[0].vocab_size)


def cat_rows(rows: list[Rows]) -> Rows:
    """Concatenate one drafter's rows (one form) along the position axis."""
    return _join(list(rows), stack=False)


def stack_rows(rows: list[Rows]) -> Rows:
    """Stack drafters' rows (one form, the same positions) along a new leading axis."""
    return _join(list(rows), stack=True)
