"""HedgeSpec over a pool of EAGLE heads with EAGLE-2 draft trees.

The round is :class:`spec_adapters.decoding.loop.RoundLoop`'s (policies, round table,
estimators, delayed-feedback queue, EOS / length cut, stats); :class:`TreeScheme` supplies the
three steps that differ from single-draft decoding:

2. **draft**: the chosen head drafts an EAGLE-2 dynamic tree (:func:`.tree.draft_tree`);
3. **verify**: the target scores the whole tree in one pass with a tree attention mask
   (:func:`.tree.verify_tree`); EAGLE's recursive rejection sampling over siblings
   (:func:`spec_adapters.core.sampling.tree_accept`; greedy: the longest argmax-matching path)
   picks the accepted path and the next token; the target cache is compacted to that path;
4. **evaluate**: every head appends the verified pairs ``(f_t, x_{t+1})`` in one batched call
   (:class:`.pool.HeadPool`), and each verified position ``j`` gets, per head ``i``,
   Theorem 2's tree gamma and the matching ratio

   .. math:: \\gamma_{ij} = \\sum_{c \\in C_{ij}} p_j(c), \\qquad
             \\rho_{ij} = 1\\{x_j \\in C_{ij}\\},

   where ``C_ij`` is head ``i``'s ``top_k`` children at ``j`` (its ``top_k`` most likely tokens
   given the verified prefix and the target's features there). ``rho`` is the tree analogue
   of ``min(1, q(x)/p(x))``: given acceptance, tree sampling's accepted token has law
   ``p 1_C / gamma``, so ``E_{x~p}[rho(x) f(x)] = gamma E[f | accepted]`` and the corrected
   estimator of :mod:`spec_adapters.core.estimators` stays unbiased.

Pruning accounted for by gamma: the per-node ``top_k`` cut (the only pruning at a tree's
root). Not accounted for: the global ``total_tokens`` re-ranking and the top-``k`` frontier
selection at deeper levels (both depend on the whole counterfactual tree), and the drift from
drafting deeper on the head's own hidden states instead of target features. So gamma is the
acceptance probability of the node as a tree root, an upper bound on a deeper node's; the
window length ``K`` is the tree ``depth``. See docs/eagle.md.
"""

from __future__ import annotations

import dataclasses

import torch

from spec_adapters.core.acceptance import tree_acceptance
from spec_adapters.core.sampling import tree_accept
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.decoding.loop import Query, Verdict
from spec_adapters.hf.target import TargetModel

from .head import EagleHead
from .pool import HeadPool
from .tree import (
    DraftTree,
    TreeConfig,
    accept_greedy,
    compact_cache,
    draft_tree,
    root_only_tree,
    verify_tree,
)

__all__ = ["HedgeSpecDecoder", "TreeScheme", "tree_scheme"]


class TreeScheme:
    """EAGLE-2 tree proposals from a :class:`HeadPool`, verified in one tree-masked pass.

    Parameters
    ----------
    target : TargetModel
        Built with the pool's ``feature_layers`` (its prefill returns the prompt's features).
    pool : HeadPool
    tree : TreeConfig
    names : list of str
        One per head.
    """

    def __init__(self, target: TargetModel, pool: HeadPool, tree: TreeConfig,
                 names: list[str]) -> None:
        self.target, self.pool, self.tree, self.names = target, pool, tree, names
        self.draft_length = tree.depth
        self._sizes: list[int] = []  # drafted nodes per round of the current query

    @property
    def drafters(self) -> list[EagleHead]:
        """The heads, in pool order."""
        return self.pool.heads

    def start(self, prompt: torch.LongTensor) -> None:
        features = self.target.prefill(prompt)
        self.pool.reset()
        if features is not None:
            self.pool.extend(features, prompt[1:])
        self._sizes = []

    def draft(self, i: int, q: Query, k: int) -> DraftTree:
        """Head ``i`` drafts an EAGLE-2 tree rooted at the last verified token (the tree
        decoder is not cost-aware: ``k`` is always the tree's depth)."""
        cfg = self.tree
        room = self.target.max_length  # >= len(q.seq) + 1: the loop stops at the context
        if room is not None and room - len(q.seq) < cfg.depth:
            d = room - len(q.seq)
            cfg = TreeConfig(d, cfg.top_k, max(d, cfg.total_tokens))
        logits = self.pool.pending_logits[i]
        if logits is None:  # a one-token prompt: no head has read a pair yet
            tree = root_only_tree(q.seq[-1])
        else:
            k, v = self.pool.cache_of(i)
            tree = draft_tree(self.pool.heads[i], k, v, logits, self.pool.pending_hidden[i],
                              q.seq[-1], cfg)
        self._sizes.append(tree.size)
        return tree

    def verify(self, tree: DraftTree, q: Query) -> Verdict:
        """One target pass over the tree, tree acceptance, cache compaction; the verdict keeps
        the target features along the accepted path for :meth:`evaluate`."""
        n = self.target.cached_length
        logits, feats = verify_tree(self.target.net, self.target.cache, tree,
                                    self.pool.feature_layers)
        self.target.calls += 1
        p = q.sampling.probs(logits)
        if tree.size == 0:
            path = []
            nxt = int(p[0].argmax()) if q.sampling.greedy else \
                int(torch.multinomial(p[0].double(), 1, generator=q.gen))
        elif q.sampling.greedy:
            path, nxt = accept_greedy(logits, tree)
        else:
            path, nxt = tree_accept(p, tree.parents, tree.tokens, q.gen)
        compact_cache(self.target.cache, n, path, tree.size)
        nodes = [0, *path]
        return Verdict(len(path), [*tree.tokens[path].tolist(), int(nxt)], p[nodes], feats[nodes])

    def evaluate(self, verdict: Verdict, q: Query, counterfactual: bool
                 ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """All heads append the new pairs (one batched call, whatever the policy: heads have
        no lazy catch-up); with ``counterfactual``, tree gamma and rho."""
        new = torch.tensor(verdict.tokens)
        preds = self.pool.extend_predicting(verdict.features, new)
        if not counterfactual:
            return None
        return self._tree_stats(preds, verdict.p, new.to(verdict.p.device))

    def stats(self) -> dict:
        return {"tree_nodes": self._sizes, "tree": dataclasses.asdict(self.tree)}

    def _tree_stats(self, preds, p, new):
        """Theorem 2 per head and verified position: ``(N, m)`` gamma and rho (float64), by a
        gather of ``p`` at every head's children (nothing of the vocabulary's size per head)."""
        m = int(new.numel())
        gamma = torch.zeros(self.pool.n, m, dtype=torch.float64)
        rho = torch.zeros(self.pool.n, m, dtype=torch.float64)
        off = m - preds[0].shape[0]  # 1 when no head distribution existed (1-token prompt)
        if off == m:
            return gamma, rho
        kids = [self.pool.children(i, pred, self.tree.top_k).to(p.device)
                for i, pred in enumerate(preds)]  # (m - off, <= top_k) target ids per head
        width = max(k.shape[-1] for k in kids)  # a head's draft vocabulary may be < top_k
        kids = torch.stack([torch.nn.functional.pad(k, (0, width - k.shape[-1]), value=-1)
                            for k in kids])
        kept = kids >= 0
        gamma[:, off:] = tree_acceptance(p[off:], kids, kept, validate=False).double().cpu()
        rho[:, off:] = ((kids == new[off:, None].to(p.device)) & kept).any(-1).double().cpu()
        return gamma, rho


def tree_scheme(target, heads, draft_length: int | None = None, tree: TreeConfig | None = None,
                batched: bool = True) -> TreeScheme:
    """The :class:`TreeScheme` of a pool of heads (the builder
    :class:`~spec_adapters.decoding.chain.HedgeSpecDecoder` calls for heads).

    Parameters
    ----------
    target : transformers.PreTrainedModel or TargetModel
        The causal LM (must accept a 4-D float attention mask and ``position_ids``, as
        Llama-family models in transformers >= 4.56 do).
    heads : list of EagleHead
        Non-empty; every head must have been trained for ``target`` (``ValueError``).
    draft_length : int, optional
        The tree's depth (the round window ``K``); must equal ``tree.depth`` when both given.
    tree : TreeConfig, optional
        Default ``TreeConfig(depth=draft_length)`` (depth 5, top_k 8, 48 tokens by default).
    batched : bool, default True
        Evaluate same-architecture heads in one stacked forward.
    """
    if tree is None:
        tree = TreeConfig() if draft_length is None else TreeConfig(depth=draft_length)
    if not isinstance(tree, TreeConfig):
        raise ValueError(f"tree must be a TreeConfig, got {type(tree).__name__}")
    if draft_length is not None and draft_length != tree.depth:
        raise ValueError(f"draft_length={draft_length!r} differs from tree.depth={tree.depth}: "
                         "a tree's draft length is its depth; pass one of them")
    model = target.model if isinstance(target, TargetModel) else target
    pool = HeadPool(heads, model, batched=batched)
    names = [h.config.extra.get("name") or f"eagle{i}" for i, h in enumerate(heads)]
    return TreeScheme(TargetModel(model, pool.feature_layers), pool, tree, names)
