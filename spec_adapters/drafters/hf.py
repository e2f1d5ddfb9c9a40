"""transformers causal LMs as drafters: ``HFDrafter`` and ``StackedHFDrafters`` (N models, one
vmapped pass).

Both implement :class:`spec_adapters.drafters.base.Drafter`.
"""

from __future__ import annotations

import copy

import torch

from spec_adapters.drafters.base import Drafter, sample_draft
from spec_adapters.hf.target import (
    cache_kwarg,
    context_length,
    crop_cache,
    forward_cached,
    new_cache,
    output_vocab_size,
)

__all__ = ["HFDrafter", "StackedHFDrafters", "as_drafter", "expand_drafters"]


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
        self._kwarg = cache_kwarg(model)
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

        def logits_after(drafts: torch.LongTensor) -> torch.Tensor:
            return self._next_logits if drafts.numel() == 0 else self._forward(drafts[-1:])[-1]

        try:
            return sample_draft(k, sampling, generator, logits_after, self.vocab_size)
        finally:
            crop_cache(self._cache, self._length)  # drafts are not verified: forget them

    def extend(self, tokens: torch.LongTensor) -> torch.Tensor:
        if self._next_logits is None:
            raise RuntimeError("HFDrafter.extend called before start()")
        out = self._forward(tokens.view(-1))
        rows = torch.cat([self._next_logits.view(1, -1), out[:-1]])
        self._next_logits = out[-1]
        self._length += int(tokens.numel())
        return rows


class StackedHFDrafters:
    """``N`` same-architecture transformers drafters evaluated in one batched forward pass.

    The weights are stacked (``torch.func.stack_module_state``) and one ``vmap`` of
    ``functional_call`` runs all ``N`` models on the same verified tokens, each with its own KV
    cache (stacked as ``(N, 1, heads, T, head_dim)`` per layer). Iterating gives ``N`` member
    drafters, each a :class:`Drafter`: the first member's ``extend`` runs the batched pass for
    everyone and the others read their rows from it, so the decoder's evaluation loop is
    unchanged. All members share one context: a member that is behind (lazy catch-up under a
    bandit policy) reads the stored rows; ``propose`` runs that member alone
    (``functional_call`` with its slice of the weights and cache) and commits nothing.

    Parameters
    ----------
    models : sequence of transformers.PreTrainedModel
        At least one; same class and parameter shapes (else ``ValueError``).
    names : sequence of str, optional

    Notes
    -----
    Memory: the stacked weights are a copy (``N`` x one drafter). Attention runs in the
    ``eager`` implementation, which batches under ``vmap`` (``sdpa`` has no batching rule on CPU
    and would loop). See ``benchmarks/single.py`` and ``docs/decoding.md`` for measured costs.
    """

    def __init__(self, models, names=None) -> None:
        from torch.func import stack_module_state

        models = list(models)
        if not models:
            raise ValueError("StackedHFDrafters needs at least one model")
        first = models[0]
        shapes = {k: v.shape for k, v in first.state_dict().items()}
        for i, m in enumerate(models[1:], 1):
            if type(m) is not type(first) or \
                    {k: v.shape for k, v in m.state_dict().items()} != shapes:
                raise ValueError(f"cannot stack drafter {i}: its architecture differs from "
                                 f"drafter 0 ({type(m).__name__} vs {type(first).__name__})")
        self.n = len(models)
        self.params, self.buffers = stack_module_state([m.eval() for m in models])
        # tied weights (e.g. LM head = embeddings): stack_module_state names a shared parameter
        # once, and the meta copy below loses the tie, so name every alias explicitly
        canonical = {}
        for name, prm in first.named_parameters(remove_duplicate=False):
            canonical.setdefault(id(prm), name)
            if name not in self.params:
                self.params[name] = self.params[canonical[id(prm)]]
        self.base = copy.deepcopy(first).to("meta")
        # eager attention batches under vmap; sdpa has no batching rule on CPU (a slow loop)
        self.base.config._attn_implementation = "eager"
        self.config = first.config
        self.vocab_size = output_vocab_size(first)
        self.device = next(first.parameters()).device
        self._kwarg = cache_kwarg(first)
        self._layers = first.config.get_text_config().num_hidden_layers \
            if hasattr(first.config, "get_text_config") else first.config.num_hidden_layers
        names = list(names) if names is not None else [
            f"stacked{i}:" + (getattr(m.config, "name_or_path", "") or type(m).__name__)
            for i, m in enumerate(models)]
        self.members = [_StackedMember(self, i, names[i]) for i in range(self.n)]
        emb = first.get_input_embeddings()
        self._embed_key = next((k for k, p in first.named_parameters()
                                if type(emb) is torch.nn.Embedding and p is emb.weight), None)
        self._prompt: torch.Tensor | None = None
        self._fresh = False

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(self.members)

    def __getitem__(self, i):
        return self.members[i]

    # -- batched forward ---------------------------------------------------------------
    def _one(self, params, buffers, keys, values, ids, embeds=None):
        from torch.func import functional_call

        cache = new_cache(self.base)
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            cache.update(k, v, layer)
        inputs = {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}
        out = functional_call(self.base, (params, buffers), (),
                              {**inputs, "use_cache": True, self._kwarg: cache},
                              tie_weights=False, strict=True)
        return (out.logits[0].float(), [cache.layers[i].keys for i in range(self._layers)],
                [cache.layers[i].values for i in range(self._layers)])

    def _one_fresh(self, params, buffers, ids, embeds=None):
        return self._one(params, buffers, [], [], ids, embeds)

    def _batched(self, ids: torch.LongTensor) -> torch.Tensor:
        """All members on ``ids`` appended to their caches; returns logits (N, m, V).

        With a plain ``nn.Embedding`` input layer the lookup is done outside ``vmap`` (indexing
        the stacked table): ``embedding`` under ``vmap`` with batched weights is very slow.
        """
        from torch.func import vmap

        ids = ids.view(1, -1).to(self.device)
        embeds = None if self._embed_key is None else \
            self.params[self._embed_key][:, ids[0]].unsqueeze(1)  # (N, 1, m, H)
        e_dim = None if embeds is None else 0
        with torch.inference_mode():
            if self.length == 0:
                logits, keys, values = vmap(self._one_fresh, in_dims=(0, 0, None, e_dim))(
                    self.params, self.buffers, ids, embeds)
            else:
                logits, keys, values = vmap(self._one, in_dims=(0, 0, 0, 0, None, e_dim))(
                    self.params, self.buffers, self.keys, self.values, ids, embeds)
        self.keys, self.values = keys, values
        return logits

    def _member_forward(self, i: int, cache, ids: torch.LongTensor) -> torch.Tensor:
        from torch.func import functional_call

        params = {k: v[i] for k, v in self.params.items()}
        buffers = {k: v[i] for k, v in self.buffers.items()}
        with torch.inference_mode():
            out = functional_call(self.base, (params, buffers), (),
                                  {"input_ids": ids.view(1, -1).to(self.device),
                                   "use_cache": True, self._kwarg: cache},
                                  tie_weights=False, strict=True)
        return out.logits[0].float()

    # -- shared context ----------------------------------------------------------------
    def _start(self, prompt: torch.LongTensor) -> None:
        self.length, self.keys, self.values = 0, None, None
        self._history: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self.next_logits = self._batched(prompt)[:, -1]
        self.length = int(prompt.numel())
        self._prompt, self._fresh = prompt.clone(), True
        for m in self.members:
            m.length = None

    def _member_start(self, member, prompt: torch.LongTensor) -> None:
        if not (self._fresh and self._prompt is not None and
                torch.equal(self._prompt, prompt.cpu())):
            self._start(prompt.cpu())
        member.length = self.length

    def _advance(self, tokens: torch.LongTensor) -> None:
        logits = self._batched(tokens)
        rows = torch.cat([self.next_logits.unsqueeze(1), logits[:, :-1]], 1)
        self._history.append((self.length, tokens.cpu().clone(), rows))
        self.next_logits = logits[:, -1]
        self.length += int(tokens.numel())
        self._fresh = False

    def _member_extend(self, member, tokens: torch.LongTensor) -> torch.Tensor:
        tokens = tokens.view(-1).cpu()
        start, end = member.length, member.length + int(tokens.numel())
        if end > self.length:  # run everyone on the part nobody has seen yet
            self._advance(tokens[self.length - start:])
        pieces_tok, pieces_rows = [], []
        for pos, tok, rows in self._history:
            lo, hi = max(pos, start), min(pos + tok.numel(), end)
            if lo < hi:
                pieces_tok.append(tok[lo - pos:hi - pos])
                pieces_rows.append(rows[member.index, lo - pos:hi - pos])
        if not torch.equal(torch.cat(pieces_tok), tokens):
            raise ValueError(f"{member.name}: extend() tokens differ from the ones the other "
                             "stacked drafters were given at the same positions")
        member.length = end
        oldest = min(m.length for m in self.members if m.length is not None)
        self._history = [h for h in self._history if h[0] + h[1].numel() > oldest]
        return torch.cat(pieces_rows)

    def _member_propose(self, member, k, sampling, generator):
        if member.length != self.length:
            raise RuntimeError(f"{member.name}: extend() to the verified context before propose()")
        i = member.index
        cache = new_cache(self.base)
        for layer in range(self._layers):
            cache.update(self.keys[layer][i], self.values[layer][i], layer)

        def logits_after(drafts: torch.LongTensor) -> torch.Tensor:
            # the stacked cache is not touched: update() concatenates into a copy
            return self.next_logits[i] if drafts.numel() == 0 else \
                self._member_forward(i, cache, drafts[-1:])[-1]

        return sample_draft(k, sampling, generator, logits_after, self.vocab_size)


class _StackedMember:
    """One drafter of a :class:`StackedHFDrafters` group (implements :class:`Drafter`)."""

    def __init__(self, group: StackedHFDrafters, index: int, name: str) -> None:
        self.group, self.index, self.name = group, index, name
        self.vocab_size = group.vocab_size
        self.length: int | None = None

    def __repr__(self) -> str:
        return f"StackedHFDrafters[{self.index}]({self.name!r})"

    def start(self, prompt_ids: torch.LongTensor) -> None:
        if prompt_ids.dim() != 1 or prompt_ids.numel() == 0:
            raise ValueError(f"prompt_ids must be a non-empty 1-D tensor, got shape "
                             f"{tuple(prompt_ids.shape)}")
        self.group._member_start(self, prompt_ids)

    def propose(self, k, sampling, generator=None):
        return self.group._member_propose(self, k, sampling, generator)

    def extend(self, tokens: torch.LongTensor) -> torch.Tensor:
        if self.length is None:
            raise RuntimeError(f"{self.name}: extend called before start()")
        return self.group._member_extend(self, tokens)


def expand_drafters(drafters) -> list:
    """Flatten drafter groups (:class:`StackedHFDrafters`, ``spec_adapters.eagle.chain.
    HeadDrafters``: objects with ``members`` that are not drafters themselves) into their
    members; keep the rest."""
    out = []
    for d in drafters:
        members = getattr(d, "members", None)
        out.extend(members if members is not None and not isinstance(d, Drafter) else [d])
    return out


def as_drafter(obj, index: int) -> Drafter:
    """Wrap a transformers model as :class:`HFDrafter`; pass a :class:`Drafter` through."""
    if isinstance(obj, Drafter):
        return obj
    if isinstance(obj, torch.nn.Module) and hasattr(obj, "config"):
        return HFDrafter(obj, name=f"drafter{index}:" + (getattr(obj.config, "name_or_path", "")
                                                         or type(obj).__name__))
    raise ValueError(f"drafters[{index}] is neither a Drafter nor a transformers model: "
                     f"{type(obj).__name__}")
