"""The delayed-feedback contract: :class:`DelayedLearner` owns round ids and input checks.

:class:`SingleLearnerReduction` is the common part of the reductions that wrap one base learner
(:class:`~onlinelearn.delayed.OnArrival`, :class:`~onlinelearn.delayed.QPMD`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Self

import numpy as np

from onlinelearn.base import (
    Learner,
    check_int,
    check_loss,
    check_losses,
    check_rng,
    check_snapshot,
)

__all__ = ["DelayedLearner", "SingleLearnerReduction", "check_learner"]


def check_learner(obj: Any, what: str) -> Learner:
    """Return ``obj`` if it is an :class:`onlinelearn.base.Learner`, else raise ``ValueError``."""
    if not isinstance(obj, Learner):
        raise ValueError(f"{what} must be an onlinelearn.base.Learner, got {type(obj).__name__}")
    return obj


class DelayedLearner(ABC):
    """Round-id bookkeeping shared by every delayed-feedback reduction.

    Subclasses implement the policy (:meth:`_play`, :meth:`_feed`, :meth:`_censor`,
    :attr:`weights`) and their own part of the state; this class owns the round ids, the
    outstanding and censored sets and all input validation, so every reduction rejects bad input
    in the same way and before any state changes.

    Invariant (checked by the stateful tests): the rounds ``0 .. rounds_played - 1`` are
    partitioned into fed, censored and :attr:`outstanding` rounds.

    Attributes
    ----------
    n : int
        Number of experts / arms of the base learner.
    full_information : bool
        ``True`` if :meth:`feed` takes a loss vector ``(n,)``, ``False`` if a scalar loss.
    """

    n: int
    full_information: bool

    def _init_rounds(self) -> None:
        self._next_round = 0
        self._outstanding: dict[int, int] = {}
        self._censored: set[int] = set()

    # ---------------------------------------------------------------- public API
    @property
    @abstractmethod
    def weights(self) -> np.ndarray:
        """The distribution the next :meth:`play` would use (a fresh ``float64`` ``(n,)``)."""

    @property
    def outstanding(self) -> dict[int, int]:
        """Rounds played but neither fed nor censored: a fresh ``{round_id: arm}`` dict."""
        return dict(self._outstanding)

    @property
    def censored(self) -> frozenset[int]:
        """Ids of the censored rounds (their feedback will never come)."""
        return frozenset(self._censored)

    @property
    def rounds_played(self) -> int:
        """Number of rounds played so far; round ids are ``0 .. rounds_played - 1``."""
        return self._next_round

    def play(self, rng: np.random.Generator) -> tuple[int, int]:
        """Open a new round: choose an arm with ``rng``; its feedback becomes outstanding.

        Parameters
        ----------
        rng : numpy.random.Generator
            All randomness comes from this generator (the same calls, in the same order, as the
            base learner's ``sample(rng)`` when there is no delay).

        Returns
        -------
        (round_id, arm) : tuple of int
            ``round_id`` is the number of rounds played before this one.
        """
        check_rng(rng)
        rid = self._next_round
        arm = self._play(rid, rng)
        self._outstanding[rid] = arm
        self._next_round = rid + 1
        return rid, arm

    def feed(self, round_id: int, feedback: Any) -> Self:
        """Deliver the feedback of an outstanding round.

        Parameters
        ----------
        round_id : int
            A round returned by :meth:`play`, neither fed nor censored yet.
        feedback : array-like (n,) or float
            Full information: the loss vector of that round, finite, in [0, 1]. Bandit: the
            scalar loss, in [0, 1], of the arm played in that round.

        Raises
        ------
        ValueError
            Unknown, already fed or censored round, or invalid feedback; nothing changes.
        """
        rid = self._check_open(round_id, "feed")
        if self.full_information:
            value: Any = check_losses(feedback, self.n)
        else:
            value = check_loss(feedback)
        arm = self._outstanding[rid]
        self._feed(rid, arm, value)
        del self._outstanding[rid]
        return self

    def censor(self, round_id: int) -> Self:
        """Declare that the feedback of an outstanding round will never come.

        The round leaves :attr:`outstanding` and joins :attr:`censored`; no learner is updated
        with it (see each reduction for what else happens).

        Raises
        ------
        ValueError
            Unknown, already fed or already censored round; nothing changes.
        """
        rid = self._check_open(round_id, "censor")
        arm = self._outstanding[rid]
        self._censor(rid, arm)
        del self._outstanding[rid]
        self._censored.add(rid)
        return self

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable snapshot (plain ints, floats, lists, dicts with ``str`` keys)."""
        return {
            "class": type(self).__name__,
            "n": self.n,
            "full_information": self.full_information,
            "next_round": self._next_round,
            "outstanding": [[rid, arm] for rid, arm in self._outstanding.items()],
            "censored": sorted(self._censored),
            **self._policy_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        """Restore a snapshot made by :meth:`state_dict` (possibly after a JSON round trip).

        Everything is validated before anything is assigned; a malformed snapshot raises
        ``ValueError`` and leaves this object unchanged.
        """
        try:
            commit = self._prepare_state(state)
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed {type(self).__name__} state: {err!r}") from None
        commit()
        return self

    def _prepare_state(self, state: dict[str, Any]) -> Callable[[], None]:
        check_snapshot(state, self, ("full_information", "next_round", "outstanding", "censored"))
        if state["full_information"] != self.full_information:
            raise ValueError(f"state is for full_information={state['full_information']!r}, "
                             f"this learner has full_information={self.full_information}")
        next_round = check_int(state["next_round"], "next_round", low=0)
        outstanding: dict[int, int] = {}
        for rid, arm in state["outstanding"]:
            rid = check_int(rid, "round id", 0, next_round)
            arm = check_int(arm, f"arm of round {rid}", 0, self.n)
            if rid in outstanding:
                raise ValueError(f"round {rid} is listed twice as outstanding")
            outstanding[rid] = arm
        censored = {check_int(r, "round id", 0, next_round) for r in state["censored"]}
        if len(censored) != len(state["censored"]):
            raise ValueError("a censored round is listed twice")
        both = censored & outstanding.keys()
        if both:
            raise ValueError(f"rounds {sorted(both)} are both outstanding and censored")
        commit_policy = self._prepare_policy_state(state, next_round, outstanding, censored)

        def commit() -> None:
            commit_policy()
            self._next_round, self._outstanding = next_round, outstanding
            self._censored = censored

        return commit

    def reset(self) -> Self:
        """Forget everything: back to the freshly-constructed state (round ids restart at 0)."""
        self._reset_policy()
        self._init_rounds()
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n={self.n}, played={self._next_round}, "
            f"outstanding={len(self._outstanding)}, censored={len(self._censored)})"
        )

    # ---------------------------------------------------------------- helpers
    def _check_open(self, round_id: Any, verb: str) -> int:
        rid = check_int(round_id, "round_id")
        if rid in self._outstanding:
            return rid
        if not 0 <= rid < self._next_round:
            played = f"0..{self._next_round - 1}" if self._next_round else "none"
            raise ValueError(f"cannot {verb} round {rid}: unknown round (rounds played: {played})")
        if rid in self._censored:
            raise ValueError(f"cannot {verb} round {rid}: it was censored")
        raise ValueError(f"cannot {verb} round {rid}: it was already fed")

    def _check_feedback_value(self, value: Any, where: str) -> Any:
        """Validate stored feedback from a snapshot: list (n,) or float, in [0, 1]."""
        try:
            return check_losses(value, self.n) if self.full_information else check_loss(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    def _update_learner(self, learner: Learner, arm: int, value: Any) -> None:
        if self.full_information:
            learner.update(value)
        else:
            learner.update(arm, value)

    @staticmethod
    def _feedback_json(value: Any) -> Any:
        return value.tolist() if isinstance(value, np.ndarray) else float(value)

    # ---------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _play(self, rid: int, rng: np.random.Generator) -> int:
        """Choose the arm of round ``rid``; may record which learner made the choice."""

    @abstractmethod
    def _feed(self, rid: int, arm: int, value: Any) -> None:
        """Use validated feedback ``value`` of round ``rid`` (played with ``arm``)."""

    @abstractmethod
    def _censor(self, rid: int, arm: int) -> None:
        """Round ``rid`` will never get feedback."""

    @abstractmethod
    def _policy_state(self) -> dict[str, Any]:
        """The reduction's own state as JSON data."""

    @abstractmethod
    def _prepare_policy_state(
        self,
        state: dict[str, Any],
        next_round: int,
        outstanding: dict[int, int],
        censored: set[int],
    ) -> Callable[[], None]:
        """Validate the reduction's part of ``state``; return a function that assigns it."""

    @abstractmethod
    def _reset_policy(self) -> None:
        """Reset the reduction's own state."""


class SingleLearnerReduction(DelayedLearner):
    """A reduction wrapping one base learner (OnArrival, QPMD)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = check_learner(learner, "learner")
        self.n = learner.n
        self.full_information = bool(type(learner).full_information)
        self._init_rounds()

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", learner={self.learner!r})"

    def _censor(self, rid: int, arm: int) -> None:
        pass  # the base learner never hears of a censored round

    def _policy_state(self) -> dict[str, Any]:
        return {"learner": self.learner.state_dict()}

    def _prepare_policy_state(self, state, next_round, outstanding, censored):
        learner_state = state["learner"]
        return lambda: self.learner.load_state_dict(learner_state)

    def _reset_policy(self) -> None:
        self.learner.reset()
