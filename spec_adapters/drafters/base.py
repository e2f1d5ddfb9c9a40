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
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from spec_adapters.core.sampling import SamplingConfig

__all__ = ["Drafter", "check_k", "check_vocab"]


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


def check_vocab(drafters, vocab_size: int) -> None:
    """Raise ``ValueError`` naming every drafter whose vocabulary differs from the target's."""
    bad = [f"{d.name!r} ({d.vocab_size})" for d in drafters if d.vocab_size != vocab_size]
    if bad:
        raise ValueError(f"drafter vocabulary size mismatch: the target has {vocab_size} "
                         f"logits but drafters {', '.join(bad)} differ; a drafter must share the "
                         "target's tokenizer and vocabulary")
