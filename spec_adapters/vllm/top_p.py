"""vLLM's top-p mask on the rejection sampler's draft positions, without sorting the vocabulary.

vLLM's rule (``apply_top_k_top_p_pytorch``, the CPU path): sort a row of temperature-scaled
logits ascending, take the softmax's running sum ``S_j`` and mask token ``j`` when
``S_j <= 1 - p``, the most probable token always kept. Since ``S_j = 1 - A_j`` with ``A_j``
the mass of the tokens ranked above ``j``, a token is kept exactly when

.. math:: A_j = \\sum_{i \\,\\text{ranked above}\\, j} \\pi_i < p,
   \\qquad \\pi = \\operatorname{softmax}(z / T),

so the kept set is a prefix of the row in descending order, and only that prefix needs
ordering. :func:`apply_top_p` takes the ``m`` largest logits (``topk``, no full sort) and their
mass under the row's softmax; when they hold at least ``p`` of it the cut lies among
them (the first token outside has ``A >= p``), and the mask is found there in float64. A row
whose candidates hold less (a flat distribution) tries more candidates, then vLLM's own sort.

The kept set is the exact top-p set of the float32 softmax (its sums in float64). vLLM's own
running sum is float32 over the ~49,000 tokens below the cut and errs by up to ~2e-5 of mass
(measured on SmolLM2's rows at T = 1.5), so where the cut lies within that width of ``p`` the
two keep sets may differ by one token of probability ~1e-4: the same law up to vLLM's own
rounding (tests/vllm/test_top_p.py compares the masks; the engine's sampled-law test the
outputs).

A request with a seed must reproduce plain vLLM draw for draw, so its kept set must be vLLM's
exactly, not up to rounding. :func:`sample_top_p` gets there without the sort for most draws.
vLLM's CPU sampler draws ``argmax_j (z_j + g_j)`` over the kept tokens, ``g`` Gumbel noise
fixed by the row's seed and the token's index (``fused_gumbel_argmax``). Masking only removes
candidates, so if the argmax ``u`` over the *whole* row is kept, it is the draw from the
masked row too. ``u`` is kept for certain when ``A_u <= p - 2e-3``. vLLM's running sum is
accumulated in float64 (torch's CPU ``cumsum``); what it sums, and what ours sums, are float32
softmaxes whose normalisers add ~49,000 terms in 8 or 16 float32 lanes, each off by at most
~6,000 roundings, 4e-4 of the mass (measured: 2e-5). Only a draw that lands in the tail or
that close to the cut (about ``1 - p`` of the draws) pays vLLM's sort and draws again, with
the same seed, from vLLM's own mask.

Cost, measured on a 2-core AVX2 EPYC (2 threads) on SmolLM2's own rows (49,152 tokens,
T = 0.7, p = 0.9): vLLM's mask 5.6 ms for one draft position and 12.1 ms for four, nearly all
of it the sort, beside a ~45 ms step of the target; this one 0.7 and 1.7 ms.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["apply_top_p", "sample_top_p"]

CANDIDATES = (64, 1024)  # candidate counts tried in turn before the full sort
_SLACK = 1e-6  # relative margin on the candidates' mass: below it, try more candidates
CERTAIN = 2e-3  # a draw whose mass above lies this far below p is in vLLM's kept set


def apply_top_p(logits: torch.Tensor, p: torch.Tensor,
                fallback: Callable[[torch.Tensor, None, torch.Tensor], torch.Tensor]
                ) -> torch.Tensor:
    """Mask, in place, every token top-p drops (module docstring) in each row of ``logits``.

    Parameters
    ----------
    logits : torch.Tensor
        ``(n, V)`` float, temperature-scaled; masked entries become ``-inf``.
    p : torch.Tensor
        ``(n,)`` each row's top-p in ``(0, 1]``; a row with ``p >= 1`` is left as it is.
    fallback : callable
        vLLM's ``apply_top_k_top_p(logits, None, p)``, for the rows the candidates do not
        settle.

    Returns
    -------
    torch.Tensor
        ``logits``.
    """
    if logits.ndim != 2 or p.shape != logits.shape[:1]:
        raise ValueError(f"apply_top_p: logits (n, V) and p (n,) expected, got "
                         f"{tuple(logits.shape)} and {tuple(p.shape)}")
    todo = torch.nonzero(p < 1).flatten()
    if todo.numel() == 0:
        return logits
    probs = logits[todo].softmax(dim=-1)  # float32, as vLLM's; one row per entry of todo
    for m in CANDIDATES:
        if todo.numel() == 0 or m >= logits.shape[1]:
            break
        vals, idx = logits[todo].topk(m, dim=-1)  # descending
        mass = probs.gather(1, idx).double()
        above = mass.cumsum(dim=-1) - mass  # A of each candidate
        p_rows = p[todo].double()[:, None]
        settled = above[:, -1] + mass[:, -1] >= p_rows[:, 0] * (1 + _SLACK)
        rows = todo[settled]
        if rows.numel():
            kept = vals[settled].masked_fill(above[settled] >= p_rows[settled], -float("inf"))
            logits[rows] = logits.new_full((len(rows), logits.shape[1]),
                                           -float("inf")).scatter_(1, idx[settled], kept)
        todo, probs = todo[~settled], probs[~settled]
    if todo.numel():
        logits[todo] = fallback(logits[todo], None, p[todo])
    return logits


def sample_top_p(logits: torch.Tensor, p: torch.Tensor, seeds: torch.Tensor,
                 gumbel_argmax: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 fallback: Callable[[torch.Tensor, None, torch.Tensor], torch.Tensor]
                 ) -> torch.Tensor:
    """The tokens vLLM's CPU sampler draws from each row masked by its top-p, with these seeds,
    without sorting the vocabulary where the draw is certain to be kept (module docstring).

    Parameters
    ----------
    logits : torch.Tensor
        ``(n, V)`` float32, temperature-scaled, no top-p applied; left as they are.
    p : torch.Tensor
        ``(n,)`` each row's top-p in ``(0, 1]``.
    seeds : torch.Tensor
        ``(n,)`` int64, each row's seed as vLLM's sampler drew it from the request's generator.
    gumbel_argmax : callable
        vLLM's ``torch.ops._C.fused_gumbel_argmax(logits, seeds)``.
    fallback : callable
        vLLM's ``apply_top_k_top_p(logits, None, p)``, for the draws that are not certain.

    Returns
    -------
    torch.Tensor
        ``(n,)`` int64, the token ids: vLLM's ``gumbel_argmax(fallback(logits, None, p), seeds)``.
    """
    if logits.ndim != 2 or p.shape != logits.shape[:1] or seeds.shape != logits.shape[:1]:
        raise ValueError(f"sample_top_p: logits (n, V), p (n,) and seeds (n,) expected, got "
                         f"{tuple(logits.shape)}, {tuple(p.shape)} and {tuple(seeds.shape)}")
    tokens = gumbel_argmax(logits, seeds)
    probs = logits.softmax(dim=-1)
    drawn = probs.gather(1, tokens[:, None])
    # the mass ranked above each draw, ties counted above (vLLM's sort may order them either way)
    above = (probs * (probs >= drawn)).sum(dim=-1, dtype=torch.float64) - drawn[:, 0].double()
    unsure = torch.nonzero(above > p.double() - CERTAIN).flatten()
    if unsure.numel():
        masked = fallback(logits[unsure].clone(), None, p[unsure])
        tokens[unsure] = gumbel_argmax(masked, seeds[unsure]).to(tokens.dtype)
    return tokens
