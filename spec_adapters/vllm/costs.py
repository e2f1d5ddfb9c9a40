"""The engine's step time as a function of the tokens it scheduled, measured online.

In vLLM one engine step runs every scheduled request at once, so what a draft of ``k`` tokens
costs a request is the step time with ``k + 1`` more tokens scheduled, not a per-request
forward. The proposer sees one step per ``propose`` call: the time between two calls is one
step (schedule, forward, rejection sampling, proposing), and it knows how many tokens that
step scheduled (every row's previous draft plus its bonus token; a new row's prompt).

:class:`StepTimeModel` fits ``T(n) = a + b n`` by exponentially weighted least squares over
those ``(n, seconds)`` pairs; ``b >= 0`` and ``a >= 0`` are enforced. With one token count seen
so far the slope is unknown and taken as 0 (only the intercept is then identified).
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
