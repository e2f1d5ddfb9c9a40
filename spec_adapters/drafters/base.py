"""The ``Drafter`` protocol every drafter kind implements, and the pool-level checks.

A drafter keeps its own view of the *verified* context. Three verbs (see
``docs/architecture.md``, "one round"):

- ``start(prompt_ids)``: reset to a new query and prefill the prompt;
- ``propose(k, sampling, generator)``: draft ``k`` tokens from the verified context by sampling
  from the warped distribution, returning the tokens and the warped distributions ``q`` they were
  drawn from; nothing is committed;
- ``extend(tokens)``: append verified tokens and return the logits that predicted each of them,
  which is what counterfactual evaluation (gamma for every drafter) needs.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from spec_adapters.core.sampling import SamplingConfig

__all__ = ["Drafter", "check_k", "check_vocab", "sample_draft"]


@runtime_checkable
class Drafter(Protocol):
    """What the decoders need from a drafter. Distributions are over the full target vocabulary.

    Attributes
    ----------
    name : str
        Shown in stats and benchmarks.
    vocab_size : int
        Length ``V`` of the distributions it returns; must equal the target's.
    """

    name: str
    vocab_size: int

    def start(self, prompt_ids: torch.LongTensor) -> None:
        """Reset to a new query: prefill the 1-D prompt; cache the next-token logits."""

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None
                ) -> tuple[torch.LongTensor, torch.Tensor]:
        """Draft ``k`` tokens from the verified context, each sampled from
        ``sampling.probs(logits)``; return tokens (k,) and those warped distributions q (k, V).
        Does not commit anything. ``k`` must be an integer >= 1 (``ValueError`` otherwise)."""

    def extend(self, tokens: torch.LongTensor) -> torch.Tensor:
        """Append ``m`` verified tokens; return the logits (m, V) that predicted each of them
        (row j = logits given context + tokens[:j])."""


def check_k(k) -> None:
    """``propose``'s draft length must be an integer >= 1 (a ``ValueError`` otherwise)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k (number of draft tokens) must be an integer >= 1, got {k!r}")


def sample_draft(k: int, sampling: SamplingConfig, generator: torch.Generator | None,
                 logits_after: Callable[[torch.LongTensor], torch.Tensor]
                 ) -> tuple[torch.LongTensor, torch.Tensor]:
    """Draft ``k`` tokens autoregressively from a drafter's next-token logits.

    For ``j = 0 .. k-1``: ``q_j = sampling.probs(logits_after(x_{<j}))`` and
    ``x_j ~ q_j`` (``torch.multinomial`` with ``generator``; at temperature 0 ``q_j`` is the
    one-hot argmax, so greedy drafting is the same path). This is the ``propose`` step every
    :class:`Drafter` shares; what differs between drafters is only ``logits_after``.

    Parameters
    ----------
    k : int
        Number of draft tokens, an integer >= 1 (checked by :func:`check_k` before anything
        runs).
    sampling : SamplingConfig
        The warping (temperature / top-p / top-k) applied to every row.
    generator : torch.Generator or None
    logits_after : callable
        ``logits_after(drafts)`` returns the logits (V,) of the token after the verified
        context followed by the 1-D ``drafts`` tensor. It is called ``k`` times, with
        ``drafts[:0], drafts[:1], ..., drafts[:k-1]`` in that order (never after the last
        draft), so a cached model may feed only the newest token ``drafts[-1:]``.

    Returns
    -------
    tokens : torch.LongTensor
        ``(k,)`` int64.
    q : torch.Tensor
        ``(k, V)``, row ``j`` the warped distribution ``x_j`` was drawn from.
    """
    check_k(k)
    tokens: list[torch.Tensor] = []
    qs: list[torch.Tensor] = []
    for _ in range(k):
        drafts = torch.cat(tokens) if tokens else torch.empty(0, dtype=torch.long)
        q = sampling.probs(logits_after(drafts))
        tokens.append(torch.multinomial(q, 1, generator=generator).long())
        qs.append(q)
    return torch.cat(tokens), torch.stack(qs)


def check_vocab(drafters, vocab_size: int) -> None:
    """Raise ``ValueError`` naming every drafter whose vocabulary differs from the target's."""
    bad = [f"{d.name!r} ({d.vocab_size})" for d in drafters if d.vocab_size != vocab_size]
    if bad:
        raise ValueError(f"drafter vocabulary size mismatch: the target has {vocab_size} "
                         f"logits but drafters {', '.join(bad)} differ; a drafter must share the "
                         "target's tokenizer and vocabulary")
