"""The learner's experts and their losses from a round window (numpy only).

Without cost awareness the experts are the drafters, and a window's loss per drafter is the
paper's (Theorem 3): EAL ``(K + 1 - AL_hat) / (K + 1)``, with the corrected estimator
``AL = 1 + sum_k (prod_{j<k} rho_j) gamma_k`` when sampling (unbiased), the paper's
``AL = 1 + sum_k prod_{j<=k} gamma_j`` when greedy (then ``rho = gamma`` and the two forms
coincide), or TAP ``1 - mean_j gamma_j``; :func:`window_losses`.

Cost-aware drafting: the experts are (drafter, k) pairs, k = 0 .. K drafted tokens.

The paper's learner picks a drafter and always drafts ``K`` tokens; its loss is the expected
acceptance length alone. On hardware where verifying ``k + 1`` tokens costs more than one plain
step (a CPU), a round that drafts badly is slower than not drafting at all. Here the learner's
experts are the pairs ``e = (i, k)``: drafter ``i`` drafting ``k`` tokens, ``k = 0`` being a
plain target step. The verified chunk of a round already gives every pair its counterfactual
acceptance length, by truncating the estimator of Theorem 3 at ``k`` (no extra target call):

.. math:: AL_i(k) = 1 + \\sum_{j=1}^{k} w_{ij} \\gamma_{ij}, \\qquad
          w_{ij} = \\prod_{l<j} \\rho_{il} \\;\\text{(corrected)} \\;\\text{or}\\;
          \\prod_{l<j} \\gamma_{il} \\;\\text{(paper)},

and :class:`~spec_adapters.selection.costs.StepCosts` gives its cost in seconds, measured
online in this process:

.. math:: c_i(k) = T(k + 1) + D_i(k) + O,

with ``T(n)`` the target's forward time verifying ``n`` tokens, ``D_i(k)`` drafter ``i``'s
propose time for ``k`` tokens (``D_i(0) = 0``) and ``O`` the rest of a round (selection,
evaluation, update), common to all experts.

The loss (``"time"``) is the Dinkelbach linearisation of the time per generated token,
shifted and scaled into [0, 1]:

.. math:: \\ell_i(k) = \\frac{c_i(k) - \\hat\\tau\\, AL_i(k) + \\hat\\tau (K + 1)}
                             {c_{\\max} + \\hat\\tau K},

where ``tau_hat`` is the time per token achieved so far (initially the plain step's cost
``T(1) + O``). It is linear in ``AL``, so the corrected estimator's unbiasedness carries over to
the loss (a ratio ``c / AL_hat`` would be biased by Jensen's inequality), and at the best
ratio ``tau*`` the expert minimising ``E[c] - tau* E[AL]`` is exactly the one minimising
``E[c] / E[AL]``, the long-run time per token. docs/theory.md states the regret guarantee this
gives (Hedge's bound over ``N (K + 1)`` experts, in units of the scale) and what it does not.
``"mat"`` keeps the paper's acceptance-only loss ``(K + 1 - AL_i(k)) / (K + 1)``, for which
``k = K`` always wins.

Every engine's loop feeds its learner through :func:`window_losses`.
"""

from __future__ import annotations

import numpy as np

from spec_adapters.selection.book import Window

__all__ = ["LENGTH_LOSSES", "LOSSES", "acceptance_lengths", "expert_losses", "expert_of",
           "n_experts", "window_losses"]

LOSSES = ("eal", "tap")  # per drafter (the paper's)
LENGTH_LOSSES = ("time", "mat")  # per (drafter, k)


def n_experts(n_drafters: int, max_k: int) -> int:
    """Number of (drafter, k) experts: ``N (K + 1)``; expert ``e = i (K + 1) + k``."""
    return int(n_drafters) * (int(max_k) + 1)


def expert_of(e: int, max_k: int) -> tuple[int, int]:
    """``(drafter, k)`` of expert index ``e`` (the inverse of ``i (K + 1) + k``)."""
    return divmod(int(e), int(max_k) + 1)


def _unit_matrix(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError(f"{name} must have shape (N, K) with K >= 1, got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} has NaN or infinite entries")
    if (a < -1e-6).any() or (a > 1 + 1e-6).any():
        raise ValueError(f"{name} must lie in [0, 1] (min {a.min():.6g}, max {a.max():.6g})")
    return np.clip(a, 0.0, 1.0)


def acceptance_lengths(gamma, rho=None, validate: bool = True) -> np.ndarray:
    """Counterfactual acceptance length of every (drafter, k): ``(N, K + 1)``.

    Parameters
    ----------
    gamma : array_like
        ``(N, K)`` acceptance probabilities of each drafter at the ``K`` verified positions
        of a round window.
    rho : array_like, optional
        ``(N, K)`` realized ratios ``min(1, q(x)/p(x))`` (corrected, unbiased estimator);
        ``None`` uses the paper's product of gammas (exact when greedy, where ``rho = gamma``).
    validate : bool, default True
        Check shapes and ranges; ``False`` for statistics already checked where they were
        produced (the decoders' round tables).

    Returns
    -------
    numpy.ndarray
        ``AL[i, k] = 1 + sum_{j<=k} w_ij gamma_ij``, nondecreasing in ``k``, ``AL[:, 0] = 1``.
    """
    if validate:
        g = _unit_matrix(gamma, "gamma")
        r = g if rho is None else _unit_matrix(rho, "rho")
    else:
        g = np.asarray(gamma, dtype=np.float64)
        r = g if rho is None else np.asarray(rho, dtype=np.float64)
    if r.shape != g.shape:
        raise ValueError(f"rho must have gamma's shape {g.shape}, got {r.shape}")
    w = np.ones_like(g)
    w[:, 1:] = np.cumprod(r[:, :-1], axis=1)
    al = np.ones((g.shape[0], g.shape[1] + 1))
    al[:, 1:] += np.cumsum(w * g, axis=1)
    return al


def expert_losses(gamma, rho=None, costs: np.ndarray | None = None, loss: str = "time",
                  tau: float | None = None, validate: bool = True) -> np.ndarray:
    """Loss in [0, 1] of every (drafter, k) expert for one round window, flattened.

    Parameters
    ----------
    gamma, rho : array_like
        ``(N, K)``; see :func:`acceptance_lengths`.
    costs : numpy.ndarray, optional
        ``(N, K + 1)`` round costs ``c_i(k)``
        (:meth:`~spec_adapters.selection.costs.StepCosts.round_costs`); required for
        ``loss="time"``.
    loss : {"time", "mat"}
        ``"time"``: the scaled, linearised time per token of the module docstring;
        ``"mat"``: ``(K + 1 - AL_i(k)) / (K + 1)`` (the paper's EAL loss, truncated at k).
    tau : float, optional
        ``tau_hat``, seconds per generated token to linearise around; default the plain
        step's cost ``min_i c_i(0)``.
    validate : bool, default True
        Check ``gamma``, ``rho`` and ``costs`` (``False``: they were checked where produced,
        as the round book and the step-cost models do).

    Returns
    -------
    numpy.ndarray
        ``(N (K + 1),)``, expert ``i (K + 1) + k`` at index ``i (K + 1) + k``.

    Raises
    ------
    ValueError
        Unknown loss; ``costs`` missing, of the wrong shape, negative or non-finite; bad
        ``gamma`` / ``rho``; ``tau`` negative or non-finite.
    """
    if loss not in LENGTH_LOSSES:
        raise ValueError(f"unknown draft-length loss {loss!r}; expected one of {LENGTH_LOSSES}")
    al = acceptance_lengths(gamma, rho, validate)
    K = al.shape[1] - 1
    mat = (K + 1 - al) / (K + 1)
    if loss == "mat":
        return np.clip(mat, 0.0, 1.0).reshape(-1)
    if costs is None:
        raise ValueError("loss='time' needs the round costs (StepCosts.round_costs())")
    c = np.asarray(costs, dtype=np.float64)
    if c.shape != al.shape:
        raise ValueError(f"costs must have shape {al.shape} (N, K + 1), got {c.shape}")
    if validate and (not np.isfinite(c).all() or (c < 0).any()):
        raise ValueError("costs must be finite and >= 0")
    t = float(c[:, 0].min()) if tau is None else float(tau)
    if not np.isfinite(t) or t < 0:
        raise ValueError(f"tau must be finite and >= 0, got {tau!r}")
    scale = float(c.max()) + t * K
    if scale <= 0:  # nothing measured yet: acceptance is all there is to go on
        return np.clip(mat, 0.0, 1.0).reshape(-1)
    return np.clip((c - t * al + t * (K + 1)) / scale, 0.0, 1.0).reshape(-1)


def window_losses(window: Window, loss: str, corrected: bool, costs: np.ndarray | None = None,
                  tau: float | None = None) -> np.ndarray:
    """The learner's loss vector for one completed round window.

    Parameters
    ----------
    window : Window
        From :meth:`spec_adapters.selection.book.RoundBook.pop_completed`.
    loss : {"eal", "tap", "time"}
        ``"eal"`` / ``"tap"``: one loss per drafter (module docstring); ``"time"``: one per
        ``(drafter, k)`` expert (:func:`expert_losses`), expert ``(i, k)`` paying for the
        ``min(k, lengths_i)`` tokens drafter ``i`` would have drafted.
    corrected : bool
        Use ``rho`` (the corrected, unbiased estimator; sampling) rather than the paper's
        product of gammas (greedy, point masses: the same).
    costs : numpy.ndarray, optional
        ``"time"`` only: the round's cost of drafting ``k = 0 .. K`` tokens, ``(K + 1,)`` (the
        same for every drafter) or ``(N, K + 1)``.
    tau : float, optional
        ``"time"`` only: seconds per generated token to linearise around (default: the plain
        step's cost).
    """
    g = window.gamma
    r = window.rho if corrected else None
    K = g.shape[1]
    if loss == "time":
        c = np.broadcast_to(np.asarray(costs, dtype=np.float64), (g.shape[0], K + 1))
        drafted = np.minimum(np.arange(K + 1)[None, :], window.lengths[:, None])
        return expert_losses(g, r, np.take_along_axis(c, drafted, 1), "time", tau=tau,
                             validate=False)
    if loss == "tap":
        values = 1.0 - g.mean(axis=1)
    elif loss == "eal":
        values = (K + 1 - acceptance_lengths(g, r, validate=False)[:, K]) / (K + 1)
    else:
        raise ValueError(f"unknown loss {loss!r}; expected one of {(*LOSSES, 'time')}")
    return np.clip(values, 0.0, 1.0)
