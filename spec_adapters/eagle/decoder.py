"""HedgeSpec over a pool of EAGLE heads with EAGLE-2 draft trees.

The round is the single-draft decoder's (:class:`spec_adapters.decoding.chain.HedgeSpecDecoder`,
whose
loop, policies, round table, estimators and delayed-feedback queue are reused unchanged); only
three steps differ:

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
import time

import torch

from spec_adapters.core.acceptance import tree_acceptance
from spec_adapters.core.sampling import tree_accept
from spec_adapters.decoding.chain import HedgeSpecDecoder as _SingleDraftDecoder
from spec_adapters.hf.target import TargetModel, new_cache

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

__all__ = ["HedgeSpecDecoder"]


class _TreeTarget(TargetModel):
    """TargetModel whose prefill also returns the prompt's hidden features."""

    def __init__(self, model, feature_layers) -> None:
        super().__init__(model)
        self.feature_layers = tuple(feature_layers)
        self.prompt_features = None

    @torch.no_grad()
    def prefill(self, prompt_ids: torch.LongTensor) -> None:
        self.check_prompt_length(int(prompt_ids.numel()))
        self.cache = new_cache(self.model)
        self.calls = 0
        self.prompt_features = None
        if prompt_ids.numel() > 1:
            out = self.model(input_ids=prompt_ids[:-1].view(1, -1).to(self.device),
                             use_cache=True, output_hidden_states=True,
                             **{self._kwarg: self.cache})
            self.prompt_features = torch.cat(
                [out.hidden_states[i][0] for i in self.feature_layers], -1)


class _HeadSlot:
    """A head's slot in the single-draft plumbing (name, vocab_size, a no-op ``start``).

    The tree decoder drafts and evaluates through :class:`HeadPool`, never through
    ``propose`` / ``extend``."""

    def __init__(self, name: str, vocab_size: int):
        self.name, self.vocab_size = name, vocab_size

    def start(self, prompt_ids) -> None:
        pass

    def propose(self, k, sampling, generator=None):
        raise NotImplementedError("EAGLE heads draft trees through HeadPool")

    def extend(self, tokens):
        raise NotImplementedError("EAGLE heads are evaluated through HeadPool")


class HedgeSpecDecoder(_SingleDraftDecoder):
    """Lossless EAGLE tree decoding with online selection among draft heads.

    Parameters
    ----------
    target : transformers.PreTrainedModel
        The causal LM (must accept a 4-D float attention mask and ``position_ids``, as
        Llama-family models in transformers >= 4.56 do).
    heads : list of EagleHead
        Non-empty; every head must have been trained for ``target`` (``ValueError``).
    tree : TreeConfig, default ``TreeConfig()`` (depth 5, top_k 8, 48 tokens)
    policy, loss, delay, carry_state
        As in :class:`spec_adapters.decoding.chain.HedgeSpecDecoder` (``delay=None``: its default);
        the round window ``K`` is ``tree.depth``.
    batched : bool, default True
        Evaluate same-architecture heads in one vmapped call.

    Notes
    -----
    ``generate`` and ``out.stats`` are the single-draft decoder's; ``accepted`` counts accepted
    tree nodes per round and ``stats["tree_nodes"]`` lists the drafted tree sizes. Every head
    is kept in sync every round (one batched call), also for bandit / fixed policies.
    """

    def __init__(self, target, heads, tree: TreeConfig | None = None, policy="normalhedge",
                 loss: str = "eal", delay: str | None = None, carry_state: bool = False,
                 batched: bool = True) -> None:
        tree = TreeConfig() if tree is None else tree
        if not isinstance(tree, TreeConfig):
            raise ValueError(f"tree must be a TreeConfig, got {type(tree).__name__}")
        if heads is None or len(heads) == 0:
            raise ValueError("empty pool: pass at least one EagleHead")
        model = target.model if isinstance(target, TargetModel) else target
        self.pool = HeadPool(heads, model, batched=batched)
        names = [h.config.extra.get("name") or f"eagle{i}" for i, h in enumerate(heads)]
        slots = [_HeadSlot(n, self.pool.vocab_size) for n in names]
        same_default = {} if delay is None else {"delay": delay}  # the single-draft default
        super().__init__(model, slots, draft_length=tree.depth, policy=policy, loss=loss,
                         carry_state=carry_state, **same_default)
        self.target = _TreeTarget(model, self.pool.feature_layers)
        self.tree = tree

    # ---- steps that differ from single-draft decoding ------------------------------------
    def _begin(self, prompt, policy, limit, eos, sampling, seed, streamer):
        q = super()._begin(prompt, policy, limit, eos, sampling, seed, streamer)
        t = time.perf_counter()
        self.pool.reset()
        if self.target.prompt_features is not None:
            self.pool.extend(self.target.prompt_features, prompt[1:])
        q.tree_nodes = []
        q.seconds["prefill"] += time.perf_counter() - t
        return q

    def _draft(self, i: int, q) -> tuple[DraftTree, None]:
        """Step 2: head ``i`` drafts an EAGLE-2 tree rooted at the last verified token."""
        t = time.perf_counter()
        cfg = self.tree
        room = None if self.target.max_length is None else self.target.max_length - len(q.seq)
        if room is not None and room < cfg.depth:
            d = max(1, room)
            cfg = TreeConfig(d, cfg.top_k, max(d, cfg.total_tokens))
        logits = self.pool.pending_logits[i]
        if logits is None or (room is not None and room < 1):
            tree = root_only_tree(q.seq[-1])
        else:
            k, v = self.pool.cache_of(i)
            tree = draft_tree(self.pool.heads[i], k, v, logits, self.pool.pending_hidden[i],
                              q.seq[-1], cfg)
        q.tree_nodes.append(tree.size)
        q.seconds["draft"] += time.perf_counter() - t
        return tree, None

    def _verify(self, tree: DraftTree, _unused, q):
        """Step 3: one target pass over the tree, tree acceptance, cache compaction.

        Returns the number of accepted nodes, the new verified tokens (cut after EOS or at the
        length limit) and ``p`` at them; keeps the target features of the new pairs in ``q``.
        """
        t = time.perf_counter()
        n = self.target.cached_length
        logits, feats = verify_tree(self.target.model, self.target.cache, tree,
                                    self.pool.feature_layers)
        self.target.calls += 1
        p = q.sampling.probs(logits)
        if tree.size == 0:
            path = []
            nxt = int(torch.multinomial(p[0].double(), 1, generator=q.gen)) \
                if not q.sampling.greedy else int(p[0].argmax())
        elif q.sampling.greedy:
            path, nxt = accept_greedy(logits, tree)
        else:
            path, nxt = tree_accept(p, tree.parents, tree.tokens, q.gen)
        compact_cache(self.target.cache, n, path, tree.size)
        nodes = [0, *path]
        new = [*tree.tokens[path].tolist(), int(nxt)]
        for j, tok in enumerate(new):
            if tok in q.eos:
                new, q.done = new[:j + 1], True
                break
        if len(q.seq) + len(new) >= q.limit:
            new, q.done = new[:q.limit - len(q.seq)], True
        q.seq.extend(new)
        q.accepted.append(len(path))
        q.new_features = feats[nodes[:len(new)]]
        if q.streamer is not None:
            q.streamer.put(torch.tensor(new))
        q.seconds["verify"] += time.perf_counter() - t
        return len(path), torch.tensor(new, device=p.device), p[nodes[:len(new)]]

    def _evaluate(self, policy, new, p, q) -> None:
        """Step 4: all heads append the new pairs (one batched call); tree gamma and rho."""
        t = time.perf_counter()
        before = list(self.pool.pending_logits)
        rows = self.pool.extend(q.new_features, new.cpu())
        if self._counterfactual(policy):
            gamma, rho = self._tree_stats(before, rows, p, new)
            q.table.record(gamma, rho)
        q.seconds["eval"] += time.perf_counter() - t

    def _tree_stats(self, before, rows, p, new):
        """Theorem 2 per head and verified position: ``(N, m)`` gamma and rho (float64)."""
        m = int(new.numel())
        N = self.pool.n
        gamma = torch.zeros(N, m, dtype=torch.float64)
        rho = torch.zeros(N, m, dtype=torch.float64)
        for i in range(N):
            # logits that predicted each new token: the pending root, then the new rows
            pred = rows[i][:-1] if before[i] is None else \
                torch.cat([before[i].view(1, -1), rows[i][:-1]])
            off = m - pred.shape[0]  # 1 when no head distribution existed (1-token prompt)
            if pred.shape[0] == 0:
                continue
            kids = self.pool.children(i, pred, self.tree.top_k)  # (m', k) target ids
            gamma[i, off:] = tree_acceptance(p[off:].double(), kids.to(p.device),
                                             validate=False).cpu()
            rho[i, off:] = (kids.to(new.device) == new[off:, None]).any(-1).double().cpu()
        return gamma, rho

    def _finish(self, policy, q, total):
        out = super()._finish(policy, q, total)
        out.stats.update(tree_nodes=q.tree_nodes, tree=dataclasses.asdict(self.tree))
        return out

    # EagleHead-specific helpers ----------------------------------------------------------
    @property
    def heads(self) -> list[EagleHead]:
        return self.pool.heads
