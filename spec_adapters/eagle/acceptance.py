"""How many tokens a head's greedy chain gets accepted per round, replayed on cached features.

When the target decodes greedily its output is fixed, so the rounds of greedy chain speculation
with a head can be replayed without the target: the document *is* the target's greedy answer
(``cache-features --set heldout``) and its cached features are the ones the verification
passes would have produced. A round starts with ``x_0 .. x_{n-1}`` verified; the head drafts
``x̂_n`` from its teacher-forced row ``n-2`` (pair ``(f_{n-2}, x_{n-1})``, real features),
then ``x̂_{n+1} .. x̂_{n+k-1}`` each from its own previous hidden (one row per step, attending
its cache of real rows ``<= n-2`` and the chain so far, as the decoder does); the target
accepts the longest prefix equal to ``x_n, x_{n+1}, ...`` and adds one token, so the round
yields ``a + 1`` tokens and ``n`` advances by that.

MAT (mean accepted tokens, the paper's unit) = generated tokens / rounds, the prompt's prefill
(which produces ``x_start``) not counted as a round. It equals what the chain decoder measures
up to floating-point differences between one full-sequence pass and the incremental passes
(a near-tie of the head's argmax can flip).
"""

from __future__ import annotations

import numpy as np
import torch

from .features import FeatureSet
from .head import EagleHead

__all__ = ["chain_mat", "pooled_mat"]


@torch.no_grad()
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
    out = []
    for d in range(len(data)):
        start = int(data.starts[d])
        n_doc = int(data.offsets[d + 1] - data.offsets[d])
        end = n_doc if max_tokens is None else min(n_doc, start + max_tokens)
        batch = data.batch([d], end)
        ids = batch.ids[0]
        emb = head.embed(ids[1:].view(1, -1))
        pos = torch.arange(end - 1)
        logits, fed, keys, values = head(batch.features[:, :-1], emb, pos, fuse=True)
        first = logits[0].argmax(-1)  # row t's draft of x_{t+2}, real features
        n, accepted = start + 1, []
        while n < end:
            draft = [int(head.d2t[first[n - 2]])] if n >= 2 else []
            a = 0
            past_k, past_v, h = keys[:, :, :n - 1], values[:, :, :n - 1], fed[:, n - 2:n - 1]
            while a < len(draft) and n + a < end and draft[a] == int(ids[n + a]):
                a += 1
                if a == k or n + a >= end:
                    break
                lg, h, kk, vv = head(h, head.embed(torch.tensor([[draft[-1]]])),
                                     torch.tensor([n + a - 2]), past_k, past_v)
                past_k, past_v = torch.cat([past_k, kk], 2), torch.cat([past_v, vv], 2)
                draft.append(int(head.d2t[lg[0, -1].argmax()]))
            accepted.append(a)
            n += a + 1
        tokens = end - start
        out.append({"label": data.labels[d], "tokens": tokens, "rounds": len(accepted),
                    "mat": tokens / max(len(accepted), 1), "accepted": accepted})
    return out


def pooled_mat(rows: list[dict]) -> float:
    """All generated tokens over all rounds (a stream's MAT)."""
    return float(np.sum([r["tokens"] for r in rows]) / max(np.sum([r["rounds"] for r in rows]), 1))
