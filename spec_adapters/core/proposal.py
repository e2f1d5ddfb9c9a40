"""Draft distributions in their cheapest exact form: point mass, sparse mixture, dense.

A drafter's distribution ``q`` at ``m`` positions (and, stacked, for ``N`` drafters) is a
:class:`Rows` object in one of three forms:

- :class:`PointMass`: ``q_j = delta(d_j)``: greedy drafting (any drafter), or a deterministic
  drafter; ``d_j = -1`` is the zero measure (the drafter abstains at ``j``);
- :class:`Sparse`: ``q_j(x) = v_j(x)`` on a small support ``S_j`` and ``lam_j b(x)`` off it,
  with ``b`` a fixed full-support :class:`Base` (an n-gram's Witten-Bell mixture: its matches
  plus ``lam`` times the unigram or uniform base);
- :class:`Dense`: ``(..., m, V)`` probabilities (model drafters).

Each form computes what the decoders need without building what it does not need:
``q(x)`` at given tokens (:meth:`Rows.prob`, for ``rho`` and the acceptance test) and the
overlap ``sum_x min(p(x), q(x))`` with a dense target row (:meth:`Rows.overlap`, Theorem 1's
gamma). A point mass needs one gather (``gamma = p(d)``); a sparse mixture gathers over its
support and adds the off-support term ``sum_{x not in S} min(p(x), lam b(x))``, which is exact
but needs one pass over ``V`` (it only arises at temperature > 0: greedy warps every form to a
point mass, see :func:`warp`).

:func:`warp` applies a :class:`~spec_adapters.core.sampling.SamplingConfig` to a drafter's
prediction (logits or an unwarped form): greedy gives the point mass at the argmax (for a
sparse mixture, found among its support and the base's top token off the support, no V-sized
tensor); temperature keeps a sparse mixture sparse in closed form (``q^{1/T}`` normalised, with
the base tempered once and cached); top-k / top-p on a sparse mixture fall back to dense.
Model-free drafters build their sparse rows in numpy (:meth:`Sparse.from_arrays`) with the
argmax already found by the compiled :func:`sparse_argmax` (the rule of :meth:`Sparse.argmax`),
so greedy decoding turns them into point masses without building a tensor.
:func:`draw` samples one row. :func:`check_distribution` validates dense probabilities.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from numba import njit

if TYPE_CHECKING:
    from spec_adapters.core.warping import SamplingConfig

__all__ = ["Base", "Dense", "PointMass", "Proposal", "Rows", "Sparse", "as_rows", "cat_rows",
           "check_distribution", "draw", "sparse_argmax", "stack_rows", "target_and_draft",
           "warp"]

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


def _gather(x: torch.Tensor, lead: torch.Size, idx: torch.Tensor) -> torch.Tensor:
    """``x[..., idx]`` with ``x`` ``(..., V)`` broadcast to ``lead`` and ``idx`` ``(*lead, S)``
    (a view is expanded, nothing V-sized is copied)."""
    return x.expand(*lead, x.shape[-1]).gather(-1, idx.expand(*lead, idx.shape[-1]))


def _lead(a: torch.Size, b: torch.Size) -> torch.Size:
    try:
        return torch.broadcast_shapes(a, b)
    except RuntimeError:
        raise ValueError(f"leading (batch) dimensions {tuple(a)} and {tuple(b)} do not "
                         "broadcast") from None


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
        lead = _lead(p.shape[:-1], self.lead)
        d = self.tokens.expand(lead)
        px = _gather(p, lead, d.clamp_min(0).unsqueeze(-1)).squeeze(-1)
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


class Dense(Rows):
    """``(..., m, V)`` probabilities."""

    def __init__(self, probs: torch.Tensor) -> None:
        self.probs, self.vocab_size = probs, int(probs.shape[-1])

    @property
    def lead(self) -> torch.Size:
        return self.probs.shape[:-1]

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:
        lead = _lead(self.lead, tokens.shape)
        return _gather(self.probs, lead, tokens.to(self.probs.device).expand(lead).unsqueeze(-1)
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
        self._lead = lam.shape
        self.base, self.vocab_size = base, int(base.probs.shape[-1])

    @classmethod
    def from_arrays(cls, support: np.ndarray, values: np.ndarray, lam: np.ndarray,
                    top: np.ndarray, base: Base) -> Sparse:
        """``m`` rows of one drafter from numpy arrays: ``support`` ``(m, S)`` int64 (sorted,
        ``-1`` padding), ``values`` ``(m, S)`` float64, ``lam`` ``(m,)`` float64 and their
        argmax ``top`` ``(m,)`` by :func:`sparse_argmax` (the producer computes it).

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
        self._lead = torch.Size([len(lam)])
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
        return self._lead

    def _b(self) -> torch.Tensor:
        """The base broadcastable against ``(*lead, V)``."""
        return self.base.probs.unsqueeze(-2)

    def prob(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.support.device)
        lead = _lead(self.lead, tokens.shape)
        hit = self.support == tokens.expand(lead).unsqueeze(-1)
        on = (self.values * hit).sum(-1)
        off = self.lam * _gather(self._b(), lead, tokens.clamp_min(0).expand(lead).unsqueeze(-1)
                                 ).squeeze(-1)
        return torch.where(hit.any(-1), on, off)

    def overlap(self, p: torch.Tensor) -> torch.Tensor:
        # sum_x min(p, q) = sum_{x in S} [min(p, v) - min(p, lam b)] + sum_x min(p, lam b)
        lead = _lead(p.shape[:-1], self.lead)
        dtype = torch.promote_types(p.dtype, self.values.dtype)
        p = p.to(dtype)
        mask = self.support >= 0
        idx = self.support.clamp_min(0)
        ps = _gather(p, lead, idx)
        lam = self.lam.to(dtype).unsqueeze(-1)
        lam_b = lam * _gather(self._b().to(dtype), lead, idx)
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
        support = _pad(self.support, max(S, 1), -1)  # an empty support: one padding column
        mask = support >= 0
        best_v, at = _pad(self.values, max(S, 1), 0.0).masked_fill(~mask, -1.0).max(-1)
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
        b_s = _gather(base_t.probs.unsqueeze(-2), self.lead, self.support.clamp_min(0))
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
            1.0 - (_gather(self._b(), self.lead, s.clamp_min(0)).double() * mask).sum(-1))
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


@njit(cache=True)
def sparse_argmax(tokens: np.ndarray, values: np.ndarray, lam: float, base: np.ndarray,
                  top: int) -> int:
    """:meth:`Sparse.argmax` of one row in compiled code (numba), on the values as a float32
    tensor holds them: the best support token (``tokens`` increasing, so a tie keeps the
    lowest id) against the float32 ``base``'s top token ``top`` weighted by ``lam``; -1 for
    the zero row (no tokens, ``lam = 0``)."""
    best_t, best_v = -1, np.float32(-1.0)
    for s in range(tokens.size):
        v = np.float32(values[s])
        if v > best_v:
            best_t, best_v = tokens[s], v
    off = np.float32(lam) * base[top]  # float32 times float32, as the tensors compute it
    if off > best_v or (off == best_v and top < best_t):
        best_t = top
    if lam == 0.0 and tokens.size == 0:
        return -1
    return best_t


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


def _pad(x: torch.Tensor, width: int, value) -> torch.Tensor:
    if x.shape[-1] == width:
        return x
    return torch.cat([x, x.new_full((*x.shape[:-1], width - x.shape[-1]), value)], -1)


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
    return Sparse(join([_pad(r.support, width, -1) for r in rows]),
                  join([_pad(r.values, width, 0.0) for r in rows]),
                  join([r.lam for r in rows]), base)


def cat_rows(rows: list[Rows]) -> Rows:
    """Concatenate one drafter's rows (one form) along the position axis."""
    return _join(list(rows), stack=False)


def stack_rows(rows: list[Rows]) -> Rows:
    """Stack drafters' rows (one form, the same positions) along a new leading axis."""
    return _join(list(rows), stack=True)
