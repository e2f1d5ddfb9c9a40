"""The point-mass form: ``q_j = delta(d_j)`` (greedy drafting, deterministic drafters)."""

from __future__ import annotations

import torch

from spec_adapters.core.proposal.rows import Rows, broadcast_lead, gather_rows

__all__ = ["PointMass"]


class PointMass(Rows):
    """``q_j = delta(tokens_j)``; ``tokens_j = -1`` is the zero measure (abstention).

    Parameters
    ----------
    tokens : torch.LongTensor
        ``(..., m)`` token ids in ``[-1, V)``.
    vocab_size : int
    """

    def __init__(self, tokens: torch.Tensor, vocab_size: int) -> None:
        self.tokens, self.vocab_size = tokens.long(), int(vocab_size)

    def __repr__(self) -> str:
        return f"PointMass({self.tokens.tolist()}, V={self.vocab_size})"

    @property
    def lead(self) -> torch.Size:
        return self.tokens.shape

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:
        return (self.tokens == tokens.to(self.tokens.device)).float()

    def overlap(self, p: torch.Tensor) -> torch.Tensor:
        lead = broadcast_lead(p.shape[:-1], self.lead)
        d = self.tokens.expand(lead)
        px = gather_rows(p, lead, d.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        return torch.where(d >= 0, px, torch.zeros_like(px))

    def dense(self) -> torch.Tensor:
        out = torch.zeros(*self.lead, self.vocab_size + 1, device=self.tokens.device)
        idx = torch.where(self.tokens >= 0, self.tokens, self.vocab_size).unsqueeze(-1)
        return out.scatter_(-1, idx, 1.0)[..., :self.vocab_size]

    def argmax(self) -> torch.LongTensor:
        return self.tokens

    def check(self, name: str) -> PointMass:
        t = self.tokens
        if t.numel() and (int(t.min()) < -1 or int(t.max()) >= self.vocab_size):
            raise ValueError(f"{name} has point-mass tokens outside [-1, {self.vocab_size})")
        return self

    def positions(self, sl: slice) -> PointMass:
        return PointMass(self.tokens[..., sl], self.vocab_size)

    def to(self, device) -> PointMass:
        if torch.device(device) == self.tokens.device:
            return self
        return PointMass(self.tokens.to(device), self.vocab_size)
