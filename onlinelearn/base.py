"""The learner protocol shared by every algorithm in :mod:`onlinelearn`.

Every learner follows one small, uniform protocol (in the spirit of river and scikit-learn):

- hyper-parameters are set in ``__init__`` and never change afterwards;
- state lives in plain attributes holding *sufficient statistics* (cumulative losses, counts,
  ...); anything derived from them (the probability vector) is recomputed on demand, so nothing
  can go stale;
- ``weights`` is a fresh ``float64`` probability vector of shape ``(n,)``;
- ``sample(rng)`` draws an expert / arm index from ``weights``;
- ``update(...)`` validates its input *before* touching the state, so a bad call raises a
  ``ValueError`` naming the problem and leaves the learner exactly as it was, and returns ``self``;
- ``state_dict()`` returns JSON-serialisable data and ``load_state_dict(d)`` restores it exactly;
- ``reset()`` returns to the freshly-constructed state.

Full-information learners take the whole loss vector, ``update(losses)``; bandit learners take
only the loss of the arm that was played, ``update(arm, loss)``. That is the only difference.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Self

import numpy as np


def check_n(n: int) -> int:
    """Validate a number of experts / arms and return it as an ``int``."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise ValueError(f"n must be an integer number of experts, got {n!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1 (an empty expert pool has nothing to choose), got {n}")
    return int(n)


def check_losses(losses: Any, n: int) -> np.ndarray:
    """Validate a full-information loss vector: shape ``(n,)``, finite, each entry in [0, 1].

    Returns a fresh ``float64`` copy, so the caller can never alias the learner's state.

    Raises
    ------
    ValueError
        Naming the problem: not numeric, wrong shape, NaN / inf (with their indices) or values
        outside [0, 1] (with their indices).
    """
    try:
        arr = np.array(losses, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"losses must be real numbers, got {losses!r}: {exc}") from None
    if arr.shape != (n,):
        raise ValueError(f"losses must have shape ({n},), got {arr.shape}")
    # Fast path (one pass each): NaN fails both comparisons, inf fails one of them.
    if arr.min() >= 0.0 and arr.max() <= 1.0:
        return arr
    if not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr)).tolist()
        raise ValueError(f"losses must be finite, got NaN or inf at indices {bad}")
    bad = np.flatnonzero((arr < 0.0) | (arr > 1.0)).tolist()
    raise ValueError(f"losses must lie in [0, 1], got out-of-range values at indices {bad}")


def check_arm(arm: Any, n: int) -> int:
    """Validate an arm index in ``[0, n)`` and return it as an ``int``."""
    if isinstance(arm, bool) or not isinstance(arm, int | np.integer):
        raise ValueError(f"arm must be an integer index, got {arm!r}")
    if not 0 <= arm < n:
        raise ValueError(f"arm must be in [0, {n}), got {arm}")
    return int(arm)


def check_loss(loss: Any) -> float:
    """Validate a scalar bandit loss: finite and in [0, 1]."""
    try:
        value = float(loss)
    except (TypeError, ValueError):
        raise ValueError(f"loss must be a real number in [0, 1], got {loss!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"loss must be finite, got {value}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"loss must lie in [0, 1], got {value}")
    return value


def softmin_weights(scaled_losses: np.ndarray) -> np.ndarray:
    """Return ``p_i ∝ exp(-x_i)`` computed stably in log space (shift by ``min x``).

    Used by every exponential-weights learner: the stored state is the cumulative loss, never
    the multiplied weights, so nothing underflows to zero forever.
    """
    z = -(scaled_losses - np.min(scaled_losses))
    w = np.exp(z)
    return w / w.sum()


def check_count(value: Any, name: str) -> int:
    """Validate a non-negative integer (a round or pull count) and return it as an ``int``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def check_state(state: Any, learner: Learner, keys: tuple[str, ...]) -> dict[str, Any]:
    """Validate a :meth:`Learner.state_dict` snapshot before anything is restored from it.

    Checks that ``state`` is a mapping made by the same class for the same ``n`` and holding
    every key in ``keys``; raises ``ValueError`` naming the problem otherwise.
    """
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    kind = type(learner).__name__
    if state.get("class") != kind:
        raise ValueError(f"state was made by {state.get('class')!r}, not by {kind!r}")
    if state.get("n") != learner.n:
        raise ValueError(f"state is for n={state.get('n')!r}, this learner has n={learner.n}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    return state


def check_vector(values: Any, n: int, name: str, *, integer: bool = False) -> np.ndarray:
    """Convert a saved list to a fresh finite ``(n,)`` array (``int64`` or ``float64``)."""
    try:
        arr = np.array(values, dtype=np.float64, copy=True)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"state[{name!r}] must be a list of {n} numbers") from None
    if arr.shape != (n,):
        raise ValueError(f"state[{name!r}] must have shape ({n},), got {arr.shape}")
    if integer:
        if not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise ValueError(f"state[{name!r}] must hold integers")
        return arr.astype(np.int64)
    if not np.all(np.isfinite(arr) | (arr == np.inf)):
        raise ValueError(f"state[{name!r}] contains NaN or -inf")
    return arr


class Learner(ABC):
    """Base class of all learners. Subclasses define ``weights``, ``update`` and their state.

    Attributes
    ----------
    n : int
        Number of experts (full information) or arms (bandit).
    full_information : bool
        Class-level flag: ``True`` if ``update`` takes a loss vector, ``False`` if it takes
        ``(arm, loss)``.
    """

    full_information: ClassVar[bool] = True

    def __init__(self, n: int) -> None:
        self.n = check_n(n)

    @property
    @abstractmethod
    def weights(self) -> np.ndarray:
        """The current probability vector over the ``n`` experts (a fresh array)."""

    @abstractmethod
    def update(self, *args: Any) -> Self:
        """Observe feedback for one round and return ``self``."""

    @abstractmethod
    def reset(self) -> Self:
        """Return to the freshly-constructed state and return ``self``."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable snapshot of the learner's state and hyper-parameters."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> Self:
        """Restore a snapshot made by :meth:`state_dict`; returns ``self``."""

    def sample(self, rng: np.random.Generator) -> int:
        """Draw an index from :attr:`weights` using the caller's generator."""
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return int(rng.choice(self.n, p=self.weights))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n})"
