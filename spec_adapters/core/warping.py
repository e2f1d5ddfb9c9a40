"""Warping: ``SamplingConfig`` turns logits into the distribution a token is drawn from
(temperature, top-k, top-p; temperature 0 is the one-hot argmax, so greedy decoding is the same
code path). The target and every drafter are warped by the same config, which is what makes
speculative sampling lossless (docs/theory.md)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

__all__ = ["GREEDY_BELOW", "SamplingConfig"]

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
            sorted_x, order = torch.sort(x, dim=-1, descending=True, stable=True)
            sorted_p = torch.softmax(sorted_x, dim=-1)
            mass_before = sorted_p.cumsum(-1) - sorted_p
            drop_sorted = mass_before >= self.top_p
            drop_sorted[..., 0] = False
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            x = x.masked_fill(drop, -math.inf)
        return torch.softmax(x, dim=-1)


# --------------------------------------------------------------------------------------------
# randomness: one rule, two choosers
