"""Drafters: the ``Drafter`` protocol every drafter kind implements, and ``HFDrafter``.

A drafter keeps its own view of the *verified* context. Three verbs (see
``docs/architecture.md``, "the single-draft round"):

- ``start(prompt_ids)``: reset to a new query and prefill the prompt;
- ``propose(k, sampling, generator)``: draft ``k`` tokens from the verified context by sampling
  from the warped distribution, returning the tokens and the warped distributions ``q`` they were
  drawn from; nothing is committed;
- ``extend(tokens)``: append verified tokens and return the logits that predicted each of them,
  which is what counterfactual evaluation (gamma for every drafter) needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from spec_adapters.target import (
    _cache_kwarg,
    context_length,
    crop_cache,
    forward_cached,
    new_cache,
    output_vocab_size,
)

if TYPE_CHECKING:
    from spec_adapters.sampling import SamplingConfig

__all__ = ["Drafter", "HFDrafter", "as_drafter", "check_vocab"]


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
        Does not commit anything."""

    def extend(self, tokens: torch.LongTensor) -> torch.Tensor:
        """Append ``m`` verified tokens; return the logits (m, V) that predicted each of them
        (row j = logits given context + tokens[:j])."""


class HFDrafter:
    """A transformers causal LM used as a drafter, with its own KV cache.

    The cache always holds the whole verified context; the logits for the next token are kept
    aside, so ``extend(m tokens)`` is one forward pass of ``m`` tokens and ``propose(k)`` is
    ``k - 1`` single-token passes whose cache entries are cropped afterwards.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM sharing the target's vocabulary (checked by the decoder, see
        :func:`check_vocab`).
    name : str, optional
        Defaults to the model's ``name_or_path`` (or its class name).
    """

    def __init__(self, model, name: str | None = None) -> None:
        self.model = model.eval()
        self.name = name or getattr(model.config, "name_or_path", "") or type(model).__name__
        self.vocab_size = output_vocab_size(model)
        self.max_length = context_length(model)
        self.device = next(model.parameters()).device
        self._kwarg = _cache_kwarg(model)
        self._cache = None
        self._length = 0
        self._next_logits: torch.Tensor | None = None

    def __repr__(self) -> str:
        return f"HFDrafter({self.name!r}, vocab_size={self.vocab_size})"

    def _forward(self, ids: torch.LongTensor) -> torch.Tensor:
        return forward_cached(self.model, ids.to(self.device), self._cache, self._kwarg)

    def start(self, prompt_ids: torch.LongTensor) -> None:
        if prompt_ids.dim() != 1 or prompt_ids.numel() == 0:
            raise ValueError(f"prompt_ids must be a non-empty 1-D tensor, got shape "
                             f"{tuple(prompt_ids.shape)}")
        self._cache = new_cache(self.model)
        self._next_logits = self._forward(prompt_ids)[-1]
        self._length = int(prompt_ids.numel())

    def propose(self, k, sampling, generator=None):
        if self._next_logits is None:
            raise RuntimeError("HFDrafter.propose called before start()")
        tokens, qs = [], []
        logits = self._next_logits
        for j in range(k):
            q = sampling.probs(logits)
            token = torch.multinomial(q, 1, generator=generator)
            tokens.append(token)
            qs.append(q)
            if j + 1 < k:
                logits = self._forward(token)[-1]
        crop_cache(self._cache, self._length)  # drafts are not verified: forget them
        return torch.cat(tokens), torch.stack(qs)

    def extend(self, tokens: torch.LongTensor) -> torch.Tensor:
        if self._next_logits is None:
            raise RuntimeError("HFDrafter.extend called before start()")
        out = self._forward(tokens.view(-1))
        rows = torch.cat([self._next_logits.view(1, -1), out[:-1]])
        self._next_logits = out[-1]
        self._length += int(tokens.numel())
        return rows


def as_drafter(obj, index: int) -> Drafter:
    """Wrap a transformers model as :class:`HFDrafter`; pass a :class:`Drafter` through."""
    if isinstance(obj, Drafter):
        return obj
    if isinstance(obj, torch.nn.Module) and hasattr(obj, "config"):
        return HFDrafter(obj, name=f"drafter{index}:" + (getattr(obj.config, "name_or_path", "")
                                                         or type(obj).__name__))
    raise ValueError(f"drafters[{index}] is neither a Drafter nor a transformers model: "
                     f"{type(obj).__name__}")


def check_vocab(drafters, vocab_size: int) -> None:
    """Raise ``ValueError`` naming every drafter whose vocabulary differs from the target's."""
    bad = [f"{d.name!r} ({d.vocab_size})" for d in drafters if d.vocab_size != vocab_size]
    if bad:
        raise ValueError(f"drafter vocabulary size mismatch: the target has {vocab_size} "
                         f"logits but drafters {', '.join(bad)} differ; a drafter must share the "
                         "target's tokenizer and vocabulary")
