"""The reduced-vocabulary form: dense probabilities on a drafter's own token subset, zero off
it (an EAGLE-3 head's draft vocabulary, its ``d2t``)."""

from __future__ import annotations

import torch

from spec_adapters.core.proposal.rows import Rows, broadcast_lead, check_distribution, gather_rows

__all__ = ["Reduced"]


class Reduced(Rows):
    """``q_j(x) = probs_j[s]`` for ``x = ids[s]``, 0 for every token outside ``ids``.

    Every operation works on the ``Vd`` columns, never on the target's ``V`` (but
    :meth:`dense`): ``gamma = sum_x min(p, q) = sum_s min(p(ids[s]), probs[s])`` exactly, since
    ``q = 0`` off ``ids``.

    Parameters
    ----------
    probs : torch.Tensor
        ``(*lead, Vd)`` probabilities over the subset (a zero row: the drafter abstains).
    ids : torch.LongTensor
        ``(Vd,)`` the target id of each column, distinct, in ``[0, V)``; stacked drafters:
        ``(*lead[:-1], Vd)``, one subset per drafter (shared by its positions). A stack of
        subsets of different sizes pads with zero-probability columns, whose id may repeat.
    vocab_size : int
        ``V``, the target's vocabulary.
    """

    def __init__(self, probs: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> None:
        self.probs, self.ids, self.vocab_size = probs, ids.long(), int(vocab_size)

    def __repr__(self) -> str:
        return f"Reduced(lead={tuple(self.lead)}, Vd={self.probs.shape[-1]}, V={self.vocab_size})"

    @property
    def lead(self) -> torch.Size:
        return self.probs.shape[:-1]

    def _ids(self, lead: torch.Size) -> torch.Tensor:
        """``ids`` broadcast to ``(*lead, Vd)`` (a view)."""
        return self.ids.to(self.probs.device).unsqueeze(-2).expand(*lead, self.ids.shape[-1])

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:
        lead = broadcast_lead(self.lead, tokens.shape)
        hit = self._ids(lead) == tokens.to(self.probs.device).expand(lead).unsqueeze(-1)
        return (self.probs.expand(*lead, self.probs.shape[-1]) * hit).sum(-1)

    def overlap(self, p: torch.Tensor) -> torch.Tensor:
        lead = broadcast_lead(p.shape[:-1], self.lead)
        dtype = torch.promote_types(p.dtype, self.probs.dtype)
        ps = gather_rows(p.to(dtype), lead, self._ids(lead))
        return torch.minimum(ps, self.probs.to(dtype)).sum(-1)

    def dense(self) -> torch.Tensor:
        out = self.probs.new_zeros(*self.lead, self.vocab_size)
        return out.scatter_add_(-1, self._ids(self.lead), self.probs)

    def argmax(self) -> torch.LongTensor:
        """The lowest id among the most probable columns; ``-1`` for a zero row."""
        best = self.probs.max(-1, keepdim=True).values
        ids = self._ids(self.lead)
        top = torch.where(self.probs == best, ids, self.vocab_size).min(-1).values
        return torch.where(best.squeeze(-1) > 0, top, -1)

    def check(self, name: str) -> Reduced:
        """Distinct ids in ``[0, V)`` (one subset), and every row a distribution or zero."""
        ids = self.ids
        if ids.shape[-1] != self.probs.shape[-1]:
            raise ValueError(f"{name}: {ids.shape[-1]} ids for {self.probs.shape[-1]} columns")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(f"{name} has reduced-vocabulary ids outside [0, {self.vocab_size})")
        if ids.dim() == 1 and ids.unique().numel() != ids.numel():
            raise ValueError(f"{name} has repeated reduced-vocabulary ids")
        alive = (self.probs != 0).any(-1)
        check_distribution(self.probs if bool(alive.all()) else self.probs[alive], name)
        return self

    def positions(self, sl: slice) -> Reduced:
        return Reduced(self.probs[..., sl, :], self.ids, self.vocab_size)

    def to(self, device) -> Reduced:
        if torch.device(device) == self.probs.device:
            return self
        return Reduced(self.probs.to(device), self.ids.to(device), self.vocab_size)
