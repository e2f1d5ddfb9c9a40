"""The ``Drafter`` protocol every drafter kind implements, and the pool-level checks.

A drafter keeps its own view of the *verified* context. Three verbs (see
``docs/architecture.md``, "one round"):

- ``start(prompt_ids)``: reset to a new query and prefill the prompt;
- ``propose(k, sampling, generator)``: draft up to ``k`` tokens from the verified context by
  sampling from the warped distribution, returning a
  :class:`~spec_adapters.core.proposal.Proposal`: the tokens and the warped rows ``q`` they were
  drawn from, in their cheapest exact form (a point mass under greedy decoding, a sparse
  mixture for an n-gram at temperature > 0, dense rows for a model); fewer than ``k`` tokens, or
  none, when the drafter abstains (no context match); nothing is committed;
- ``extend(tokens)``: append verified tokens and return what predicted each of them, unwarped:
  logits ``(m, V)`` or a :mod:`~spec_adapters.core.proposal` form with ``m`` rows (a zero row
  where the drafter would have abstained). Counterfactual evaluation (gamma for every drafter)
  warps it with :func:`~spec_adapters.core.proposal.warp` and needs nothing more.

Optionally, ``extend_argmax(tokens)``: the same append, returning only the argmax of each
prediction (``-1`` where it abstains) as a numpy array, i.e. ``warp(extend(tokens),
greedy).tokens``; greedy evaluation needs nothing more, and the model-free drafters answer it
without building their rows (see :data:`GREEDY_VERB`).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from spec_adapters.core.proposal import PointMass, Proposal, Rows, cat_rows, draw, warp

if TYPE_CHECKING:
    from spec_adapters.core.sampling import SamplingConfig

__all__ = ["GREEDY_VERB", "Drafter", "check_k", "check_vocab", "sample_draft"]

# the optional verb greedy evaluation calls instead of ``warp(extend(tokens), greedy)``:
# ``extend_argmax(tokens: numpy int64 (m,)) -> numpy int64 (m,)``
GREEDY_VERB = "extend_argmax"


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
                ) -> Proposal:
        """Draft up to ``k`` tokens from the verified context, each sampled from its warped
        distribution; return tokens ``(j,)``, ``j <= k``, and those warped rows ``q`` (``j``
        rows; ``j < k``: the drafter stopped). Does not commit anything. ``k`` must be an
        integer >= 1 (``ValueError`` otherwise)."""

    def extend(self, tokens: torch.LongTensor) -> torch.Tensor | Rows:
        """Append ``m`` verified tokens; return the unwarped predictions of each of them (row
        j given context + tokens[:j]): logits ``(m, V)`` or a form with ``m`` rows."""


def check_k(k) -> None:
    """``propose``'s draft length must be an integer >= 1 (a ``ValueError`` otherwise)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k (number of draft tokens) must be an integer >= 1, got {k!r}")


def sample_draft(k: int, sampling: SamplingConfig, generator: torch.Generator | None,
                 predict_after: Callable[[torch.LongTensor], torch.Tensor | Rows | None],
                 vocab_size: int) -> Proposal:
    """Draft up to ``k`` tokens autoregressively from a drafter's next-token predictions.

    For ``j = 0 .. k-1``: ``q_j = warp(predict_after(x_{<j}), sampling)`` and ``x_j ~ q_j``
    (:func:`~spec_adapters.core.proposal.draw`: greedy warps to a point mass, so a greedy draft
    builds no V-sized tensor beyond what the prediction itself holds). A ``None`` prediction
    stops the draft there (the drafter abstains). This is the ``propose`` step every
    :class:`Drafter` shares; what differs between drafters is only ``predict_after``.

    Parameters
    ----------
    k : int
        Largest number of draft tokens, an integer >= 1 (checked by :func:`check_k` before
        anything runs).
    sampling : SamplingConfig
        The warping (temperature / top-p / top-k) applied to every row.
    generator : torch.Generator or None
    predict_after : callable
        ``predict_after(drafts)`` returns the prediction of the token after the verified
        context followed by the 1-D ``drafts`` tensor: logits ``(V,)``, an unwarped one-row
        form, or ``None`` (abstain). It is called with ``drafts[:0], drafts[:1], ...`` in that
        order (never after the last draft), so a cached model may feed only the newest token
        ``drafts[-1:]``.
    vocab_size : int
        ``V`` (the vocabulary of an empty proposal).

    Returns
    -------
    Proposal
        ``tokens`` ``(j,)`` int64 and ``q``, ``j`` rows (row ``i`` the warped distribution
        ``x_i`` was drawn from), ``j <= k``.
    """
    check_k(k)
    tokens: list[int] = []
    rows: list[Rows] = []
    for _ in range(k):
        pred = predict_after(torch.tensor(tokens, dtype=torch.long))
        if pred is None:
            break
        q = warp(pred.view(1, -1) if isinstance(pred, torch.Tensor) else pred, sampling)
        tokens.append(draw(q, generator))
        rows.append(q)
    q = cat_rows(rows) if rows else PointMass(torch.zeros(0, dtype=torch.long), vocab_size)
    return Proposal(torch.tensor(tokens, dtype=torch.long), q)


def check_vocab(drafters, vocab_size: int) -> None:
    """Raise ``ValueError`` naming every drafter whose vocabulary differs from the target's."""
    bad = [f"{d.name!r} ({d.vocab_size})" for d in drafters if d.vocab_size != vocab_size]
    if bad:
        raise ValueError(f"drafter vocabulary size mismatch: the target has {vocab_size} "
                         f"logits but drafters {', '.join(bad)} differ; a drafter must share the "
                         "target's tokenizer and vocabulary")
