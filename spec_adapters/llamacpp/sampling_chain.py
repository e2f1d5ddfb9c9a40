"""llama.cpp's sampling chain on a row of logits, and the one draw per token made from it.

The chain (common/sampling.cpp's order; typical and min-p off): keep the ``top_k`` largest
logits; then the smallest most-probable set whose softmax *of the raw logits* reaches
``top_p`` (ties by token id); then soften what is kept by the temperature:

.. math:: p(x) \\propto \\exp(z_x / T) \\;\\text{for } x \\text{ kept}, \\quad 0 \\text{ otherwise}.

Plain decoding and HedgeSpec's coupled rule both draw through :func:`draw_token`, one
uniform per token from a numpy generator seeded with the request's seed, so for one seed they
draw the same tokens (``python -m proofs_check --only seeded``). Nothing here needs torch: the
llama.cpp engine's per-token work is numpy beside llama.cpp's C.

Cost. A row has 49,152 (SmolLM2) to 262,144 (Gemma-3) logits and is warped once per generated
token, beside a ``llama_decode`` of 10-30 ms. :func:`warp_row` never touches the whole row in
float64 (``exp`` of a float64 row of 49k is ~0.5 ms here, of float32 ~0.05 ms): the raw
softmax's normaliser is a float32 ``exp`` summed in float64; the top-p cut is found among the
tokens above a probability threshold that already hold more than ``top_p`` of the mass (so
the cut lies among them), sorted in float64; a row whose candidates do not hold the mass in
float64 is sorted whole. Everything kept is computed in float64.
"""

from __future__ import annotations

import numpy as np

from onlinelearn.base import inverse_cdf

__all__ = ["draw_token", "warp_llama", "warp_row"]

_START = 1e-4  # first candidate threshold, relative to the most probable token
_STEP = 1e-3   # and its shrinking while the candidates hold too little mass
_SLACK = 1e-6  # relative margin on float32's mass


def warp_row(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The chain on one row ``(V,)``: the kept token ids, ascending, and their probabilities
    (float64, summing to 1)."""
    x = np.asarray(logits, np.float32)
    ids = None  # the whole row, not gathered until it must be
    if top_k is not None and top_k < x.size:
        kth = np.partition(x, x.size - top_k)[x.size - top_k]
        ids = np.flatnonzero(x >= kth)
    if top_p < 1.0:
        ids = _top_p(x, top_p) if ids is None else ids[_top_p(x[ids], top_p)]
    if ids is None:
        ids = np.arange(x.size)
    z = x[ids].astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return ids, p / p.sum()


def _top_p(x: np.ndarray, top_p: float) -> np.ndarray:
    """Positions in ``x`` (logits) of the tokens top-p keeps: in descending probability (ties
    by position) those whose strictly more probable mass is below ``top_p``; at least one."""
    top = float(x.max())
    e32 = np.exp(x - np.float32(top))
    total32 = float(e32.sum(dtype=np.float64))
    threshold = _START
    while True:
        cand = np.flatnonzero(e32 >= threshold) if threshold > 0 else np.arange(x.size)
        mass32 = float(e32[cand].sum(dtype=np.float64))
        if threshold == 0 or mass32 >= top_p * total32 * (1 + _SLACK):
            break
        threshold = threshold * _STEP if threshold > 1e-30 else 0.0
    while True:
        e = np.exp(x[cand].astype(np.float64) - top)
        # the normaliser: the candidates in float64, the rest (below the threshold) in float32
        total = e.sum() + max(total32 - mass32, 0.0)
        p = e / total
        order = np.lexsort((cand, -p))
        cum = np.cumsum(p[order])
        n = max(1, int(np.count_nonzero(cum - p[order] < top_p)))  # llama.cpp keeps one
        # every token left out is less probable than every candidate, so the first of them
        # has the candidates' whole mass before it: kept only if that is below top_p
        if n < len(cand) or cum[-1] >= top_p or len(cand) == x.size:
            return np.sort(cand[order[:n]])
        cand, mass32 = np.arange(x.size), total32  # the cut may lie beyond: the whole row


def warp_llama(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float
               ) -> np.ndarray:
    """Rows of probabilities ``(m, V)`` from ``logits`` ``(m, V)`` by the chain
    (:func:`warp_row` per row; 0 for what is cut)."""
    out = np.zeros(logits.shape, np.float64)
    for r in range(logits.shape[0]):
        ids, p = warp_row(logits[r], temperature, top_k, top_p)
        out[r, ids] = p
    return out


def draw_token(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float,
               rng: np.random.Generator) -> int:
    """One token from a row of logits ``(V,)``: :func:`warp_row`, then the inverse CDF (in
    token-id order) of one float64 uniform from the request's ``rng``: the token whose CDF
    interval holds ``u`` times the total (the cut tokens' zeros move no boundary, so this is
    the full warped row's draw); the draw plain decoding makes per token and HedgeSpec's
    coupled rule makes per position."""
    ids, p = warp_row(logits, temperature, top_k, top_p)
    return int(ids[inverse_cdf(p, rng.random())])
