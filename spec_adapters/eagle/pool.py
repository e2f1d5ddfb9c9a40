"""A pool of EAGLE heads over one target: shared committed context, batched evaluation.

All heads see the same verified pairs ``(f_t, x_{t+1})`` (target features are computed once by
the target), so their caches have the same length and the pool keeps them stacked:
``k, v`` are ``(N, kv, P, d)``. :meth:`HeadPool.extend` runs every head over the newly
verified pairs in **one** forward, one op per layer: a *stacked head* is a copy of the first
head whose linear layers hold all ``N`` heads' weights ``(N, out, in)`` (one batched matmul,
``x @ W^T`` over ``N``) and whose norms hold ``(N, 1, H)`` weights, and
:meth:`EagleHead.forward` runs on it unchanged with the batch dimension ``B = N`` (head ``n``
reads row ``n``). A weight every head holds identically stays one ``(out, in)`` matrix, read
once for all heads' rows. Heads whose architectures differ are evaluated group by group.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as fn
from torch import nn

from .head import EagleHead, _RMSNorm
from .lowrank import DeltaLinear

__all__ = ["HeadPool"]


def _signature(head: EagleHead) -> tuple:
    """What heads stacked together must share: the computation and every weight's name and
    shape (a :mod:`.lowrank` head has delta factors where a plain one has none)."""
    c = head.config
    return (c.hidden_size, c.feature_layers, c.draft_vocab_size, c.num_attention_heads,
            c.num_key_value_heads, c.intermediate_size, c.rope_theta, c.rms_norm_eps,
            next(head.parameters()).dtype,
            tuple((k, tuple(v.shape)) for k, v in head.named_parameters()))


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One tensor if every head holds the same, else the ``(N, ...)`` stack."""
    first = tensors[0].detach()
    if all(torch.equal(first, t) for t in tensors[1:]):
        return first
    return torch.stack([t.detach() for t in tensors])


class _StackedLinear(nn.Module):
    """``N`` heads' linear layer (``nn.Linear`` or :class:`~.lowrank.DeltaLinear`) applied to
    ``x (N, T, in)``, head ``n`` to row ``n``: ``x W^T`` in one matmul, ``W`` shared
    ``(out, in)`` or stacked ``(N, out, in)``, plus ``(x A^T) B^T`` with stacked delta factors
    for low-rank specialists."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.weight = _stack([m.weight for m in layers])
        self.delta_a = self.delta_b = None
        if isinstance(layers[0], DeltaLinear):
            self.delta_a = _stack([m.delta_a for m in layers])
            self.delta_b = _stack([m.delta_b for m in layers])

    @staticmethod
    def _apply_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return fn.linear(x, w) if w.dim() == 2 else x @ w.mT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self._apply_weight(x, self.weight)
        if self.delta_a is not None:
            y = y + self._apply_weight(self._apply_weight(x, self.delta_a), self.delta_b)
        return y


def _stacked_head(heads: list[EagleHead]) -> tuple[EagleHead, set[str]]:
    """A copy of ``heads[0]`` whose layers hold every head's weights (see the module
    docstring; its forward takes the heads as the batch dimension), and the names of the
    weights kept once (every head holds them identically)."""
    modules = [dict(h.named_modules()) for h in heads]
    embed = heads[0].embed_weight
    stacked = copy.deepcopy(heads[0], memo={} if embed is None else {id(embed): embed})
    shared = set()
    for name, module in list(stacked.named_modules()):
        layers = [m[name] for m in modules]
        if isinstance(module, nn.Linear | DeltaLinear):
            parent, _, leaf = name.rpartition(".")
            linear = _StackedLinear(layers)
            setattr(stacked.get_submodule(parent), leaf, linear)
            shared |= {f"{name}.{k}" for k in ("weight", "delta_a", "delta_b")
                       if getattr(linear, k) is not None and getattr(linear, k).dim() == 2}
        elif isinstance(module, _RMSNorm):
            w = _stack([m.weight for m in layers])
            module.weight = nn.Parameter(w if w.dim() == 1 else w.unsqueeze(1),
                                         requires_grad=False)
            shared |= {f"{name}.weight"} if w.dim() == 1 else set()
    return stacked, shared


class _Group:
    """Heads of one architecture, evaluated as one stacked head (a single head as itself);
    ``shared``: the names of the weights kept once."""

    def __init__(self, heads: list[EagleHead], members: list[int]):
        self.members = members
        self.heads = heads
        self.stacked, self.shared = (heads[0], set()) if len(heads) == 1 else \
            _stacked_head(heads)

    def __call__(self, feats, emb, pos, pk, pv):
        """``feats (1, m, F*H)``, ``emb (1, m, H)``, caches ``(N, kv, P, d)`` -> logits
        ``(N, m, Vd)``, fed hidden ``(N, m, H)``, new keys and values ``(N, kv, m, d)``.
        The features are fused once: a shared ``fc`` gives one ``(1, m, H)`` row set for all
        heads, a stacked one broadcasts to ``(N, m, H)``."""
        n = len(self.heads)
        h = self.stacked.fuse(feats).expand(n, -1, -1)
        return self.stacked(h, emb.expand(n, -1, -1), pos, pk, pv)


class HeadPool:
    """``N`` heads bound to one target, with stacked caches and batched evaluation.

    Parameters
    ----------
    heads : list of EagleHead
        Non-empty; each is checked against ``target`` (``ValueError`` otherwise), bound
        to its embedding table, put in eval mode and frozen (the pool only evaluates; a
        specialist trained with ``midlayer_only`` beside a trainable base would otherwise
        not stack).
    target : transformers causal LM
    batched : bool
        Evaluate same-architecture heads in one stacked forward (``False``: one call per head,
        the reference the tests compare against).
    """

    def __init__(self, heads, target, batched: bool = True):
        heads = list(heads)
        if not heads:
            raise ValueError("the pool of EAGLE heads is empty: give at least one head")
        for i, h in enumerate(heads):
            if not isinstance(h, EagleHead):
                raise ValueError(f"heads[{i}] is {type(h).__name__}, not an EagleHead")
            h.bind(target)
            h.eval().requires_grad_(False)
        fl = {h.config.feature_layers for h in heads}
        if len(fl) != 1:
            raise ValueError(f"all heads must read the same target feature layers, got {fl}")
        self.heads = heads
        self.n = len(heads)
        self.feature_layers = heads[0].config.feature_layers
        self.vocab_size = heads[0].config.target_vocab_size
        groups: dict[tuple, list[int]] = {}
        for i, h in enumerate(heads):
            groups.setdefault(_signature(h) if batched else (i,), []).append(i)
        self.groups = [_Group([heads[i] for i in m], m) for m in groups.values()]
        self.reset()

    def reset(self) -> None:
        """Forget the context (a new query)."""

        self._gk: list[torch.Tensor | None] = [None] * len(self.groups)
        self._gv: list[torch.Tensor | None] = [None] * len(self.groups)
        self.length = 0
        self.pending_logits: list[torch.Tensor | None] = [None] * self.n  # (Vd,)
        self.pending_hidden: list[torch.Tensor | None] = [None] * self.n  # (H,)

    @torch.no_grad()
    def extend(self, features: torch.Tensor, next_tokens: torch.LongTensor):
        """Append ``m`` verified pairs ``(f_t, x_{t+1})`` to every head.

        Parameters
        ----------
        features : ``(m, F*H)`` target features at positions ``P .. P+m-1``.
        next_tokens : ``(m,)`` the tokens ``x_{t+1}`` following each feature.

        Returns
        -------
        list of ``(m, Vd)`` draft logits per head; row ``r`` predicts the token after
        ``next_tokens[r]``. The last row (and its hidden) become the head's pending root.
        """
        m = int(next_tokens.numel())
        pos = torch.arange(self.length, self.length + m)
        emb = self.heads[0].embed(next_tokens.view(-1)).unsqueeze(0)
        feats = features.to(emb.device).unsqueeze(0)  # the head's fuse casts the dtype
        out: list[torch.Tensor | None] = [None] * self.n
        for g, grp in enumerate(self.groups):
            pk, pv = self._gk[g], self._gv[g]
            if pk is None:
                c = grp.heads[0].config
                shape = (len(grp.members), c.num_key_value_heads, 0, c.head_dim)
                pk = pv = emb.new_zeros(shape)  # the heads' dtype
            logits, z, nk, nv = grp(feats, emb, pos, pk, pv)
            self._gk[g] = torch.cat([pk, nk], 2)
            self._gv[g] = torch.cat([pv, nv], 2)
            for r, i in enumerate(grp.members):
                out[i] = logits[r]
                self.pending_logits[i] = logits[r, -1]
                self.pending_hidden[i] = z[r, -1]
        self.length += m
        return out

    def extend_predicting(self, features: torch.Tensor, next_tokens: torch.LongTensor
                          ) -> list[torch.Tensor]:
        """:meth:`extend`, returning instead what predicted each of ``next_tokens``: per head
        the pending root, then the new rows but the last, ``(m, Vd)`` (``(m - 1, Vd)`` when no
        head had a root yet: a one-token prompt; the pool extends all heads together, so
        either all had one or none)."""
        before = list(self.pending_logits)
        rows = self.extend(features, next_tokens)
        return [r[:-1] if b is None else torch.cat([b.view(1, -1), r[:-1]])
                for b, r in zip(before, rows, strict=True)]

    def cache_of(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Head ``i``'s committed cache ``(1, kv, P, d)`` keys and values."""
        for g, grp in enumerate(self.groups):
            if i in grp.members:
                r = grp.members.index(i)
                if self._gk[g] is None:
                    c = grp.heads[0].config
                    z = grp.heads[0].fc.weight.new_zeros(1, c.num_key_value_heads, 0, c.head_dim)
                    return z, z
                return self._gk[g][r:r + 1], self._gv[g][r:r + 1]
        raise IndexError(i)

    def children(self, i: int, logits: torch.Tensor, top_k: int) -> torch.LongTensor:
        """Head ``i``'s ``top_k`` children (target ids) for each row of ``logits (m, Vd)``."""
        k = min(top_k, logits.shape[-1])
        return self.heads[i].d2t[torch.topk(logits, k, dim=-1).indices]
