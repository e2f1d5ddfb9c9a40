"""The engine's step time as a function of the tokens it scheduled, measured online.

In vLLM one engine step runs every scheduled request at once, so what a draft of ``k`` tokens
costs a request is the step time with ``k + 1`` more tokens scheduled, not a per-request
forward. The proposer sees one step per ``propose`` call: the time between two calls is one
step (schedule, forward, rejection sampling, proposing), and it knows how many tokens that
step scheduled (every row's previous draft plus its bonus token). Steps that prefill a prompt
(a new request, or a chunk of one) are left out of the fit: a prompt's tokens cost far less each
than decode rows, and counting them flattened the fitted slope (measured at 16 concurrent
requests: 1.5 ms per token with them, 1.9 without).

:class:`StepTimeModel` fits ``T(n) = a + b n`` by exponentially weighted least squares over
those ``(n, seconds)`` pairs; ``b >= 0`` and ``a >= 0`` are enforced. With one token count seen
so far the slope is unknown and taken as 0 (only the intercept is then identified).

Batch-aware expert costs (:meth:`StepTimeModel.expert_costs`). A step of ``B`` requests, request
``r`` verifying ``k_r + 1`` tokens, takes ``T = a + b sum_r (k_r + 1)`` and yields
``sum_r AL_r`` tokens. Charging request ``r``

.. math:: c_r(k) = a / B + b (k + 1)

splits the step exactly (``sum_r c_r(k_r) = T``), so the batch's time per token
``sum_r c_r / sum_r AL_r`` is minimised, Dinkelbach-linearised at the batch's time per token
``tau``, by each request minimising its own ``c_r(k) - tau AL_r(k)``: a draft costs the time its
``k`` tokens add to the *whole* step (``b k``), not the step's latency to the request. With
``B = 1`` this is the step latency ``T(k + 1)``; at large ``B`` the shared ``a`` vanishes and a
drafted token pays only when its acceptance probability exceeds ``b / tau`` -- on a CPU, where
``b`` dominates, speculation then switches itself off.
"""

from __future__ import annotations

import numpy as np

__all__ = ["StepTimeModel"]


class StepTimeModel:
    """Exponentially weighted linear fit of step seconds against tokens scheduled.

    Parameters
    ----------
    decay : float, default 0.98
        Weight kept by the past at each new observation (effective memory ``1 / (1 - decay)``
        steps), so the fit follows load changes.
    """

    def __init__(self, decay: float = 0.98) -> None:
        if not 0.0 < float(decay) < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self._s = np.zeros(5)  # weighted sums of 1, n, t, n^2, n t

    @property
    def observed(self) -> bool:
        return bool(self._s[0] > 0)

    def observe(self, n_tokens: int, seconds: float) -> StepTimeModel:
        """One step that scheduled ``n_tokens >= 1`` tokens took ``seconds``."""
        n, t = float(n_tokens), float(seconds)
        if not n >= 1 or not np.isfinite(t) or t < 0:
            raise ValueError(f"need n_tokens >= 1 and finite seconds >= 0, got {n_tokens!r}, "
                             f"{seconds!r}")
        self._s = self.decay * self._s + np.array([1.0, n, t, n * n, n * t])
        return self

    def coefficients(self) -> tuple[float, float]:
        """``(a, b)`` of ``T(n) = a + b n``; ``(0, 0)`` before any observation."""
        w, sn, st, snn, snt = self._s
        if w <= 0:
            return 0.0, 0.0
        mn, mt = sn / w, st / w
        var = snn / w - mn * mn
        b = max((snt / w - mn * mt) / var, 0.0) if var > 1e-9 * max(mn * mn, 1.0) else 0.0
        a = max(mt - b * mn, 0.0)
        return a, b

    def __call__(self, n_tokens) -> np.ndarray:
        """Predicted seconds of a step scheduling ``n_tokens`` (array-like)."""
        a, b = self.coefficients()
        return a + b * np.asarray(n_tokens, dtype=np.float64)

    def expert_costs(self, n_requests: int, max_k: int) -> np.ndarray:
        """``c(k) = a / B + b (k + 1)`` for ``k = 0 .. K``: one request's share of a step of
        ``B = n_requests`` requests when it drafts ``k`` tokens (module docstring)."""
        if isinstance(n_requests, bool) or int(n_requests) != n_requests or n_requests < 1:
            raise ValueError(f"n_requests must be an integer >= 1, got {n_requests!r}")
        if isinstance(max_k, bool) or int(max_k) != max_k or max_k < 0:
            raise ValueError(f"max_k must be an integer >= 0, got {max_k!r}")
        a, b = self.coefficients()
        return a / int(n_requests) + b * np.arange(1, int(max_k) + 2, dtype=np.float64)
