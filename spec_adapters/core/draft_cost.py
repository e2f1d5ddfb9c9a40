"""Cost-aware drafting: the experts are (drafter, k) pairs, k = 0 .. K drafted tokens.

The paper's learner picks a drafter and always drafts ``K`` tokens; its loss is the expected
acceptance length alone. On hardware where verifying ``k + 1`` tokens costs more than one plain
step (a CPU), a round that drafts badly is slower than not drafting at all. Here the learner's
experts are the pairs ``e = (i, k)``: drafter ``i`` drafting ``k`` tokens, ``k = 0`` being a
plain target step. The verified chunk of a round already gives every pair its counterfactual
acceptance length, by truncating the estimator of Theorem 3 at ``k`` (no extra target call):

.. math:: AL_i(k) = 1 + \\sum_{j=1}^{k} w_{ij} \\gamma_{ij}, \\qquad
          w_{ij} = \\prod_{l<j} \\rho_{il} \\;\\text{(corrected)} \\;\\text{or}\\;
          \\prod_{l<j} \\gamma_{il} \\;\\text{(paper)},

and :class:`StepCosts` gives its cost in seconds, measured online in this process:

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

numpy only; used by the transformers decoders and usable by any other loop.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LENGTH_LOSSES", "StepCosts", "acceptance_lengths", "expert_losses",
           "expert_of", "n_experts"]

LENGTH_LOSSES = ("time", "mat")


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


class StepCosts:
    """Online measurements of what a round costs, in seconds.

    Each quantity is an exponential moving average (weight ``alpha`` on the newest sample),
    so it follows slow drifts (thermal, other load) and forgets the first, cold calls.

    Parameters
    ----------
    n_drafters : int
    max_k : int
        ``K``: the target is measured for ``1 .. K + 1`` verified tokens.
    alpha : float, default 0.2

    Notes
    -----
    An unmeasured ``T(n)`` is interpolated linearly between measured lengths and extrapolated
    with the nearest measured value; with nothing measured all costs are 0, and
    :func:`expert_losses` then falls back to the acceptance-only loss. An unmeasured drafter
    costs the mean per-token time of the measured ones (0 if none).
    """

    def __init__(self, n_drafters: int, max_k: int, alpha: float = 0.2) -> None:
        if isinstance(n_drafters, bool) or int(n_drafters) != n_drafters or n_drafters < 1:
            raise ValueError(f"n_drafters must be an integer >= 1, got {n_drafters!r}")
        if isinstance(max_k, bool) or int(max_k) != max_k or max_k < 1:
            raise ValueError(f"max_k must be an integer >= 1, got {max_k!r}")
        if not 0.0 < float(alpha) <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.n, self.k, self.alpha = int(n_drafters), int(max_k), float(alpha)
        self.target = np.full(self.k + 1, np.nan)     # T(n) at index n - 1
        self.per_token = np.full(self.n, np.nan)      # D_i(k) / k
        self.overhead = np.nan                        # O
        self.seconds, self.tokens = 0.0, 0            # every round so far, for tau

    @staticmethod
    def _check_seconds(seconds: float) -> float:
        s = float(seconds)
        if not np.isfinite(s) or s < 0:
            raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
        return s

    def _ema(self, old: float, new: float) -> float:
        return new if np.isnan(old) else (1 - self.alpha) * old + self.alpha * new

    def observe_target(self, n_tokens: int, seconds: float) -> StepCosts:
        """One target forward that verified ``n_tokens`` (= k + 1) took ``seconds``."""
        if not 1 <= int(n_tokens) <= self.k + 1 or int(n_tokens) != n_tokens:
            raise ValueError(f"n_tokens must be in 1..{self.k + 1}, got {n_tokens!r}")
        j = int(n_tokens) - 1
        self.target[j] = self._ema(self.target[j], self._check_seconds(seconds))
        return self

    def observe_draft(self, drafter: int, k: int, seconds: float) -> StepCosts:
        """Drafter ``drafter`` proposed ``k >= 1`` tokens in ``seconds``."""
        if not 0 <= int(drafter) < self.n or int(drafter) != drafter:
            raise ValueError(f"drafter must be in 0..{self.n - 1}, got {drafter!r}")
        if not 1 <= int(k) <= self.k or int(k) != k:
            raise ValueError(f"k must be in 1..{self.k}, got {k!r}")
        s = self._check_seconds(seconds) / int(k)
        self.per_token[int(drafter)] = self._ema(self.per_token[int(drafter)], s)
        return self

    def observe_overhead(self, seconds: float) -> StepCosts:
        """The rest of one round (select + evaluate + update) took ``seconds``."""
        self.overhead = self._ema(self.overhead, self._check_seconds(seconds))
        return self

    def observe_round(self, seconds: float, tokens: int) -> StepCosts:
        """A whole round took ``seconds`` and produced ``tokens`` (for :attr:`time_per_token`)."""
        s = self._check_seconds(seconds)
        if isinstance(tokens, bool) or int(tokens) != tokens or tokens < 0:
            raise ValueError(f"tokens must be an integer >= 0, got {tokens!r}")
        self.seconds += s
        self.tokens += int(tokens)
        return self

    @property
    def time_per_token(self) -> float | None:
        """Seconds per generated token over every observed round (``tau_hat`` of the loss);
        ``None`` before the first token."""
        return self.seconds / self.tokens if self.tokens else None

    def target_curve(self) -> np.ndarray:
        """``T(n)`` for ``n = 1 .. K + 1`` (interpolated where unmeasured; 0 if none is)."""
        known = ~np.isnan(self.target)
        if not known.any():
            return np.zeros(self.k + 1)
        n = np.arange(1, self.k + 2)
        return np.interp(n, n[known], self.target[known])

    def round_costs(self) -> np.ndarray:
        """``c[i, k] = T(k + 1) + D_i(k) + O``, shape ``(N, K + 1)``."""
        per = self.per_token.copy()
        unknown = np.isnan(per)
        per[unknown] = 0.0 if unknown.all() else per[~unknown].mean()
        overhead = 0.0 if np.isnan(self.overhead) else self.overhead
        return self.target_curve()[None, :] + np.outer(per, np.arange(self.k + 1)) + overhead

    def state_dict(self) -> dict:
        """JSON-serialisable measurements (NaN = not measured is stored as None)."""
        def enc(a):
            return [None if np.isnan(x) else float(x) for x in np.atleast_1d(a)]
        return {"n": self.n, "k": self.k, "alpha": self.alpha, "target": enc(self.target),
                "per_token": enc(self.per_token), "overhead": enc(self.overhead)[0],
                "seconds": self.seconds, "tokens": self.tokens}


def expert_losses(gamma, rho=None, costs: np.ndarray | None = None, loss: str = "time",
                  tau: float | None = None, validate: bool = True) -> np.ndarray:
    """Loss in [0, 1] of every (drafter, k) expert for one round window, flattened.

    Parameters
    ----------
    gamma, rho : array_like
        ``(N, K)``; see :func:`acceptance_lengths`.
    costs : numpy.ndarray, optional
        ``(N, K + 1)`` round costs ``c_i(k)`` (:meth:`StepCosts.round_costs`); required for
        ``loss="time"``.
    loss : {"time", "mat"}
        ``"time"``: the scaled, linearised time per token of the module docstring;
        ``"mat"``: ``(K + 1 - AL_i(k)) / (K + 1)`` (the paper's EAL loss, truncated at k).
    tau : float, optional
        ``tau_hat``, seconds per generated token to linearise around; default the plain
        step's cost ``min_i c_i(0)``.
    validate : bool, default True
        Check ``gamma``, ``rho`` and ``costs`` (``False``: they were checked where produced,
        as the decoders' round tables and :class:`StepCosts` do).

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
