"""Counterfactual acceptance-length estimators and the losses fed to the learner (Theorem 3).

After a round starting at verified position ``s`` is fully verified (positions ``s+1..s+K``),
every drafter ``i`` has, at each verified position ``j``, its acceptance probability
``gamma_j`` (Theorem 1 or 2, evaluated at the realized, target-verified prefix) and the ratio
``rho_j = min(1, q_j(x_j) / p_j(x_j))`` at the realized token ``x_j``. From these:

- :func:`paper_acceptance_length`: the paper's Theorem 3, ``1 + sum_k prod_{j<=k} gamma_j``.
  Exact in expectation for greedy decoding; **biased when sampling**, because the realized
  token ``x_j`` is drawn from ``p_j`` while a drafter accepted at ``j`` continues from a token
  drawn from ``min(p_j, q_j) / gamma_j``.
- :func:`corrected_acceptance_length`: ``1 + sum_k (prod_{j<k} rho_j) gamma_k``, whose
  expectation over target-distributed trajectories is exactly the expected number of tokens
  per target call, greedy or not (derivation in docs/theory.md; checked by ``proofs_check``).
  Equal to the paper's form when greedy. Use it when ``temperature > 0``.
- :func:`tap_loss` and :func:`eal_loss`: the losses in ``[0, 1]`` given to the learner.

All functions are pure torch, batched over leading dimensions (rounds x drafters), keep the
input dtype, and raise ``ValueError`` naming the problem on bad input.
"""

from __future__ import annotations

import torch

from spec_adapters.core.proposal import Rows, target_and_draft

__all__ = [
    "corrected_acceptance_length",
    "eal_loss",
    "paper_acceptance_length",
    "realized_ratio",
    "tap_loss",
]

_RANGE_TOL = 1e-6


def _check_unit(x: torch.Tensor, name: str) -> torch.Tensor:
    """Validate a floating tensor ``(..., K)``, K >= 1, entries in [0, 1]; return it clamped."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point torch.Tensor")
    if x.dim() < 1:
        raise ValueError(f"{name} must have shape (..., K), got a 0-d tensor")
    if x.shape[-1] < 1:
        raise ValueError(f"K (the last dimension of {name}) must be >= 1, got {x.shape[-1]}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} has NaN or infinite entries")
    if bool((x < -_RANGE_TOL).any()) or bool((x > 1 + _RANGE_TOL).any()):
        raise ValueError(
            f"{name} must lie in [0, 1] (got min {float(x.min()):.6g}, max {float(x.max()):.6g})"
        )
    return x.clamp(0.0, 1.0)


def paper_acceptance_length(gamma: torch.Tensor) -> torch.Tensor:
    """Theorem 3 as the paper states it: ``AL = 1 + sum_{k=1..K} prod_{j<=k} gamma_j``.

    Parameters
    ----------
    gamma : torch.Tensor
        ``(..., K)`` acceptance probabilities of one drafter at the ``K`` verified positions of
        a round, in order (each evaluated at the realized verified prefix).

    Returns
    -------
    torch.Tensor
        ``(...)`` estimated tokens per target call, in ``[1, K+1]``.

    Notes
    -----
    Exact in expectation when decoding greedily (``gamma_j`` in {0, 1} and the realized prefix
    is the one the drafter would have followed). When sampling it is biased (downwards in the
    toy case of docs/theory.md: true 1.5, expectation 1.25); prefer
    :func:`corrected_acceptance_length`.
    """
    g = _check_unit(gamma, "gamma")
    return 1.0 + g.cumprod(-1).sum(-1)


def corrected_acceptance_length(gamma: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """Unbiased counterfactual acceptance length: ``AL = 1 + sum_k (prod_{j<k} rho_j) gamma_k``.

    With ``x_j ~ p_j`` the realized (target-distributed) tokens and
    ``rho_j = min(1, q_j(x_j)/p_j(x_j))``, ``E[rho_j | prefix] = gamma_j`` and, more to the point,
    ``p_j(x) rho_j(x) = min(p_j(x), q_j(x))`` is exactly the probability that the drafter
    proposes ``x`` *and* has it accepted. Hence by induction on ``k``

    .. math:: E\\Big[\\prod_{j<k} \\rho_j \\, \\gamma_k\\Big] = P(\\text{at least } k
              \\text{ drafts accepted}),

    and ``E[AL] = 1 + sum_k P(L >= k)`` is the expected number of tokens per target call.

    Parameters
    ----------
    gamma : torch.Tensor
        ``(..., K)`` acceptance probabilities at the round's verified positions.
    rho : torch.Tensor
        ``(..., K)`` or ``(..., K-1)`` realized ratios (see :func:`realized_ratio`); only
        ``rho_1..rho_{K-1}`` are used (a last entry ``rho_K`` is ignored). Leading dims
        broadcast against ``gamma``.

    Returns
    -------
    torch.Tensor
        ``(...)`` in ``[1, K+1]`` (so its variance is at most ``K^2 / 4``). Equal to
        :func:`paper_acceptance_length` when greedy (then ``rho_j = gamma_j`` in {0, 1}).
    """
    g = _check_unit(gamma, "gamma")
    K = g.shape[-1]
    if not isinstance(rho, torch.Tensor) or not rho.is_floating_point() or rho.dim() < 1:
        raise ValueError(
            "rho must be a floating-point torch.Tensor of shape (..., K) or (..., K-1)"
        )
    if rho.shape[-1] not in (K, K - 1):
        raise ValueError(
            f"rho must have last dimension K = {K} or K-1 = {K - 1}, got {rho.shape[-1]}"
        )
    r = _check_unit(rho, "rho") if rho.shape[-1] else rho
    try:
        torch.broadcast_shapes(g.shape[:-1], r.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"gamma {tuple(g.shape)} and rho {tuple(r.shape)} leading dims do not broadcast"
        ) from None
    r = r[..., : K - 1].to(g.dtype)
    # prefix weights w_k = prod_{j<k} rho_j: w_1 = 1, w_k = rho_1 ... rho_{k-1}
    first = torch.ones(*r.shape[:-1], 1, dtype=g.dtype, device=g.device)
    w = torch.cat([first, r.cumprod(-1)], dim=-1)
    return 1.0 + (w * g).sum(-1)


def realized_ratio(p: torch.Tensor, q: torch.Tensor | Rows, tokens: torch.Tensor, *,
                   validate: bool = True) -> torch.Tensor:
    """``rho = min(1, q(x) / p(x))`` at the realized tokens ``x``.

    Parameters
    ----------
    p : torch.Tensor
        ``(..., V)`` warped target probabilities at each verified position.
    q : torch.Tensor or Rows
        ``(..., V)`` a drafter's warped probabilities there, or a
        :mod:`~spec_adapters.core.proposal` form (``q(x)`` is read at the tokens only: a point
        mass at ``d`` gives ``rho = 1{x = d}`` for ``p(x) > 0``); leading dims broadcast with
        ``p``.
    tokens : torch.LongTensor
        ``(...)`` the realized (verified) token at each position; broadcasts with the leading
        dims of ``p`` and ``q``.
    validate : bool, default True
        Check ``p`` and ``q`` in full (a decoder that produced them passes ``False``); shapes
        and token ids are always checked.

    Returns
    -------
    torch.Tensor
        ``rho`` in ``[0, 1]``, broadcast leading shape. Where ``q(x) >= p(x)`` (including the
        probability-zero event ``p(x) = 0``) it is 1.

    Notes
    -----
    ``p(x) rho(x) = min(p(x), q(x))``: the probability that the drafter would have proposed
    ``x`` and had it accepted. Greedy (one-hot ``p``, ``x = argmax p``): ``rho = q(x)``.
    """
    q = target_and_draft(p, q, validate)
    if (
        not isinstance(tokens, torch.Tensor)
        or tokens.is_floating_point()
        or tokens.dtype == torch.bool
    ):
        raise ValueError("tokens must be an integer tensor of token ids")
    V = p.shape[-1]
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
        raise ValueError(f"tokens has ids outside [0, {V})")
    try:
        lead = torch.broadcast_shapes(p.shape[:-1], q.lead, tokens.shape)
    except RuntimeError:
        raise ValueError(
            f"p {tuple(p.shape)}, q {(*q.lead, V)} and tokens {tuple(tokens.shape)} do not "
            "broadcast (tokens must match the leading dims of p and q)"
        ) from None
    tokens = tokens.to(p.device).expand(lead)
    qx = q.to(p.device).prob(tokens)
    dtype = torch.promote_types(p.dtype, qx.dtype)
    px = p.to(dtype).expand(*lead, V).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    qx = qx.to(dtype).expand(lead)
    ones = torch.ones_like(px)
    return torch.where(qx >= px, ones, qx / torch.where(px > 0, px, ones))


def tap_loss(gamma: torch.Tensor) -> torch.Tensor:
    """TAP loss of a round: ``1 - mean_j gamma_j`` over its ``K`` verified positions.

    The paper's TAP loss is ``f = 1 - gamma`` for one acceptance probability. A round verifies
    ``K`` positions, each with its own ``gamma_j`` (at the realized prefix); we average them, so
    the loss stays in ``[0, 1]``, uses every verified position, and with ``K = 1`` is exactly the
    paper's ``1 - gamma``. (Using only ``gamma_1`` would discard information; summing would
    leave ``[0, 1]`` and change the regret scale.) Theorem 4's ``sqrt(K log N / T)`` rate comes
    from the delay ``<= 2K`` of this loss, not from its scale.

    Parameters
    ----------
    gamma : torch.Tensor
        ``(..., K)``, entries in ``[0, 1]``.

    Returns
    -------
    torch.Tensor
        ``(...)`` in ``[0, 1]``.
    """
    g = _check_unit(gamma, "gamma")
    return (1.0 - g.mean(-1)).clamp_(0.0, 1.0)


def eal_loss(acceptance_length: torch.Tensor, K: int) -> torch.Tensor:
    """EAL loss: ``(K + 1 - AL) / (K + 1)``, in ``[0, 1]``; 0 when all ``K`` drafts are accepted.

    Parameters
    ----------
    acceptance_length : torch.Tensor
        ``(...)`` estimated tokens per target call, in ``[1, K+1]`` (from
        :func:`paper_acceptance_length` or :func:`corrected_acceptance_length`).
    K : int
        Draft length, ``>= 1``.

    Returns
    -------
    torch.Tensor
        ``(...)`` in ``[0, K/(K+1)]``.
    """
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K (draft length) must be an integer >= 1, got {K!r}")
    al = acceptance_length
    if not isinstance(al, torch.Tensor) or not al.is_floating_point():
        raise ValueError("acceptance_length must be a floating-point torch.Tensor")
    if not bool(torch.isfinite(al).all()):
        raise ValueError("acceptance_length has NaN or infinite entries")
    if al.numel() and (float(al.min()) < 1 - _RANGE_TOL or float(al.max()) > K + 1 + _RANGE_TOL):
        raise ValueError(
            f"acceptance_length must lie in [1, K+1] = [1, {K + 1}] "
            f"(got min {float(al.min()):.6g}, max {float(al.max()):.6g})"
        )
    return ((K + 1 - al.clamp(1.0, K + 1.0)) / (K + 1)).clamp_(0.0, 1.0)
