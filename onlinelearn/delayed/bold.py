"""BOLD (Joulani et al., ICML 2013): a pool of base-learner copies for adversarial losses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onlinelearn.base import Learner, check_int

from .base import DelayedLearner, check_learner

__all__ = ["BOLD"]


class BOLD(DelayedLearner):
    r"""Black-box Online Learning under Delayed feedback (BOLD; Joulani et al., ICML 2013).

    A pool of copies of the base learner, made by ``factory()``. Each round is played by the
    lowest-index copy that is not waiting for feedback (a new copy is created when all are
    busy); the round's feedback is routed to that copy only; censoring a round frees its copy
    without an update. Each copy therefore sees an ordinary, undelayed sequence: it never acts
    between its prediction and that prediction's feedback. Deterministic copy choice makes runs
    reproducible.

    Pool size: a copy is created only when all ``k`` existing copies are busy, i.e. when ``k``
    rounds are outstanding, so ``len(pool) = max_t |outstanding after play t|
    <= 1 + G*`` with :math:`G^*` the largest number of outstanding rounds at a play.

    Bound. Let :math:`T_j` be the number of fed rounds of copy :math:`j` (rounds still
    outstanding at the end count too: they are the copy's last predictions) and :math:`C` the
    number of censored rounds. Splitting the comparator over the copies
    (:math:`\min_i \sum_j L_{j,i} \ge \sum_j \min_i L_{j,i}`),

    .. math::

        R_T \le \sum_{j=1}^{|\text{pool}|} R_{\text{base}}(T_j) + C
            \le (1 + G^*)\, R_{\text{base}}\!\left(\frac{T}{1 + G^*}\right) + C,

    the second step by Jensen for a concave, non-decreasing :math:`R_{\text{base}}` with
    :math:`R_{\text{base}}(0) \ge 0` (:math:`m R(T/m)` grows with :math:`m`). This is Joulani
    et al.'s bound (REFERENCES.md form confirmed), plus the censoring term. Hedge copies with a
    fixed :math:`\eta`: :math:`|\text{pool}| \ln N / \eta + \eta T / 8 + C`; a constant delay
    :math:`G` gives :math:`G + 1` round-robin copies (Weinberger & Ordentlich 2002). Copies tuned
    for a horizon must be tuned for :math:`T / (1 + G)`, not :math:`T`, to get
    :math:`\sqrt{(1 + G) T \ln N / 2}`.

    Parameters
    ----------
    factory : callable () -> Learner
        Makes a fresh base learner; every call must return a new object with the same ``n`` and
        ``full_information``. Called once here, once per new copy, on :meth:`reset` and
        :meth:`load_state_dict`, and by :attr:`weights` when every copy is busy.

    Attributes
    ----------
    pool : tuple of Learner
        The copies, in creation order (read-only view).
    owners : dict
        ``{round_id: copy index}`` for the outstanding rounds (fresh dict).
    """

    def __init__(self, factory: Callable[[], Learner]) -> None:
        if not callable(factory):
            raise ValueError(f"factory must be callable, got {type(factory).__name__}")
        self._factory = factory
        first = check_learner(factory(), "factory()")
        self.n = first.n
        self.full_information = bool(type(first).full_information)
        self._pool: list[Learner] = [first]
        self._owner: dict[int, int] = {}
        self._init_rounds()

    def _new_copy(self, existing: list[Learner]) -> Learner:
        copy = check_learner(self._factory(), "factory()")
        if copy.n != self.n or bool(type(copy).full_information) != self.full_information:
            raise ValueError(
                f"factory() returned a learner with n={copy.n}, full_information="
                f"{type(copy).full_information}; the pool has n={self.n}, "
                f"full_information={self.full_information}"
            )
        if any(copy is c for c in existing):
            raise ValueError("factory() returned an existing copy; it must build a new learner")
        return copy

    @property
    def pool(self) -> tuple[Learner, ...]:
        return tuple(self._pool)

    @property
    def owners(self) -> dict[int, int]:
        return dict(self._owner)

    def _free_copy(self) -> int | None:
        busy = set(self._owner.values())
        return next((j for j in range(len(self._pool)) if j not in busy), None)

    @property
    def weights(self) -> np.ndarray:
        """Weights of the copy that would play next (a fresh copy's if all are busy)."""
        j = self._free_copy()
        return self._pool[j].weights if j is not None else self._new_copy(self._pool).weights

    def _play(self, rid: int, rng: np.random.Generator) -> int:
        j = self._free_copy()
        if j is None:
            copy = self._new_copy(self._pool)
            arm = int(copy.sample(rng))
            self._pool.append(copy)
            j = len(self._pool) - 1
        else:
            arm = int(self._pool[j].sample(rng))
        self._owner[rid] = j
        return arm

    def _feed(self, rid: int, arm: int, value: Any) -> None:
        self._update_learner(self._pool[self._owner[rid]], arm, value)
        del self._owner[rid]

    def _censor(self, rid: int, arm: int) -> None:
        del self._owner[rid]

    def _policy_state(self) -> dict[str, Any]:
        return {
            "pool": [c.state_dict() for c in self._pool],
            "owners": [[rid, j] for rid, j in self._owner.items()],
        }

    def _prepare_policy_state(self, state, next_round, outstanding, censored):
        pool: list[Learner] = []
        for s in state["pool"]:
            pool.append(self._new_copy(pool).load_state_dict(s))
        if not pool:
            raise ValueError("pool must hold at least one copy")
        owner: dict[int, int] = {}
        for rid, j in state["owners"]:
            owner[check_int(rid, "round id")] = check_int(j, "copy index", 0, len(pool))
        if owner.keys() != outstanding.keys():
            raise ValueError("owners must list exactly the outstanding rounds")
        if len(set(owner.values())) != len(owner):
            raise ValueError("a copy owns two outstanding rounds")

        def commit() -> None:
            self._pool, self._owner = pool, owner

        return commit

    def _reset_policy(self) -> None:
        self._pool = [self._new_copy([])]
        self._owner = {}
