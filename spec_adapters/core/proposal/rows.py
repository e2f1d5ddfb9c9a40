"""The interface of every proposal form (:class:`Rows`), what ``propose`` returns
(:class:`Proposal`), and the checks and gathers the forms share."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Proposal", "Rows", "broadcast_lead", "check_distribution", "gather_rows", "pad_last"]

# Base tolerance on |sum(p) - 1| by dtype (widened by V * eps in check_distribution): it must
# reject logits, unnormalised weights or a missing renormalisation.
_SUM_TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4, torch.float64: 1e-6}


def check_distribution(x: torch.Tensor, name: str) -> torch.Tensor:
    """Validate a tensor of probability vectors over its last dimension.

    Parameters
    ----------
    x : torch.Tensor
        Floating tensor ``(..., V)`` with ``V >= 1``.
    name : str
        Name used in the error message.

    Returns
    -------
    torch.Tensor
        ``x`` itself (no copy).

    Raises
    ------
    ValueError
        If ``x`` is not a floating tensor, is 0-dimensional or has an empty last dimension,
        has NaN / inf or negative entries, or a vector whose sum differs from 1 by more than
        ``max(base, V * eps)``: a dtype-dependent base (1e-4 for float32, 1e-6 for float64)
        widened by the rounding error a softmax over ``V`` entries can accumulate (a float32
        softmax over a 49152-token vocabulary misses 1 by ~1e-4).
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of probabilities, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have shape (..., V) with V >= 1, got {tuple(x.shape)}")
    if x.numel() == 0:
        return x
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} has NaN or infinite entries")
    if bool((x < 0).any()):
        raise ValueError(f"{name} has negative entries (min {float(x.min()):.3g})")
    err = float((x.sum(-1, dtype=torch.float64) - 1.0).abs().max())
    tol = max(_SUM_TOL.get(x.dtype, 1e-4), x.shape[-1] * torch.finfo(x.dtype).eps)
    if err > tol:
        raise ValueError(
            f"{name} does not sum to 1 over its last dimension (max |sum - 1| = {err:.3g} > "
            f"{tol:g}); pass probabilities, not logits or unnormalised weights"
        )
    return x


def gather_rows(x: torch.Tensor, lead: torch.Size, idx: torch.Tensor) -> torch.Tensor:
    """``x[..., idx]`` with ``x`` ``(..., V)`` broadcast to ``lead`` and ``idx`` ``(*lead, S)``
    (a view is expanded, nothing V-sized is copied)."""
    return x.expand(*lead, x.shape[-1]).gather(-1, idx.expand(*lead, idx.shape[-1]))


def broadcast_lead(a: torch.Size, b: torch.Size, names: tuple[str, str] | None = None
                   ) -> torch.Size:
    """The broadcast of two leading (batch) shapes; ``ValueError`` (naming the two operands
    when ``names`` are given) when they do not broadcast."""
    try:
        return torch.broadcast_shapes(a, b)
    except RuntimeError:
        what = "leading (batch) dimensions" if names is None else f"{names[0]} and {names[1]}"
        raise ValueError(f"{what} {tuple(a)} and {tuple(b)} do not broadcast") from None


def pad_last(x: torch.Tensor, width: int, value) -> torch.Tensor:
    """``x`` padded with ``value`` along its last dimension to ``width``."""
    if x.shape[-1] == width:
        return x
    return torch.cat([x, x.new_full((*x.shape[:-1], width - x.shape[-1]), value)], -1)


class Proposal(NamedTuple):
    """What ``Drafter.propose`` returns: ``j <= k`` drafted tokens and the rows they were drawn
    from (``j < k``: the drafter stopped, ``j = 0``: it abstains)."""

    tokens: torch.LongTensor  # (j,) int64
    q: Rows  # lead (j,)


class Rows:
    """A drafter's distributions at ``m`` positions (last leading dimension), possibly stacked
    over drafters (leading dimensions before it). See the module docstring."""

    vocab_size: int

    @property
    def lead(self) -> torch.Size:  # pragma: no cover - interface
        raise NotImplementedError

    def __len__(self) -> int:
        return self.lead[-1]

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        """``q(x)`` at ``tokens`` (broadcasting with :attr:`lead`)."""
        raise NotImplementedError

    def overlap(self, p: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        """``sum_x min(p(x), q(x))`` with dense ``p`` ``(..., V)`` broadcasting with
        :attr:`lead` (Theorem 1's gamma); unclamped, dtype promoted with ``p``'s."""
        raise NotImplementedError

    def dense(self) -> torch.Tensor:  # pragma: no cover - interface
        """The ``(*lead, V)`` probabilities (a reference; V-sized)."""
        raise NotImplementedError

    def argmax(self) -> torch.LongTensor:  # pragma: no cover - interface
        """The most probable token per row (lowest id on ties; -1 for a zero row)."""
        raise NotImplementedError

    def check(self, name: str) -> Rows:  # pragma: no cover - interface
        """Validate the values (``ValueError`` naming ``name``); returns ``self``."""
        raise NotImplementedError

    def positions(self, sl: slice) -> Rows:  # pragma: no cover - interface
        """Rows ``sl`` of the position axis."""
        raise NotImplementedError

    def to(self, device) -> Rows:  # pragma: no cover - interface
        raise NotImplementedError
