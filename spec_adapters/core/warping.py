"""Warping: ``SamplingConfig`` turns logits into the distribution a token is drawn from
(temperature, top-k, top-p; temperature 0 is the one-hot argmax, so greedy decoding is the same
code path). The target and every drafter are warped by the same config, which is what makes
speculative sampling lossless (docs/theory.md)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

__all__ = ["GREEDY_BELOW", "SamplingConfig", "top_p_drop"]

GREEDY_BELOW = 1e-5  # a temperature below this is greedy (vLLM's _SAMPLING_EPS)


def _is_real(x) -> bool:
    """A real number (Python or numpy scalar), not a bool (``True`` is no temperature)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become the probabilities used for drafting, verification and gamma.

    Parameters
    ----------
    temperature : float, default 0.0
        ``>= 0``. ``0`` means greedy: :meth:`probs` returns the one-hot argmax (first index on
        ties), and the speculative rules then reduce exactly to "accept while the draft equals
        the target's argmax". A temperature below :data:`GREEDY_BELOW` (``1e-5``, vLLM's
        sampling epsilon) is stored as 0: ``logits / 1e-30`` overflows, and what it samples
        is the argmax anyway.
    top_p : float, default 1.0
        Nucleus sampling, in ``(0, 1]``: keep the smallest set of most probable tokens whose
        total probability reaches ``top_p`` (at least one token; among equal probabilities
        the lower token id first).
    top_k : int or None, default None
        Keep only the ``top_k >= 1`` largest logits (ties at the boundary are kept).

    Python and numpy numbers are accepted alike and stored as Python ``float`` / ``int``.

    Raises
    ------
    ValueError
        Naming the parameter: a bool or a non-number, NaN or inf temperature, a temperature
        below 0, ``top_p`` outside ``(0, 1]``, a non-integer or ``top_k < 1``.

    Notes
    -----
    The order is temperature, top-k, top-p, as in transformers' ``generate``. Losslessness of
    speculative decoding holds with respect to the *warped* target distribution, so ``p`` and
    ``q`` must both come from the same config.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None

    def __post_init__(self) -> None:
        # Any real number (Python or numpy) is accepted and stored as a Python float / int, so
        # equal configs compare and hash equal whatever scalar type they were built from.
        t, tp, tk = self.temperature, self.top_p, self.top_k
        if not _is_real(t) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if not _is_real(tp) or not 0.0 < tp <= 1.0:
            raise ValueError(f"top_p must be a number in (0, 1], got {tp!r}")
        if tk is not None and (isinstance(tk, bool) or not isinstance(tk, numbers.Integral)
                               or tk < 1):
            raise ValueError(f"top_k must be None or an integer >= 1, got {tk!r}")
        object.__setattr__(self, "temperature", float(t) if t >= GREEDY_BELOW else 0.0)
        object.__setattr__(self, "top_p", float(tp))
        object.__setattr__(self, "top_k", None if tk is None else int(tk))

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0`` (one-hot argmax distributions)."""
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Warp logits ``(..., V)`` into probabilities ``(..., V)``.

        Parameters
        ----------
        logits : torch.Tensor
            Floating tensor ``(..., V)``; ``-inf`` entries are allowed (masked tokens), NaN is
            not, and each row needs at least one finite entry.

        Returns
        -------
        torch.Tensor
            Same shape; dtype float64 for float64 input, float32 otherwise. Greedy: the one-hot
            of ``argmax`` (first index on ties). Otherwise ``softmax`` of
            ``logits / temperature`` restricted to the top-k, then to the top-p nucleus.

        Raises
        ------
        ValueError
            On a non-floating or empty tensor, NaN or ``+inf`` entries, or a row of all
            ``-inf``.
        """
        if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
            raise ValueError("logits must be a floating-point torch.Tensor")
        if logits.dim() < 1 or logits.shape[-1] < 1:
            raise ValueError(
                f"logits must have shape (..., V) with V >= 1, got {tuple(logits.shape)}"
            )
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        x = logits.to(dtype)
        if bool(torch.isnan(x).any()) or bool((x == math.inf).any()):
            raise ValueError("logits contain NaN or +inf")
        if x.numel() and bool((x == -math.inf).all(-1).any()):
            raise ValueError("logits have a row where every entry is -inf")
        if self.greedy:
            out = torch.zeros_like(x)
            return out.scatter_(-1, x.argmax(-1, keepdim=True), 1.0)
        x = x / self.temperature
        V = x.shape[-1]
        if self.top_k is not None and self.top_k < V:
            kth = torch.topk(x, self.top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, -math.inf)
        if self.top_p < 1.0:
            x = x.masked_fill(top_p_drop(x, self.top_p), -math.inf)
        return torch.softmax(x, dim=-1)


CANDIDATES = (64, 1024)  # how many of a row's largest logits hold its nucleus, tried in turn
_SLACK = 1e-6  # relative margin on the candidates' mass: closer to top_p, try more of them


def top_p_drop(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """Where the nucleus rule drops a token of rows ``x`` ``(..., V)`` of scaled logits.

    Ranked by ``x`` descending (among equal values the lower token id first), token ``j`` is
    kept when the softmax mass ranked above it is below ``top_p``,

    .. math:: A_j = \\sum_{i \\text{ ranked above } j} \\pi_i < p, \\qquad
              \\pi = \\operatorname{softmax}(x),

    so the kept set is a prefix of the ranking (the first token always kept) and only that
    prefix needs ordering: a row's ``m`` largest logits (``topk``, no sort of the vocabulary)
    settle it when they hold at least ``top_p`` of the mass (the first token outside them has
    ``A >= top_p``) and no token outside them ties the smallest; a row they do not settle (a
    flat one) tries more candidates (:data:`CANDIDATES`), then the whole row's stable sort.
    The same set as the sort's up to float rounding where ``A_j`` is within ~1e-7 of
    ``top_p`` (the softmax's normaliser is summed in another order). A sort of SmolLM2's
    49,152 logits took 5.5 ms a row on 2 cores, as long as a fifth of its forward; the
    candidates ~0.3 ms.

    Returns
    -------
    torch.Tensor
        bool, the shape of ``x``: ``True`` where the token is dropped.
    """
    V = x.shape[-1]
    rows = x.reshape(-1, V)
    drop = torch.ones(rows.shape, dtype=torch.bool, device=x.device)
    pi = torch.softmax(rows, dim=-1)
    todo = torch.arange(rows.shape[0], device=x.device)
    for m in CANDIDATES:
        if todo.numel() == 0 or m >= V:
            break
        sub = rows[todo]
        vals, idx = sub.topk(m, dim=-1)
        # no token outside ties the smallest candidate (masked ones, -inf, are dropped anyway)
        whole = ((sub >= vals[:, -1:]).sum(-1) == m) | (vals[:, -1] == -math.inf)
        settled = whole & (pi[todo].gather(1, idx).sum(-1) >= top_p * (1 + _SLACK))
        if settled.any():
            done = todo[settled]
            # the candidates in the sort's order: value descending, the lower id first
            by_id = idx[settled].sort(dim=-1).values
            order = by_id.gather(1, sub[settled].gather(1, by_id).argsort(
                dim=-1, descending=True, stable=True))
            mass = pi[done].gather(1, order)
            kept = mass.cumsum(-1) - mass < top_p
            kept[:, 0] = True
            drop[done] = drop[done].scatter(1, order, ~kept)
        todo = todo[~settled]
    if todo.numel():  # the whole row's stable sort
        sorted_x, order = torch.sort(rows[todo], dim=-1, descending=True, stable=True)
        sorted_p = torch.softmax(sorted_x, dim=-1)
        drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
        drop_sorted[:, 0] = False
        drop[todo] = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return drop.view(x.shape)


# --------------------------------------------------------------------------------------------
# randomness: one rule, two choosers
