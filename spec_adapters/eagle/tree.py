"""EAGLE-2 dynamic draft trees: drafting with a head, one-pass tree verification, compaction.

The tree of a round is rooted at the last verified token ``x_n`` (node 0). Node ``i > 0`` holds
a drafted token; ``parents[i] < i``, siblings ordered by decreasing drafter score (the order
:func:`spec_adapters.core.sampling.tree_accept` tries them in).

Drafting (EAGLE-2, Li et al. 2024): the root's children are the head's ``top_k`` tokens; then
for ``depth - 1`` steps the ``top_k`` frontier nodes (highest cumulative log-probability among
the newest candidates) are expanded by one batched head call into their ``top_k`` children
each. Finally all candidates are re-ranked by cumulative log-probability and the best
``total_tokens`` are kept. A parent's score is never below its child's, so the kept set is
closed under ancestors (ties broken by depth).

Verification feeds ``[x_n] + nodes`` to the target in one forward pass over its KV cache with a
4-D additive attention mask (node ``i`` sees the whole prefix, its ancestors and itself) and
position ids ``n + depth(i)``. Afterwards :func:`compact_cache` keeps the prefix, the root and
the accepted nodes' keys/values, in place, without recomputation.

Devices: the tree's structure (:class:`DraftTree`: tokens, parents, depths) is host-side
bookkeeping, small integer tensors on the CPU; every tensor a model computes with (positions,
masks, token ids, cache indices) is made on the head's / target's device and in its dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from spec_adapters.hf.target import cache_kwarg, crop_cache

__all__ = ["DraftTree", "TreeConfig", "accept_greedy", "ancestor_mask", "compact_cache",
           "draft_tree", "verify_tree"]


@dataclass(frozen=True)
class TreeConfig:
    """Shape of EAGLE-2's dynamic draft tree.

    Parameters
    ----------
    depth : int, >= 1
        Maximum number of drafted tokens along a path (the round's window ``K``).
    top_k : int, >= 1
        Children per expanded node, and number of frontier nodes expanded per step.
        ``top_k = 1`` is a chain: single-draft greedy drafting with the head.
    total_tokens : int, >= depth
        Draft nodes kept after re-ranking (the target verifies ``total_tokens + 1`` tokens).
    """

    depth: int = 5
    top_k: int = 8
    total_tokens: int = 48

    def __post_init__(self) -> None:
        for name in ("depth", "top_k", "total_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"TreeConfig.{name} must be an int, got {v!r}")
        if self.depth < 1:
            raise ValueError(f"TreeConfig.depth must be >= 1, got {self.depth}")
        if self.top_k < 1:
            raise ValueError(f"TreeConfig.top_k must be >= 1, got {self.top_k}")
        if self.total_tokens < self.depth:
            raise ValueError(f"TreeConfig.total_tokens ({self.total_tokens}) must be >= depth "
                             f"({self.depth}), or the deepest level could never be kept")


@dataclass
class DraftTree:
    """A draft tree, root first. ``tokens`` / ``parents`` / ``depths`` are ``(M+1,)``."""

    tokens: torch.LongTensor
    parents: torch.LongTensor
    depths: torch.LongTensor

    @property
    def size(self) -> int:
        """Number of draft nodes ``M`` (root excluded)."""
        return int(self.tokens.numel()) - 1

    def path_to(self, node: int) -> list[int]:
        """Node indices root-excluded from the root to ``node``."""
        out = []
        while node > 0:
            out.append(node)
            node = int(self.parents[node])
        return out[::-1]


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """``(M+1, M+1)`` bool: ``mask[i, j]`` iff node ``j`` is node ``i`` or one of its
    ancestors (``parents[i] < i``). O(M * depth)."""
    par = parents.tolist()
    n = len(par)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = par[j] if j > 0 else -1
    return mask


@torch.no_grad()
def draft_tree(head, past_k, past_v, root_logits: torch.Tensor, root_hidden: torch.Tensor,
               root_token: int, config: TreeConfig) -> DraftTree:
    """Draft an EAGLE-2 dynamic tree with one head.

    Parameters
    ----------
    head : EagleHead
    past_k, past_v : ``(1, kv, P, d)``
        The head's committed cache (pairs ``(f_t, x_{t+1})`` for ``t < P``); not modified.
    root_logits : ``(Vd,)``
        The head's draft-vocabulary logits for the token after the root (from its last pair).
    root_hidden : ``(H,)``
        The head's output hidden of that pair (input of the depth-1 nodes).
    root_token : int
        The last verified token (the tree's root).
    config : TreeConfig

    Returns
    -------
    DraftTree
        ``min(total_tokens, #candidates)`` draft nodes. Cost: ``depth - 1`` head calls over
        ``top_k`` tokens each.
    """
    k = min(config.top_k, int(root_logits.shape[-1]))
    P = int(past_k.shape[2])
    d2t = head.d2t
    dev = past_k.device
    # candidate lists (index 0 = root)
    score = [0.0]
    depth = [0]
    parent = [-1]
    draft_id = [-1]
    logp = torch.log_softmax(root_logits.float(), -1)
    top = torch.topk(logp, k)
    frontier = []
    for s, t in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        score.append(s)
        depth.append(1)
        parent.append(0)
        draft_id.append(t)
        frontier.append(len(score) - 1)
    hidden = {0: root_hidden.view(-1)}  # candidate -> head output hidden after processing it
    temp_index: dict[int, int] = {}  # processed candidate -> column in the temporary cache
    tk, tv = past_k, past_v
    for d in range(2, config.depth + 1):
        n_new = len(frontier)
        toks = d2t[torch.tensor([draft_id[c] for c in frontier], device=d2t.device)]
        h_in = torch.stack([hidden[parent[c]] for c in frontier]).unsqueeze(0)
        emb = head.embed(toks).unsqueeze(0)
        pos = torch.full((n_new,), P + d - 2, dtype=torch.long, device=dev)
        base = tk.shape[2]
        mask = torch.zeros(n_new, base + n_new, dtype=torch.bool, device=dev)
        mask[:, :P] = True
        rows, cols = [], []
        for r, c in enumerate(frontier):  # drafted ancestors (temporary cache) and itself
            a = parent[c]
            while a > 0:
                rows.append(r)
                cols.append(temp_index[a])
                a = parent[a]
            rows.append(r)
            cols.append(base + r)
        mask[torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)] = True
        logits, z, nk, nv = head(h_in, emb, pos, tk, tv, mask)
        tk, tv = torch.cat([tk, nk], 2), torch.cat([tv, nv], 2)
        lp = torch.log_softmax(logits[0].float(), -1)
        tops = torch.topk(lp, k)
        new = []
        for r, c in enumerate(frontier):
            temp_index[c] = base + r
            hidden[c] = z[0, r]
            for s, t in zip(tops.values[r].tolist(), tops.indices[r].tolist(), strict=True):
                score.append(score[c] + s)
                depth.append(d)
                parent.append(c)
                draft_id.append(t)
                new.append(len(score) - 1)
        new.sort(key=lambda c: (-score[c], c))
        frontier = new[:k]
    # re-rank all candidates, keep the best total_tokens (ties -> shallower first: closed
    # under ancestors), then order parents before children, siblings by decreasing score
    cands = sorted(range(1, len(score)), key=lambda c: (-score[c], depth[c], c))
    kept = cands[: config.total_tokens]
    kept.sort(key=lambda c: (depth[c], -score[c], c))
    node_of = {0: 0}
    for i, c in enumerate(kept, start=1):
        node_of[c] = i
    tokens = [int(root_token)] + [int(d2t[draft_id[c]]) for c in kept]
    parents = [-1] + [node_of[parent[c]] for c in kept]
    depths = [0] + [depth[c] for c in kept]
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))


def root_only_tree(root_token: int) -> DraftTree:
    """A tree without drafts (a plain target step)."""
    return DraftTree(torch.tensor([int(root_token)]), torch.tensor([-1]), torch.tensor([0]))


@torch.no_grad()
def verify_tree(model, cache, tree: DraftTree, feature_layers=None):
    """Score every tree node in one target forward pass over ``cache``.

    Parameters
    ----------
    model : transformers causal LM (accepting a 4-D float attention mask and ``position_ids``).
    cache : its KV cache holding the ``n`` verified tokens before the root; it grows by
        ``M + 1`` entries (node ``i`` at cache index ``n + i``).
    tree : DraftTree
    feature_layers : sequence of int, optional
        Indices into ``output_hidden_states`` to return as features.

    Returns
    -------
    logits : ``(M+1, V)`` float32 (the precision the acceptance rule's probabilities need);
        row ``i`` predicts the token after node ``i``'s path.
    features : ``(M+1, F*H)`` in the model's dtype, or None.
    """
    n = int(cache.get_seq_length())
    m1 = tree.size + 1
    prm = next(model.parameters())
    device, dtype = prm.device, prm.dtype
    mask = torch.zeros(m1, n + m1, dtype=dtype, device=device)  # prefix: visible to all
    mask[:, n:].masked_fill_(~ancestor_mask(tree.parents).to(device), torch.finfo(dtype).min)
    pos = (tree.depths + n).view(1, -1).to(device)
    out = model(input_ids=tree.tokens.view(1, -1).to(device),
                attention_mask=mask[None, None], position_ids=pos, use_cache=True,
                output_hidden_states=feature_layers is not None,
                **{cache_kwarg(model): cache})
    feats = None
    if feature_layers is not None:
        feats = torch.cat([out.hidden_states[i][0] for i in feature_layers], -1)
    return out.logits[0].float(), feats


def accept_greedy(logits: torch.Tensor, tree: DraftTree) -> tuple[list[int], int]:
    """Longest root path whose tokens equal the target's argmax; then the argmax after it.

    Returns ``(path, next_token)`` like :func:`spec_adapters.core.sampling.tree_accept`.
    """
    children: list[list[int]] = [[] for _ in range(tree.size + 1)]
    for i in range(1, tree.size + 1):
        children[int(tree.parents[i])].append(i)
    arg = logits.argmax(-1).tolist()
    tok = tree.tokens.tolist()
    node, path = 0, []
    while True:
        nxt = next((c for c in children[node] if tok[c] == arg[node]), None)
        if nxt is None:
            return path, arg[node]
        path.append(nxt)
        node = nxt


def compact_cache(cache, prefix_len: int, path: list[int], tree_size: int) -> None:
    """Keep cache entries ``0 .. prefix_len`` (prefix + root) and the accepted nodes.

    The tree occupied indices ``prefix_len .. prefix_len + tree_size``; afterwards the cache
    holds ``prefix_len + 1 + len(path)`` entries, exactly what a fresh prefill of the accepted
    sequence would hold (keys carry their rotary positions, which were the path positions).
    """
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError("compact_cache needs a transformers>=4.56 Cache with .layers")
    if int(cache.get_seq_length()) != prefix_len + tree_size + 1:
        raise ValueError("cache length does not match prefix + tree")
    if path == list(range(1, len(path) + 1)):  # accepted nodes are contiguous: just crop
        crop_cache(cache, prefix_len + 1 + len(path))
        return
    keep = torch.cat([torch.arange(prefix_len + 1),
                      torch.tensor(path, dtype=torch.long) + prefix_len])
    on_device: dict[torch.device, torch.Tensor] = {}  # one host -> device copy per device
    for layer in layers:
        if not hasattr(layer, "keys"):
            raise TypeError(f"cannot compact cache layer {type(layer).__name__}")
        dev = layer.keys.device
        idx = on_device.setdefault(dev, keep.to(dev))
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)
