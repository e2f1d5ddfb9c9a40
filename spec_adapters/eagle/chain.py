"""EAGLE heads as drafters of the single-draft round loop, beside n-gram, suffix and prompt
lookup drafters in one pool.

:class:`HeadDrafters` wraps a :class:`~.pool.HeadPool`; iterating it gives one
:class:`HeadDrafter` per head, each a :class:`~spec_adapters.drafters.Drafter` that also reads
target features (its ``feature_layers``). The chain scheme
(:class:`~spec_adapters.decoding.chain.ChainScheme`) hands it the features of the rows the
verification pass already scored (``TargetModel.verify_features``: the accepted drafts and the
last token, ``output_hidden_states`` of that pass; never an extra target call):

- ``start(prompt, features)``: the prompt's pairs ``(f_t, x_{t+1})`` appended to every head;
- ``propose(k, sampling, gen)``: a chain of ``k`` tokens from the head's pending root (the
  logits its last pair gave) and its own cache, fed its own hidden state past the first token
  (EAGLE's drafting, :func:`~.tree.draft_tree` with one child per node), committing nothing;
- ``extend(tokens, features)`` / ``extend_argmax``: the verified pairs appended to **every**
  head in one batched forward (the first member of a round runs it, the others read their rows):
  what each head predicted at each verified token, for the counterfactual evaluation.

A head's logits cover its draft vocabulary only; its distributions are
:class:`~spec_adapters.core.proposal.Reduced` rows (the other tokens of the target vocabulary
have probability 0, so they are never proposed: acceptance, not losslessness, pays for it), and
drawing, warping and the sampled gamma cost the draft vocabulary's ``Vd`` columns, not ``V``.
Heads always extend, whatever the policy: the pool is batched and keeps all heads at one context
length (no lazy catch-up).
"""

from __future__ import annotations

import numpy as np
import torch

from spec_adapters.core.proposal import Proposal, Reduced
from spec_adapters.drafters.base import check_k, sample_draft

from .head import EagleHead
from .pool import HeadPool

__all__ = ["HeadDrafter", "HeadDrafters"]


class HeadDrafters:
    """``N`` EAGLE heads over one target as ``N`` chain drafters sharing one batched pool.

    Parameters
    ----------
    heads : list of EagleHead
        Each trained for ``target`` (``ValueError`` otherwise), all reading the same feature
        layers.
    target : transformers causal LM
    batched : bool, default True
        Evaluate same-architecture heads in one stacked forward.
    names : list of str, optional
        Default: each head's ``config.extra["name"]``, else ``eagle<i>``.
    """

    def __init__(self, heads, target, batched: bool = True, names=None) -> None:
        heads = list(heads)
        self.pool = HeadPool(heads, target, batched=batched)
        self.feature_layers = self.pool.feature_layers
        names = list(names) if names is not None else [
            h.config.extra.get("name") or f"eagle{i}" for i, h in enumerate(heads)]
        self.members = [HeadDrafter(self, i, names[i]) for i in range(self.pool.n)]
        self._started = set(range(self.pool.n))  # members started in the current query
        self._round: tuple[int, torch.Tensor, list[torch.Tensor]] | None = None

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self):
        return iter(self.members)

    def __getitem__(self, i: int) -> HeadDrafter:
        return self.members[i]

    def _start(self, index: int, prompt: torch.LongTensor, features: torch.Tensor | None
               ) -> None:
        """Member ``index`` starts a query: the first member to start one (a member started
        again means a new query) resets the pool and appends the prompt's pairs."""
        if index in self._started:
            self.pool.reset()
            self._started, self._round = set(), None
            if features is not None and prompt.numel() > 1:
                self.pool.extend(features, prompt[1:])
        self._started.add(index)

    def _extend(self, start: int, tokens: torch.LongTensor, features: torch.Tensor
                ) -> list[torch.Tensor]:
        """Every head's predictions of ``tokens`` (appended at pair ``start``, once per round
        for all members: :meth:`HeadPool.extend_predicting`)."""
        if self._round is not None and self._round[0] == start and \
                torch.equal(self._round[1], tokens):
            return self._round[2]
        if start != self.pool.length:
            raise ValueError(f"extend at pair {start}, the heads hold {self.pool.length}: every "
                             "head member must be given the same verified tokens")
        preds = self.pool.extend_predicting(features, tokens)
        self._round = (start, tokens.clone(), preds)
        return preds


class HeadDrafter:
    """One head of a :class:`HeadDrafters` group as a chain drafter (see the module
    docstring). ``name``, ``vocab_size`` (the target's), ``feature_layers``."""

    def __init__(self, group: HeadDrafters, index: int, name: str) -> None:
        self.group, self.index, self.name = group, index, name
        self.head: EagleHead = group.pool.heads[index]
        self.vocab_size = int(self.head.config.target_vocab_size)
        self.feature_layers = group.feature_layers
        self._pairs = 0  # pairs this member has appended

    def start(self, prompt_ids: torch.LongTensor, features: torch.Tensor | None = None) -> None:
        """Reset to a new query: the prompt's pairs (``features``: the target's prefill
        features of ``prompt[:-1]``)."""
        self.group._start(self.index, prompt_ids.view(-1).cpu(), features)
        self._pairs = self.group.pool.length

    def propose(self, k: int, sampling, generator) -> Proposal:
        """A chain of up to ``k`` tokens (none before the head has read a pair)."""
        check_k(k)
        pool, i = self.group.pool, self.index
        root = pool.pending_logits[i]
        state = {"h": pool.pending_hidden[i], "kv": pool.cache_of(i)}

        @torch.no_grad()
        def predict_after(drafts: torch.LongTensor):
            if root is None:
                return None
            if drafts.numel() == 0:
                return self._rows(root.view(1, -1))
            k_, v_ = state["kv"]
            pos = torch.tensor([self._pairs + drafts.numel() - 1])
            emb = self.head.embed(drafts[-1:]).unsqueeze(0)
            logits, fed, nk, nv = self.head(state["h"].view(1, 1, -1), emb, pos, k_, v_)
            state["h"], state["kv"] = fed[0, -1], (torch.cat([k_, nk], 2),
                                                   torch.cat([v_, nv], 2))
            return self._rows(logits[0])

        return sample_draft(k, sampling, generator, predict_after, self.vocab_size)

    def extend(self, tokens: torch.LongTensor, features: torch.Tensor | None = None
               ) -> Reduced:
        """Append the verified pairs; the ``m`` distributions that predicted each token (on the
        draft vocabulary; a uniform row over it where no pair existed yet)."""
        preds = self._advance(tokens, features)
        missing = int(tokens.numel()) - preds.shape[0]
        if missing:  # uniform over the draft vocabulary: the head had nothing to go on
            preds = torch.cat([preds.new_zeros(missing, preds.shape[1]), preds])
        return self._rows(preds)

    def extend_argmax(self, tokens: np.ndarray, features: torch.Tensor | None = None
                      ) -> np.ndarray:
        """The same append; the target id of each prediction's argmax (``-1`` where no pair
        existed yet)."""
        preds = self._advance(torch.from_numpy(np.asarray(tokens, dtype=np.int64)), features)
        top = self.head.d2t[preds.argmax(-1)].cpu().numpy() if preds.shape[0] else \
            np.zeros(0, dtype=np.int64)
        pad = len(tokens) - top.shape[0]
        return np.concatenate([np.full(pad, -1, dtype=np.int64), top.astype(np.int64)])

    def _advance(self, tokens: torch.LongTensor, features: torch.Tensor | None):
        """Append; the head's ``(m', Vd)`` predictions of the last ``m'`` tokens (``m' = m``
        unless the prompt had one token: then the first has none)."""
        if features is None:
            raise ValueError(f"{self.name}: extend needs the target's features of the verified "
                             "rows (an EAGLE head reads them): run it in a pool whose scheme "
                             "hands them over (HedgeSpecDecoder)")
        tokens = tokens.view(-1).cpu()
        preds = self.group._extend(self._pairs, tokens, features)[self.index]
        self._pairs += int(tokens.numel())
        return preds

    def _rows(self, logits: torch.Tensor) -> Reduced:
        """Draft-vocabulary logits ``(m, Vd)`` -> their float32 distributions on it."""
        return Reduced(torch.softmax(logits.float(), -1), self.head.d2t, self.vocab_size)
