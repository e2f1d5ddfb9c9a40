"""A pool of EAGLE heads over one target: shared committed context, batched evaluation.

All heads see the same verified pairs ``(f_t, x_{t+1})`` (target features are computed once by
the target), so their caches have the same length and the pool keeps them stacked:
``k, v`` are ``(N, 1, kv, P, d)``. :meth:`HeadPool.extend` runs every head over the newly
verified pairs in **one** call: the heads' parameters are stacked with
``torch.func.stack_module_state`` and the pure :meth:`EagleHead.forward` is mapped over them
with ``torch.func.vmap(functional_call(...))``. Heads whose architectures differ are evaluated
group by group (each group stacked).
"""

from __future__ import annotations

import copy

import torch
from torch.func import functional_call, stack_module_state, vmap

from .head import EagleHead

__all__ = ["HeadPool"]


def _signature(head: EagleHead) -> tuple:
    """What heads stacked together must share: the computation and every weight's name and
    shape (a :mod:`.lowrank` head has delta factors where a plain one has none)."""
    c = head.config
    return (c.hidden_size, c.feature_layers, c.draft_vocab_size, c.num_attention_heads,
            c.num_key_value_heads, c.intermediate_size, c.rope_theta, c.rms_norm_eps,
            next(head.parameters()).dtype,
            tuple((k, tuple(v.shape)) for k, v in head.named_parameters()))


class _Group:
    """Heads of one architecture, stacked. A weight every head holds identically (the
    generalist's ``fc`` / ``norm`` / ``lm_head`` in specialists fine-tuned with
    ``midlayer_only``) is kept once and mapped unbatched, so its matmul runs once over every
    head's rows (the weight read once: on a CPU the cost is that memory traffic)."""

    def __init__(self, heads: list[EagleHead], members: list[int]):
        self.members = members
        self.heads = heads
        stacked, self.buffers = stack_module_state(heads)
        self.shared = {k for k, v in stacked.items()
                       if len(heads) > 1 and all(torch.equal(v[0], x) for x in v[1:])}
        self.params = {k: (v[0] if k in self.shared else v).detach()
                       for k, v in stacked.items()}
        base = copy.deepcopy(heads[0]).to("meta")
        base.embed_weight = None

        def one(params, buffers, feats, emb, pos, pk, pv):
            return functional_call(base, (params, buffers), (feats, emb, pos, pk, pv),
                                   {"fuse": True})

        dims = {k: None if k in self.shared else 0 for k in self.params}
        self._batched = vmap(one, in_dims=(dims, 0, None, None, None, 0, 0))

    def __call__(self, feats, emb, pos, pk, pv):
        if len(self.heads) == 1:
            out = self.heads[0](feats, emb, pos, pk[0], pv[0], fuse=True)
            return tuple(t.unsqueeze(0) for t in out)
        return self._batched(self.params, self.buffers, feats, emb, pos, pk, pv)


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
        Evaluate same-architecture heads in one vmapped call (``False``: one call per head,
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
                shape = (len(grp.members), 1, c.num_key_value_heads, 0, c.head_dim)
                pk = pv = emb.new_zeros(shape)  # the heads' dtype
            logits, z, nk, nv = grp(feats, emb, pos, pk, pv)
            self._gk[g] = torch.cat([pk, nk], 3)
            self._gv[g] = torch.cat([pv, nv], 3)
            for r, i in enumerate(grp.members):
                out[i] = logits[r, 0]
                self.pending_logits[i] = logits[r, 0, -1]
                self.pending_hidden[i] = z[r, 0, -1]
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
                return self._gk[g][r], self._gv[g][r]
        raise IndexError(i)

    def children(self, i: int, logits: torch.Tensor, top_k: int) -> torch.LongTensor:
        """Head ``i``'s ``top_k`` children (target ids) for each row of ``logits (m, Vd)``."""
        k = min(top_k, logits.shape[-1])
        return self.heads[i].d2t[torch.topk(logits, k, dim=-1).indices]
