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

A learner declares its hyper-parameters and its statistics once, as class-level
``{name: kind}`` tables (:class:`Int`, :class:`Real`, :class:`Vector`, :class:`OrNone`);
:class:`Learner` derives ``__init__``'s checks, ``reset``, ``state_dict`` and
``load_state_dict`` from them, so a subclass holds only its math.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, Self, TypeVar

import numpy as np


def check_int(value: Any, label: str, low: int | None = None, high: int | None = None) -> int:
    """Validate an integer (``bool`` excluded) in ``[low, high)`` and return it as an ``int``.

    Either bound may be ``None`` (unbounded); the ``ValueError`` message starts with ``label``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{label} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value >= high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high})"
        raise ValueError(f"{label} must be {bounds}, got {value}")
    return int(value)


def check_n(n: int) -> int:
    """Validate a number of experts / arms (an empty pool has nothing to choose from)."""
    return check_int(n, "n", low=1)


def check_arm(arm: Any, n: int) -> int:
    """Validate an arm index in ``[0, n)`` and return it as an ``int``."""
    return check_int(arm, "arm", 0, n)


def check_rng(rng: Any) -> np.random.Generator:
    """Require a ``numpy.random.Generator``: every draw comes from the caller's generator."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def check_losses(losses: Any, n: int) -> np.ndarray:
    """Validate a full-information loss vector: shape ``(n,)``, finite, each entry in [0, 1].

    Returns a fresh ``float64`` copy, so the caller can never alias the learner's state.

    Raises
    ------
    ValueError
        Naming the problem: not numeric (strings, booleans and object arrays are refused,
        not converted), wrong shape, NaN / inf (with their indices) or values outside [0, 1]
        (with their indices).
    """
    try:
        src = np.asarray(losses)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"losses must be real numbers, got {losses!r}: {exc}") from None
    if src.dtype.kind not in "iuf" or (isinstance(losses, list | tuple) and any(
            isinstance(x, bool | np.bool_) for x in losses)):
        kind = "booleans" if src.dtype.kind in "bf" else f"dtype {src.dtype}"
        raise ValueError(f"losses must be real numbers, got {kind}: {losses!r}")
    arr = np.array(src, dtype=np.float64, copy=True)
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


def check_loss(loss: Any) -> float:
    """Validate a scalar bandit loss: a real number (not a bool or a string), finite, in
    [0, 1]."""
    if isinstance(loss, bool | np.bool_ | str | bytes):
        raise ValueError(f"loss must be a real number in [0, 1], got {loss!r}")
    try:
        value = float(loss)
    except (TypeError, ValueError):
        raise ValueError(f"loss must be a real number in [0, 1], got {loss!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"loss must be finite, got {value}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"loss must lie in [0, 1], got {value}")
    return value


# Relative slack of a float running sum of t terms, each at most b, over t b: about t eps / 2,
# so below 1e-8 for t < 10^8 rounds.
_SUM_ROUNDING = 1e-8


def check_at_most(value: Any, bound: Any, label: str, rule: str) -> None:
    """Require ``value <= bound`` (entrywise), up to the rounding of running sums.

    For the constraints between statistics that every sequence of updates keeps (``rule``
    states which and why); a snapshot that breaks one describes no history of the learner.

    Raises
    ------
    ValueError
        Starting with ``label``, stating ``rule`` and, for arrays, the offending indices.
    """
    over = np.asarray(value) > np.asarray(bound) * (1.0 + _SUM_ROUNDING)
    if over.any():
        bad = np.flatnonzero(over)
        where = f" at {bad.size} indices, first {bad[:8].tolist()}" if over.ndim else ""
        raise ValueError(f"{label} breaks {rule}{where}")


def softmin_weights(losses: np.ndarray, eta: float = 1.0) -> np.ndarray:
    r"""Return :math:`p_i \propto \exp(-\eta L_i)`, computed as ``exp(-eta (L - min L))``.

    Used by the exponential-weights learners: the stored state is the cumulative loss, never
    the multiplied weights, so nothing underflows to zero forever. Entries ``+inf`` get weight
    0 (at least one entry must be finite).
    """
    w = np.exp(-eta * (losses - losses.min()))
    return w / w.sum()


def inverse_cdf(weights: np.ndarray, u: float) -> int:
    """The index whose interval of the cumulative ``weights`` (not necessarily normalised)
    holds ``u`` times their total, ``u`` uniform in [0, 1): a draw with probability
    proportional to ``weights``, the index ``rng.choice(n, p=weights)`` picks for the same
    uniform. Where ``u`` times the total rounds up to the total, the last index with weight."""
    cdf = np.cumsum(weights)
    j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return j if j < len(cdf) else int(np.flatnonzero(np.asarray(weights) > 0)[-1])


def check_snapshot(state: Any, owner: Any, keys: Iterable[str]) -> None:
    """Check the frame of a ``state_dict()`` snapshot before anything is restored from it.

    ``state`` must be a dict made by ``type(owner)`` for the same ``owner.n`` and hold every
    key in ``keys``; raises ``ValueError`` naming the problem otherwise.
    """
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    kind = type(owner).__name__
    if state.get("class") != kind:
        raise ValueError(f"state was made by {state.get('class')!r}, not by {kind!r}")
    if state.get("n") != owner.n:
        raise ValueError(f"state is for n={state.get('n')!r}, this learner has n={owner.n}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")


# ---------------------------------------------------------------- kinds of state fields


class Kind(Protocol):
    """How a field is validated; a statistic's kind also has ``fresh(n)``, its initial value."""

    def check(self, value: Any, label: str, n: int) -> Any:
        """Return ``value`` validated and converted; ``ValueError`` starting with ``label``."""


@dataclass(frozen=True)
class Int:
    """An integer ``>= low``: a count of rounds or plays (fresh value 0), or a horizon."""

    low: int = 0

    def fresh(self, n: int) -> int:
        return 0

    def check(self, value: Any, label: str, n: int) -> int:
        return check_int(value, label, low=self.low)


@dataclass(frozen=True)
class Real:
    """A finite real number, ``> 0`` if ``positive`` else ``>= 0`` (fresh value 0.0)."""

    positive: bool = False

    def fresh(self, n: int) -> float:
        return 0.0

    def check(self, value: Any, label: str, n: int) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise ValueError(f"{label} must be a real number, got {value!r}")
        value = float(value)
        if not (math.isfinite(value) and (value > 0.0 if self.positive else value >= 0.0)):
            raise ValueError(f"{label} must be finite and {'>' if self.positive else '>='} 0, "
                             f"got {value}")
        return value


@dataclass(frozen=True)
class OrNone:
    """A hyper-parameter that is ``None`` (not set) or of ``kind``."""

    kind: Kind

    def check(self, value: Any, label: str, n: int) -> Any:
        return None if value is None else self.kind.check(value, label, n)


@dataclass(frozen=True)
class Vector:
    """One number per expert, a fresh ``(n,)`` array (fresh value: zeros).

    ``nonneg``: entries ``>= 0``; ``allow_inf``: ``+inf`` entries (an expert ruled out) are
    allowed, as long as one entry is finite; ``integer``: ``int64`` entries, else ``float64``.
    Saved as a list (``tolist``).
    """

    nonneg: bool = False
    allow_inf: bool = False
    integer: bool = False

    def fresh(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.int64 if self.integer else np.float64)

    def check(self, value: Any, label: str, n: int) -> np.ndarray:
        try:
            arr = np.array(value, dtype=np.float64, copy=True)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{label} must be a list of {n} numbers") from None
        if arr.shape != (n,):
            raise ValueError(f"{label} must have shape ({n},), got {arr.shape}")
        finite = np.isfinite(arr)
        if not finite.all() and not (self.allow_inf and finite.any()
                                     and np.all(finite | (arr == np.inf))):
            allowed = " or +inf, with a finite entry" if self.allow_inf else ""
            raise ValueError(f"{label} must be finite{allowed}")
        if self.nonneg and np.any(arr < 0.0):
            raise ValueError(f"{label} must be >= 0")
        if self.integer:
            if not np.all(arr == np.round(arr)):
                raise ValueError(f"{label} must hold integers")
            return arr.astype(np.int64)
        return arr


K = TypeVar("K", bound=Kind)


def fields(**kinds: K) -> Mapping[str, K]:
    """A read-only, ordered ``{name: kind}`` table (``hyper_fields``, ``state_fields``)."""
    return MappingProxyType(kinds)


class Learner(ABC):
    """Base class of all learners. Subclasses define ``weights``, ``update`` and their fields.

    Attributes
    ----------
    n : int
        Number of experts (full information) or arms (bandit).
    full_information : bool
        Class-level flag: ``True`` if ``update`` takes a loss vector, ``False`` if it takes
        ``(arm, loss)``.
    hyper_fields : mapping of str to kind
        Class-level: the hyper-parameters, passed to ``__init__`` by name, saved, never reset.
    state_fields : mapping of str to kind
        Class-level: the sufficient statistics, plain attributes set to ``kind.fresh(n)`` by
        :meth:`reset`.
    """

    full_information: ClassVar[bool] = True
    hyper_fields: ClassVar[Mapping[str, Kind]] = fields()
    state_fields: ClassVar[Mapping[str, Int | Real | Vector]] = fields()

    def __init__(self, n: int, **hyper: Any) -> None:
        self.n = check_n(n)
        values = {name: kind.check(hyper[name], name, self.n)
                  for name, kind in self.hyper_fields.items()}
        self._assign(self._check_state(values | self._fresh()))

    @property
    @abstractmethod
    def weights(self) -> np.ndarray:
        """The current probability vector over the ``n`` experts (a fresh array)."""

    @abstractmethod
    def update(self, *args: Any) -> Self:
        """Observe feedback for one round and return ``self``."""

    def sample(self, rng: np.random.Generator) -> int:
        """Draw an index from :attr:`weights` using the caller's generator: the inverse CDF of
        one uniform, as ``rng.choice(n, p=weights)`` draws (the same index for the same
        generator state) without its checks of ``p``, which the learner's own weights pass."""
        return inverse_cdf(self.weights, check_rng(rng).random())

    def reset(self) -> Self:
        """Return to the freshly-constructed state (hyper-parameters kept) and return ``self``."""
        return self._assign(self._fresh())

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable snapshot: class, ``n``, hyper-parameters and statistics."""
        fields = self.hyper_fields | self.state_fields
        saved = {name: getattr(self, name) for name in fields}
        return {"class": type(self).__name__, "n": self.n,
                **{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in saved.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        """Restore a snapshot made by :meth:`state_dict`; returns ``self``.

        Raises
        ------
        ValueError
            Naming the bad field; every field is checked before any is assigned, so the learner
            is unchanged on error.
        """
        fields = self.hyper_fields | self.state_fields
        check_snapshot(state, self, fields)
        values = {name: kind.check(state[name], f"state[{name!r}]", self.n)
                  for name, kind in fields.items()}
        return self._assign(self._check_state(values))

    def _check_state(self, values: dict[str, Any]) -> dict[str, Any]:
        """Constraints between fields, on checked values (all of them); override to add some."""
        return values

    def _fresh(self) -> dict[str, Any]:
        return {name: kind.fresh(self.n) for name, kind in self.state_fields.items()}

    def _assign(self, values: dict[str, Any]) -> Self:
        for name, value in values.items():
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        hyper = {name: getattr(self, name) for name in self.hyper_fields}
        args = "".join(f", {k}={v}" for k, v in hyper.items() if v is not None)
        return f"{type(self).__name__}(n={self.n}{args})"
