"""How many tokens a head's greedy chain (or EAGLE-2 tree) gets accepted per round, replayed on
cached features.

When the target decodes greedily its output is fixed, so the rounds of greedy chain speculation
with a head can be replayed without the target: the document *is* the target's greedy answer
(``cache-features --set heldout``) and its cached features are the ones the verification
passes would have produced. A round starts with ``x_0 .. x_{n-1}`` verified; the head drafts
``x̂_n`` from its teacher-forced row ``n-2`` (pair ``(f_{n-2}, x_{n-1})``, real features),
then ``x̂_{n+1} .. x̂_{n+k-1}`` each from its own previous hidden (one row per step, attending
its cache of real rows ``<= n-2`` and the chain so far, as the decoder does); the target
accepts the longest prefix equal to ``x_n, x_{n+1}, ...`` and adds one token, so the round
yields ``a + 1`` tokens and ``n`` advances by that. A tree round (:func:`tree_mat`) drafts
the head's EAGLE-2 tree from the same row and cache and accepts its deepest root path that
spells ``x_n, x_{n+1}, ...``.

MAT (mean accepted tokens, the paper's unit) = generated tokens / rounds. As in the decoders,
the prefill caches the prompt minus its last token and produces nothing, so the first round
starts at ``n = start`` and drafts ``x_start`` itself. It equals what the chain decoder measures
up to floating-point differences between one full-sequence pass and the incremental passes
(a near-tie of the head's argmax can flip).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .features import FeatureSet
from .head import EagleHead
from .tree import TreeConfig, draft_tree

__all__ = ["chain_mat", "pooled_mat", "tree_mat"]


def chain_mat(head: EagleHead, data: FeatureSet, k: int, max_tokens: int | None = None
              ) -> list[dict]:
    """Replay greedy chain speculation of depth ``k`` over every document of ``data``.

    Parameters
    ----------
    head : the draft head (eval mode), bound to the target the features are from.
    data : cached features of the target's own greedy answers.
    k : draft length per round (``>= 1``).
    max_tokens : stop a document after this many answer tokens (default: all).

    Returns
    -------
    list of dict, one per document: ``label``, ``tokens`` (generated), ``rounds``, ``mat``,
    ``accepted`` (per round: drafted tokens accepted, ``0 .. k``).
    """
    if k < 1:
        raise ValueError(f"chain_mat: k must be >= 1, got {k}")

    def accepted(doc: _Replayed, n: int, end: int) -> int:
        draft = [int(head.d2t[doc.logits[0, n - 2].argmax()])]
        a = 0
        past_k, past_v, h = doc.keys[:, :, :n - 1], doc.values[:, :, :n - 1], \
            doc.fed[:, n - 2:n - 1]
        while a < len(draft) and n + a < end and draft[a] == int(doc.ids[n + a]):
            a += 1
            if a == k or n + a >= end:
                break
            lg, h, kk, vv = head(h, head.embed(torch.tensor([[draft[-1]]])),
                                 torch.tensor([n + a - 2]), past_k, past_v)
            past_k, past_v = torch.cat([past_k, kk], 2), torch.cat([past_v, vv], 2)
            draft.append(int(head.d2t[lg[0, -1].argmax()]))
        return a

    return _replay(head, data, max_tokens, accepted)


def tree_mat(head: EagleHead, data: FeatureSet, tree: TreeConfig,
             max_tokens: int | None = None) -> list[dict]:
    """Replay greedy EAGLE-2 tree speculation (:func:`~spec_adapters.eagle.tree.draft_tree`
    of shape ``tree``) over every document of ``data``: a round accepts the deepest root path
    whose tokens are the answer's next tokens (what :func:`~spec_adapters.eagle.tree.
    accept_greedy` keeps when the target's argmax is the answer). Returns what
    :func:`chain_mat` returns (``accepted`` per round ``0 .. tree.depth``)."""
    if not isinstance(tree, TreeConfig):
        raise ValueError(f"tree_mat: tree must be a TreeConfig, got {tree!r}")

    def accepted(doc: _Replayed, n: int, end: int) -> int:
        t = draft_tree(head, doc.keys[:, :, :n - 1], doc.values[:, :, :n - 1],
                       doc.logits[0, n - 2], doc.fed[0, n - 2], int(doc.ids[n - 1]), tree)
        children: list[list[int]] = [[] for _ in range(t.size + 1)]
        for i, parent in enumerate(t.parents.tolist()[1:], start=1):
            children[parent].append(i)
        tokens, node, a = t.tokens.tolist(), 0, 0
        while n + a < end:
            node = next((c for c in children[node] if tokens[c] == int(doc.ids[n + a])), None)
            if node is None:
                break
            a += 1
        return a

    return _replay(head, data, max_tokens, accepted)


@dataclass
class _Replayed:
    """One document as the head sees it in a single teacher-forced pass: the answer ``ids``,
    and per pair row ``t`` (``(f_t, x_{t+1})``) the head's draft logits, output hidden and
    keys / values."""

    ids: torch.LongTensor
    logits: torch.Tensor
    fed: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor


@torch.no_grad()
def _replay(head: EagleHead, data: FeatureSet, max_tokens: int | None,
            accepted: Callable[[_Replayed, int, int], int]) -> list[dict]:
    """Every document's rounds: from ``n = start`` verified tokens, a round yields
    ``accepted(doc, n, end) + 1`` tokens (no draft before ``n = 2``: no pair to draft from)."""
    out = []
    for d in range(len(data)):
        start = int(data.starts[d])
        n_doc = int(data.offsets[d + 1] - data.offsets[d])
        end = n_doc if max_tokens is None else min(n_doc, start + max_tokens)
        batch = data.batch([d], end)
        ids = batch.ids[0]
        logits, fed, keys, values = head(batch.features[:, :-1], head.embed(ids[1:].view(1, -1)),
                                         torch.arange(end - 1), fuse=True)
        doc = _Replayed(ids, logits, fed, keys, values)
        n, rounds = start, []
        while n < end:
            rounds.append(accepted(doc, n, end) if n >= 2 else 0)
            n += rounds[-1] + 1
        tokens = end - start
        out.append({"label": data.labels[d], "tokens": tokens, "rounds": len(rounds),
                    "mat": tokens / max(len(rounds), 1), "accepted": rounds})
    return out


def pooled_mat(rows: list[dict]) -> float:
    """All generated tokens over all rounds (a stream's MAT)."""
    return float(np.sum([r["tokens"] for r in rows]) / max(np.sum([r["rounds"] for r in rows]), 1))
