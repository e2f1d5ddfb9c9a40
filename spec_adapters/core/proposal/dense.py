"""The dense form: ``(..., m, V)`` probabilities (model drafters)."""

from __future__ import annotations

import torch

from spec_adapters.core.proposal.rows import Rows, broadcast_lead, check_distribution, gather_rows

__all__ = ["Dense"]


class Dense(Rows):
    """``(..., m, V)`` probabilities."""

    def __init__(self, probs: torch.Tensor) -> None:
        self.probs, self.vocab_size = probs, int(probs.shape[-1])

    @property
    def lead(self) -> torch.Size:
        return self.probs.shape[:-1]

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:
        lead = broadcast_lead(self.lead, tokens.shape)
        return gather_rows(self.probs, lead, tokens.to(self.probs.device).expand(lead).unsqueeze(-1)
                       ).squeeze(-1)

    def overlap(self, p: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(p.dtype, self.probs.dtype)
        return torch.minimum(p.to(dtype), self.probs.to(dtype)).sum(-1)

    def dense(self) -> torch.Tensor:
        return self.probs

    def argmax(self) -> torch.LongTensor:
        top = self.probs.argmax(-1)
        return torch.where(self.probs.sum(-1) > 0, top, -1)

    def check(self, name: str) -> Dense:
        """Every row a distribution, or all zeros (an abstention)."""
        alive = (self.probs != 0).any(-1)
        check_distribution(self.probs if bool(alive.all()) else self.probs[alive], name)
        return self

    def positions(self, sl: slice) -> Dense:
        return Dense(self.probs[..., sl, :])

    def to(self, device) -> Dense:
        return Dense(self.probs.to(device))
