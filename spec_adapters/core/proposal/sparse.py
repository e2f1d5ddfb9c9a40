"""The sparse form: ``v_j`` on a small support, ``lam_j b`` off it (n-gram mixtures), its
:class:`Base`; its argmax compiled is
:func:`spec_adapters.drafters.ngram_kernel.sparse_argmax`."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import torch

from spec_adapters.core.proposal.rows import Rows, broadcast_lead, gather_rows, pad_last

__all__ = ["Base", "Sparse"]


class Base:
    """A fixed full-support distribution ``b`` ``(..., V)`` under a :class:`Sparse` mixture, with
    what the sparse form reads from it computed once and cached: the order of its tokens (by
    decreasing probability, lowest id first on ties), its CDF, its tempered versions and its
    copies on other devices. Build one per drafter, not per round."""

    def __init__(self, probs: torch.Tensor) -> None:
        self.probs = probs
        self._tempered: dict[float, tuple[Base, float]] = {}
        self._on: dict[torch.device, Base] = {probs.device: self}

    @cached_property
    def order(self) -> torch.LongTensor:
        return torch.sort(self.probs, descending=True, stable=True).indices

    @cached_property
    def numpy(self) -> np.ndarray:
        """The probabilities as a numpy array of their dtype, on the CPU (compiled rows)."""
        return self.probs.detach().cpu().numpy()

    @cached_property
    def top(self) -> int:
        """The most probable token (lowest id on ties)."""
        return int(self.order[0])

    @cached_property
    def cdf(self) -> torch.Tensor:
        return self.probs.double().cumsum(-1)

    def tempered(self, t: float) -> tuple[Base, float]:
        """``b^{1/t}`` normalised, and ``log sum_x b(x)^{1/t}`` (a single base ``(V,)``)."""
        if t not in self._tempered:
            logb = self.probs.double().log() / t
            scale = torch.logsumexp(logb, -1)
            self._tempered[t] = (Base((logb - scale).exp().to(self.probs.dtype)), float(scale))
        return self._tempered[t]

    def to(self, device) -> Base:
        device = torch.device(device)
        if device not in self._on:
            self._on[device] = Base(self.probs.to(device))
        return self._on[device]


class Sparse(Rows):
    """``q_j(x) = values_j[s]`` for ``x = support_j[s]``, ``lam_j b(x)`` off the support.

    Parameters
    ----------
    support : torch.LongTensor
        ``(*lead, S)``: distinct token ids in increasing order, then ``-1`` padding.
    values : torch.Tensor
        ``(*lead, S)``: ``q(x)`` at the support (the base term included), 0 at padding.
    lam : torch.Tensor
        ``(*lead)``: the weight of the base off the support (0 with an empty support: the zero
        measure, an abstention).
    base : Base
        ``(*lead[:-1], V)``: shared by the positions (one per drafter).
    """

    def __init__(self, support: torch.Tensor, values: torch.Tensor, lam: torch.Tensor,
                 base: Base) -> None:
        self._arrays: tuple | None = (support, values, lam)
        self._numpy: tuple | None = None  # numpy rows, turned into tensors when first read
        self._top: torch.Tensor | None = None  # the argmax per row, when built from arrays
        self.broadcast_lead = lam.shape
        self.base, self.vocab_size = base, int(base.probs.shape[-1])

    @classmethod
    def from_arrays(cls, support: np.ndarray, values: np.ndarray, lam: np.ndarray,
                    top: np.ndarray, base: Base) -> Sparse:
        """``m`` rows of one drafter from numpy arrays: ``support`` ``(m, S)`` int64 (sorted,
        ``-1`` padding), ``values`` ``(m, S)`` float64, ``lam`` ``(m,)`` float64 and their
        argmax ``top`` ``(m,)`` by
        :func:`~spec_adapters.drafters.ngram_kernel.sparse_argmax` (the producer computes it).

        The tensors (in the base's dtype, float32) are built only when first read: greedy
        decoding reads nothing but the argmax, so a model-free drafter's round builds no other
        tensor.
        """
        if base.probs.dtype != torch.float32:
            raise ValueError(f"Sparse.from_arrays needs a float32 base (sparse_argmax rounds "
                             f"as float32 does), got {base.probs.dtype}")
        self = cls.__new__(cls)
        self._arrays, self._numpy = None, (support, values, lam)
        self._top = torch.from_numpy(np.ascontiguousarray(top, dtype=np.int64))
        self.broadcast_lead = torch.Size([len(lam)])
        self.base, self.vocab_size = base, int(base.probs.shape[-1])
        return self

    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._arrays is None:
            support, values, lam = self._numpy
            dtype, device = self.base.probs.dtype, self.base.probs.device
            self._arrays = (torch.from_numpy(support).to(device),
                            torch.from_numpy(values).to(device, dtype),
                            torch.from_numpy(lam).to(device, dtype))
        return self._arrays

    @property
    def support(self) -> torch.Tensor:
        return self._tensors()[0]

    @property
    def values(self) -> torch.Tensor:
        return self._tensors()[1]

    @property
    def lam(self) -> torch.Tensor:
        return self._tensors()[2]

    @classmethod
    def nothing(cls, base: Base, m: int = 1) -> Sparse:
        """``m`` zero-measure rows (the drafter abstains there)."""
        dev = base.probs.device
        return cls(torch.zeros(m, 0, dtype=torch.long, device=dev),
                   torch.zeros(m, 0, dtype=base.probs.dtype, device=dev),
                   torch.zeros(m, dtype=base.probs.dtype, device=dev), base)

    def __repr__(self) -> str:
        return f"Sparse(lead={tuple(self.lead)}, S={self.support.shape[-1]}, V={self.vocab_size})"

    @property
    def lead(self) -> torch.Size:
        return self.broadcast_lead

    def _b(self) -> torch.Tensor:
        """The base broadcastable against ``(*lead, V)``."""
        return self.base.probs.unsqueeze(-2)

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.support.device)
        lead = broadcast_lead(self.lead, tokens.shape)
        hit = self.support == tokens.expand(lead).unsqueeze(-1)
        on = (self.values * hit).sum(-1)
        off = self.lam * gather_rows(self._b(), lead, tokens.clamp_min(0).expand(lead).unsqueeze(-1)
                                 ).squeeze(-1)
        return torch.where(hit.any(-1), on, off)

    def overlap(self, p: torch.Tensor) -> torch.Tensor:
        # sum_x min(p, q) = sum_{x in S} [min(p, v) - min(p, lam b)] + sum_x min(p, lam b)
        lead = broadcast_lead(p.shape[:-1], self.lead)
        dtype = torch.promote_types(p.dtype, self.values.dtype)
        p = p.to(dtype)
        mask = self.support >= 0
        idx = self.support.clamp_min(0)
        ps = gather_rows(p, lead, idx)
        lam = self.lam.to(dtype).unsqueeze(-1)
        lam_b = lam * gather_rows(self._b().to(dtype), lead, idx)
        on = ((torch.minimum(ps, self.values.to(dtype)) - torch.minimum(ps, lam_b)) * mask)
        return on.sum(-1) + torch.minimum(p, lam * self._b().to(dtype)).sum(-1)

    def dense(self) -> torch.Tensor:
        V = self.vocab_size
        out = self.lam.unsqueeze(-1) * self._b()
        out = torch.cat([out.expand(*self.lead, V), out.new_zeros(*self.lead, 1)], -1)
        idx = torch.where(self.support >= 0, self.support, V)
        return out.scatter(-1, idx, self.values.to(out.dtype))[..., :V]

    def argmax(self) -> torch.LongTensor:
        """Among the support (lowest id on ties) and the base's most probable token
        ``t = order[0]``; ``O(m S)``, nothing V-sized.

        ``t`` stands for every token off the support: if ``t`` is off it, it is the best one
        there; if it is on it, every off-support value is ``<= lam b(t) <= q(t) <= best``, and a
        tie resolves to the support (its best id is ``<= t``, the lowest id of the base's
        maximum, and any other token of that mass is above ``t``). Needs one base (a
        drafter's rows, not a stack)."""
        if self._top is not None:
            return self._top
        if self.base.probs.dim() != 1:
            raise ValueError("Sparse.argmax needs one drafter's rows (a single base)")
        S = self.support.shape[-1]
        support = pad_last(self.support, max(S, 1), -1)  # an empty support: one padding column
        mask = support >= 0
        best_v, at = pad_last(self.values, max(S, 1), 0.0).masked_fill(~mask, -1.0).max(-1)
        best_s = support.gather(-1, at.unsqueeze(-1)).squeeze(-1)
        top = self.base.order[0]
        off_v = self.lam * self.base.probs[top]
        take = (off_v > best_v) | ((off_v == best_v) & (top < best_s))
        out = torch.where(take, top, best_s)
        return torch.where((self.lam == 0) & ~mask.any(-1), -1, out)

    def tempered(self, t: float) -> Sparse:
        """``q^{1/t}`` normalised, exactly, in the same form (the base tempered once, cached)."""
        base_t, log_scale = self.base.tempered(t)
        mask = self.support >= 0
        v = self.values.double()
        a = torch.where(mask, v.clamp_min(1e-300).log() / t, -math.inf)
        b_s = gather_rows(base_t.probs.unsqueeze(-2), self.lead, self.support.clamp_min(0))
        rest = 1.0 - (b_s.double() * mask).sum(-1)
        log_lam = self.lam.double().clamp_min(0).log() / t + log_scale  # -inf when lam = 0
        c = log_lam + rest.clamp_min(0).log()
        log_z = torch.logsumexp(torch.cat([a, c.unsqueeze(-1)], -1), -1)
        log_z = torch.where(torch.isfinite(log_z), log_z, 0.0)  # zero rows stay zero
        dtype = self.values.dtype
        return Sparse(self.support, (a - log_z.unsqueeze(-1)).exp().to(dtype),
                      (log_lam - log_z).exp().to(dtype), base_t)

    def check(self, name: str) -> Sparse:
        s, v, lam = self.support, self.values, self.lam
        if s.shape != v.shape or s.shape[:-1] != lam.shape:
            raise ValueError(f"{name}: support {tuple(s.shape)}, values {tuple(v.shape)} and "
                             f"lam {tuple(lam.shape)} disagree")
        if s.numel() and (int(s.min()) < -1 or int(s.max()) >= self.vocab_size):
            raise ValueError(f"{name} has support tokens outside [-1, {self.vocab_size})")
        if not (bool(torch.isfinite(v).all()) and bool(torch.isfinite(lam).all())) \
                or bool((v < 0).any()) or bool((lam < 0).any()):
            raise ValueError(f"{name} has negative or non-finite sparse weights")
        mask = s >= 0
        total = (v * mask).sum(-1, dtype=torch.float64) + lam.double() * (
            1.0 - (gather_rows(self._b(), self.lead, s.clamp_min(0)).double() * mask).sum(-1))
        bad = ((total - 1.0).abs() > 1e-4) & (total != 0)
        if bool(bad.any()):
            raise ValueError(f"{name}: a sparse row sums to {float(total[bad][0]):.6g}, not 1")
        return self

    def positions(self, sl: slice) -> Sparse:
        if self._arrays is None:
            support, values, lam = self._numpy
            out = Sparse.from_arrays(support[sl], values[sl], lam[sl], self._top.numpy()[sl],
                                     self.base)
        else:
            out = Sparse(self.support[..., sl, :], self.values[..., sl, :], self.lam[..., sl],
                         self.base)
            out._top = None if self._top is None else self._top[..., sl]
        return out

    def to(self, device) -> Sparse:
        if torch.device(device) == self.base.probs.device:
            return self
        out = Sparse(self.support.to(device), self.values.to(device), self.lam.to(device),
                     self.base.to(device))
        out._top = None if self._top is None else self._top.to(device)
        return out
