"""What a round costs, in seconds, measured online: the ``c_i(k)`` of the time loss
(:mod:`spec_adapters.selection.experts`). Two estimators, for the two shapes of engine, and
the seconds per generated token ``tau`` both linearise at (:class:`TokenRate`).

One request at a time (the transformers loop, the llama.cpp engine): :class:`StepCosts`
times each part of a round, ``c_i(k) = T(k + 1) + D_i(k) + O``, with ``T(n)`` the target's
forward verifying ``n`` tokens, ``D_i(k)`` drafter ``i``'s drafting of ``k`` tokens and ``O``
the rest of a round (selection, evaluation, update), each an exponential moving average.

A batch of requests (vLLM): the proposer cannot time its rows' forwards apart, only the whole
engine step, so :class:`StepTimeModel` learns the step time as a function of its rows and
drafted tokens. In vLLM one engine step runs every scheduled request at once, so what a draft of
``k`` tokens costs a request is the time its ``k`` tokens add to the step, not a per-request
forward. The proposer sees one step per ``propose`` call: the time between two calls is one step
(schedule, forward, rejection sampling, proposing), and it knows what that step scheduled: ``R``
rows (one per running request, each verifying its bonus position) and ``D`` drafted tokens (the
rows' previous drafts). Steps that prefill a prompt (a new request, or a chunk of one) are left
out of the fit: a prompt's tokens cost far less each than decode rows, and counting them
flattened the fitted slope (measured at 16 concurrent requests: 1.5 ms per token with them,
1.9 without).

:class:`StepTimeModel` fits

.. math:: T(R, D) = a + b_R R + b_D D + c [D > 0]

by exponentially weighted least squares over those ``(R, D, seconds)`` triples. ``c`` is the
price of speculating at all in a step (vLLM builds the draft's metadata and runs its rejection
sampler only when some row drafted); it is told from ``a`` only where steps with and without
drafts both occur, and is pulled to 0 (a ridge, ``a`` unpenalised) where they do not. A row and a
drafted token cost about the same on a CPU (every position is one more row of every matmul);
on a GPU a step is flat in the positions until the batch saturates it, and the two may differ
(a row also costs attention over its whole context). The data often cannot tell ``b_R`` from
``b_D`` (a load where nobody drafts has ``D = 0`` throughout; a fixed concurrency has one
``R``), so the fit is penalised towards ``b_R = b_D`` with the weight of one step that drafted
one token more than it had rows (``(b_D - b_R)^2``), and ``b_R, b_D, c`` towards 0 with a
vanishing weight (so that it is always defined): a drafted token is priced like a row until
the steps show otherwise. ``a, b_R, b_D, c >= 0`` (a negative one is refitted at 0).

Batch-aware expert costs (:meth:`StepTimeModel.expert_costs`). A step of ``B`` requests,
request ``r`` drafting ``k_r`` tokens, takes ``T = a + b_R B + b_D sum_r k_r`` and yields
``sum_r AL_r`` tokens. Charging request ``r``

.. math:: c_r(k) = a / B + b_R + b_D k + (c / B) [k > 0]

splits the step exactly when every request drafts or none does (``sum_r c_r(k_r) = T``; when
only some draft, the ``c`` of the step is undercharged), so the batch's time per token
``sum_r c_r / sum_r AL_r`` is minimised, Dinkelbach-linearised at the batch's time per token
``tau``, by each request minimising its own ``c_r(k) - tau AL_r(k)``: a draft pays when its
expected accepted tokens exceed ``b_D k / tau``. With ``B = 1`` ``c(k)`` is
the step latency ``T(1, k)``; at large ``B`` the shared ``a`` vanishes and, on a CPU where
``b_D`` is most of a step's cost per row, speculation switches itself off.

Pricing a drafted token (:meth:`StepTimeModel.draft_seconds`, what the proposer's abstention
weighs a draft's expected gain against). A drafted token is one more query position in every
matmul and one more row of logits: the work of a row's own position, the row's per-request
overhead aside. The fit splits the two only as far as rows and drafts vary independently, and
at a steady load they rise and fall together; measured at 21 requests in flight (this CPU) the
fit gave ``b_D`` = 1.35 ms against ``b_R`` = 4.5 ms, while the steps themselves (plain against
speculating, docs/benchmark-history.md "vLLM under load") put a drafted token near 3.7 ms: drafting
then looked cheap, and ran at 0.87-0.96x plain. An underestimated draft cost makes speculation
slower than not speculating, an overestimated one only forgoes some gain, so the abstention
prices a drafted token at ``max(b_D, b_R)``. The learner's losses keep the fitted split
(:meth:`StepTimeModel.expert_costs`, exact: the charges sum to the step).
"""

from __future__ import annotations

import numpy as np

__all__ = ["StepCosts", "StepTimeModel", "TokenRate"]

RIDGE = 1e-9  # weight of the pull of b_R, b_D towards 0, per unit of total weight
SAME = 1.0    # weight of the pull of b_D towards b_R: one step's


class TokenRate:
    """Seconds per generated token, followed online (``tau_hat`` of the time loss).

    ``value = S / N`` with ``S`` and ``N`` the seconds and tokens of the rounds (or engine
    steps) observed, each weighted ``(1 - alpha)^age``: both sums forget at the same rate,
    so their ratio is unbiased from the first observation on.

    Parameters
    ----------
    alpha : float or None, default None
        Weight of the newest observation in ``(0, 1]``; ``None``: every observation weighs the
        same (the rate so far: one request at a time, the transformers and llama.cpp loops).
        The vLLM proposer forgets (0.2 a step): its load changes.
    """

    def __init__(self, alpha: float | None = None) -> None:
        if alpha is not None and not 0.0 < float(alpha) <= 1.0:
            raise ValueError(f"alpha must be None or in (0, 1], got {alpha!r}")
        self.keep = 1.0 if alpha is None else 1.0 - float(alpha)
        self.seconds, self.tokens = 0.0, 0.0

    def observe(self, seconds: float, tokens: int) -> TokenRate:
        """``seconds`` that produced ``tokens`` (finite, >= 0)."""
        s = float(seconds)
        if not np.isfinite(s) or s < 0:
            raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
        if isinstance(tokens, bool) or int(tokens) != tokens or tokens < 0:
            raise ValueError(f"tokens must be an integer >= 0, got {tokens!r}")
        self.seconds = self.keep * self.seconds + s
        self.tokens = self.keep * self.tokens + int(tokens)
        return self

    @property
    def value(self) -> float | None:
        """Seconds per token; ``None`` before the first token."""
        return self.seconds / self.tokens if self.tokens > 0 else None


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
        self.rate = TokenRate()                       # every round so far, for tau

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
        self.rate.observe(seconds, tokens)
        return self

    @property
    def time_per_token(self) -> float | None:
        """Seconds per generated token over every observed round (``tau_hat`` of the loss);
        ``None`` before the first token."""
        return self.rate.value

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
                "seconds": self.rate.seconds, "tokens": int(self.rate.tokens)}


class StepTimeModel:
    """Exponentially weighted, penalised linear fit of step seconds on rows and drafted tokens.

    Parameters
    ----------
    decay : float, default 0.98
        Weight kept by the past at each new observation (effective memory ``1 / (1 - decay)``
        steps), so the fit follows load changes.
    fixed : (a, b_R, b_D) or (a, b_R, b_D, c), optional
        Seconds of the step, of a row, of a drafted token and of speculating at all (0 when
        not given), used instead of the fit (a cost table an operator sets, or a test);
        observations are then ignored.
    speculation_term : bool, default True
        Fit ``c``; ``False``: ``c = 0`` (the model before it had the term; an ablation).
    refit_every : int, default 1
        Solve the fit again after this many observations (until then :meth:`coefficients`
        are those of the last solve, at most ``refit_every - 1`` steps old, a small lag
        against the fit's memory of ``1 / (1 - decay)`` steps). The vLLM proposer, which
        asks every engine step, uses 4: a solve costs ~0.1 ms there, with the caches a
        forward pass left.
    """

    def __init__(self, decay: float = 0.98, fixed: tuple[float, ...] | None = None,
                 speculation_term: bool = True, refit_every: int = 1) -> None:
        if not 0.0 < float(decay) < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay!r}")
        if isinstance(refit_every, bool) or not isinstance(refit_every, int) or refit_every < 1:
            raise ValueError(f"refit_every must be an integer >= 1, got {refit_every!r}")
        if fixed is not None:
            fixed = tuple(float(x) for x in fixed)
            if len(fixed) not in (3, 4) or not all(np.isfinite(x) and x >= 0 for x in fixed):
                raise ValueError(f"fixed must be three or four finite seconds >= 0, got "
                                 f"{fixed!r}")
            fixed = (*fixed, 0.0)[:4]
        self.decay = float(decay)
        self.fixed = fixed
        self.speculation_term = bool(speculation_term)
        self._xx = np.zeros((4, 4))  # weighted sums of x x^T, x = (1, R, D, [D > 0])
        self._xt = np.zeros(4)       # weighted sums of x t
        self._fit: tuple[float, float, float, float] | None = None  # the last solve's
        self.refit_every = refit_every
        self._unfitted = 0  # observations since the last solve

    @property
    def observed(self) -> bool:
        return self.fixed is not None or bool(self._xx[0, 0] > 0)

    def observe(self, rows: int, drafted: int, seconds: float) -> StepTimeModel:
        """One step of ``rows >= 1`` rows verifying ``drafted >= 0`` drafted tokens took
        ``seconds``."""
        r, d, t = float(rows), float(drafted), float(seconds)
        if not r >= 1 or not d >= 0 or not np.isfinite(t) or t < 0:
            raise ValueError(f"need rows >= 1, drafted >= 0 and finite seconds >= 0, got "
                             f"{rows!r}, {drafted!r}, {seconds!r}")
        x = np.array([1.0, r, d, float(d > 0 and self.speculation_term)])
        self._xx = self.decay * self._xx + np.outer(x, x)
        self._xt = self.decay * self._xt + x * t
        self._unfitted += 1
        if self._unfitted >= self.refit_every:
            self._fit = None
        return self

    def coefficients(self) -> tuple[float, float, float, float]:
        """``(a, b_R, b_D, c)`` of ``T(R, D) = a + b_R R + b_D D + c [D > 0]``; zeros before
        any observation."""
        if self.fixed is not None:
            return self.fixed
        if self._fit is None:
            if self._xx[0, 0] <= 0:  # nothing observed: nothing to keep until a refit
                return 0.0, 0.0, 0.0, 0.0
            self._fit, self._unfitted = self._solve(), 0
        return self._fit

    def _solve(self) -> tuple[float, float, float, float]:
        """The penalised least-squares fit of :meth:`coefficients` (at most once per
        ``refit_every`` observations)."""
        w = self._xx[0, 0]
        v = np.array([0.0, -1.0, 1.0, 0.0])  # b_D - b_R
        penalty = SAME * np.outer(v, v) + RIDGE * w * np.diag([0.0, 1.0, 1.0, 1.0])
        coef = np.linalg.solve(self._xx + penalty, self._xt)
        if coef[1:].min() < 0:  # refit with the negative one(s) at 0
            keep = [0] + [j for j in (1, 2, 3) if coef[j] >= 0]
            sub = np.ix_(keep, keep)
            coef = np.zeros(4)
            coef[keep] = np.linalg.solve(self._xx[sub] + penalty[sub], self._xt[keep])
        a, br, bd, c = (max(float(x), 0.0) for x in coef)
        return a, br, bd, c

    def __call__(self, rows, drafted) -> np.ndarray:
        """Predicted seconds of a step of ``rows`` rows and ``drafted`` drafted tokens."""
        a, br, bd, c = self.coefficients()
        d = np.asarray(drafted, dtype=np.float64)
        return a + br * np.asarray(rows, dtype=np.float64) + bd * d + c * (d > 0)

    def draft_seconds(self) -> float:
        """What one more drafted token adds to a step, priced conservatively:
        ``max(b_D, b_R)`` (module docstring, "Pricing a drafted token")."""
        _a, br, bd, _c = self.coefficients()
        return max(br, bd)

    def expert_costs(self, n_requests: int, max_k: int) -> np.ndarray:
        """``c(k) = a / B + b_R + b_D k + (c / B) [k > 0]`` for ``k = 0 .. K``: one
        request's share of a step of ``B = n_requests`` requests when it drafts ``k`` tokens
        (module docstring)."""
        if isinstance(n_requests, bool) or int(n_requests) != n_requests or n_requests < 1:
            raise ValueError(f"n_requests must be an integer >= 1, got {n_requests!r}")
        if isinstance(max_k, bool) or int(max_k) != max_k or max_k < 0:
            raise ValueError(f"max_k must be an integer >= 0, got {max_k!r}")
        a, br, bd, c = self.coefficients()
        k = np.arange(int(max_k) + 1, dtype=np.float64)
        return (a + c * (k > 0)) / int(n_requests) + br + bd * k
