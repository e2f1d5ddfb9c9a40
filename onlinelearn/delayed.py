r"""Delayed and censored feedback: round-id bookkeeping and three reductions.

HedgeSpec's situation
---------------------
In HedgeSpec a *round* starts at a verified token position :math:`s`: the learner picks a drafter,
the drafter proposes :math:`K` tokens, the target verifies them. The loss of that round, for
*every* drafter, is a function of the acceptance probabilities along the verified tokens
:math:`s+1, \dots, s+K`, and those positions may only be verified by later rounds: the loss of
the round starting at token :math:`t` is known only after up to :math:`2K` further verified
tokens. Meanwhile new rounds must be played, so the learner always acts with some losses
missing. At the end of a sequence (EOS or ``max_new_tokens``) the rounds still open can never be
completed: they are **censored**, explicitly, never silently dropped.

So feedback is keyed by the round that produced it (as in poold and Joulani et al.)::

    policy = OnArrival(NormalHedge(n))          # or BOLD(lambda: NormalHedge(n)), QPMD(...)
    rid, arm = policy.play(rng)                 # round rid uses drafter `arm`
    ...                                         # more rounds are played meanwhile
    policy.feed(rid, losses)                    # its losses, once verified
    policy.censor(other_rid)                    # a round still open at end of sequence

Every reduction is a :class:`DelayedLearner`; the contract (docs/architecture.md) is

- ``play(rng) -> (round_id, arm)`` opens a new round (ids are 0, 1, 2, ...);
- ``feed(round_id, feedback)``: full information: the loss vector ``(n,)`` of that round;
  bandit: the scalar loss of the arm played in that round;
- ``censor(round_id)``: that round's feedback will never come;
- ``outstanding`` (round id -> arm, a fresh dict) is always ``played - fed - censored``;
- a round is fed or censored at most once; feeding or censoring an unknown, already fed or
  censored round, or feeding invalid feedback (wrong shape, NaN/inf, outside [0, 1]) raises
  ``ValueError`` naming the problem *before* any state changes;
- ``weights``, ``n``, ``full_information``, ``state_dict()`` (JSON data, no pickle),
  ``load_state_dict(d)``, ``reset()``.

The reductions
--------------
:class:`OnArrival`
    One learner; each loss is applied when it arrives. Simplest; for Hedge with a fixed
    :math:`\eta` the price of delay is additive in the total number of missing losses.
:class:`BOLD`
    Joulani, Gyorgy & Szepesvari (ICML 2013), black-box reduction for adversarial losses: a pool
    of copies of the base learner, each round played by a copy that is not waiting for feedback.
:class:`QPMD`
    Joulani et al.'s reduction for stochastic losses (QPM-D): the base learner runs in simulated
    time, fed from per-action FIFO queues of arrived, unused feedback.

With zero delay (each round fed right after it is played) all three reproduce the base learner
bit for bit: the same ``weights`` sequence and, with the same generator, the same arms.

References
----------
P. Joulani, A. Gyorgy, Cs. Szepesvari. "Online Learning under Delayed Feedback". ICML 2013.
M. J. Weinberger, E. Ordentlich. "On delayed prediction of individual sequences". IEEE Trans.
Inf. Theory 48(7), 2002 (constant delay ``d``: ``d + 1`` interleaved copies).
N. Cesa-Bianchi, G. Lugosi. *Prediction, Learning, and Games* (PLG), 2006, Thm 2.2.
docs/delayed.md: the bounds, their derivations and how they are tested.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
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

__all__ = ["BOLD", "QPMD", "DelayedLearner", "OnArrival"]


def _check_learner(obj: Any, what: str) -> Learner:
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


class _SingleLearner(DelayedLearner):
    """A reduction wrapping one base learner (OnArrival, QPMD)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = _check_learner(learner, "learner")
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


class OnArrival(_SingleLearner):
    r"""Apply each loss to a single learner as soon as it arrives.

    Round :math:`t` is played from :math:`p_t`, the base learner's distribution given the losses
    that have arrived before round :math:`t`, in arrival order. Censored rounds are never
    applied.

    Bound (Hedge with fixed :math:`\eta`; derived in docs/delayed.md). Let :math:`d_t` be the
    number of rounds :math:`s < t` whose loss is still missing when :math:`p_t` is formed
    (outstanding or censored), :math:`D = \sum_t d_t`. Then for every loss sequence in
    :math:`[0,1]^{T \times N}`

    .. math::

        R_T \le \frac{\ln N}{\eta} + \frac{\eta T}{8} + \sum_t \tanh\frac{\eta d_t}{4}
            \le \frac{\ln N}{\eta} + \frac{\eta T}{8} + \tanh\frac{\eta}{4} D,

    which implies the form :math:`\ln N/\eta + \eta T/8 + (e^\eta - 1) D / 2` of
    REFERENCES.md (about twice looser). Proof: compare :math:`p_t` with the undelayed Hedge
    :math:`q_t` (PLG Thm 2.2 for :math:`\sum_t \langle q_t, l_t\rangle`); :math:`q_t` is
    :math:`p_t` tilted by :math:`e^{-\eta x}` with :math:`x \in [0, d_t]^N`, so
    :math:`\langle p_t - q_t, l_t\rangle \le \mathrm{TV}(p_t, q_t) \le \tanh(\eta d_t / 4)`.

    Parameters
    ----------
    learner : Learner
        The base learner; it is updated in place and available as ``self.learner``.

    Notes
    -----
    For bandit base learners whose update importance-weights the loss with the *current*
    probability of the arm (Exp3, Exp3-IX), a delayed loss is weighted with the probability at
    arrival, not at play time, which biases the estimate; use :class:`BOLD` for those (a copy's
    state does not move while it waits). Cost: O(1) plus one base update per feed.
    """

    @property
    def weights(self) -> np.ndarray:
        """The base learner's current distribution, from which :meth:`play` samples."""
        return self.learner.weights

    def _play(self, rid: int, rng: np.random.Generator) -> int:
        return int(self.learner.sample(rng))

    def _feed(self, rid: int, arm: int, value: Any) -> None:
        self._update_learner(self.learner, arm, value)


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
        first = _check_learner(factory(), "factory()")
        self.n = first.n
        self.full_information = bool(type(first).full_information)
        self._pool: list[Learner] = [first]
        self._owner: dict[int, int] = {}
        self._init_rounds()

    def _new_copy(self, existing: list[Learner]) -> Learner:
        copy = _check_learner(self._factory(), "factory()")
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


class QPMD(_SingleLearner):
    r"""Queued Partial Monitoring with Delays (Joulani et al., ICML 2013): stochastic losses.

    One base learner runs in *simulated time*; arrived feedback that it has not used yet waits
    in a FIFO queue per action, :math:`Q_a`. Each real round:

    1. if the base learner has no pending prediction, draw one, :math:`a \sim p` (``sample``);
    2. while :math:`Q_a` is non-empty: pop its oldest feedback, give it to the base learner as
       the outcome of its prediction :math:`a`, and draw a new prediction :math:`a`;
    3. really play :math:`a`; it stays the base learner's *pending* prediction until some
       feedback for action :math:`a` arrives.

    Feedback arriving for action :math:`a` while :math:`a` is pending is used at once (step 2
    done eagerly; the order of base updates and draws is the same as doing it at the next play),
    so between calls either nothing is pending or the pending action's queue is empty. The base
    learner thus sees one fresh i.i.d. outcome of each action it chose, as in the undelayed
    problem, and Joulani et al. bound :math:`E[R_T] \le E[R_{\text{base}}(T)] + \sum_i
    \Delta_i E[G^*_{i,T}]` with :math:`G^*_{i,T}` the largest number of outstanding rounds of
    action :math:`i`: delay costs additively (constant marked [check] in REFERENCES.md; here
    only a seeded sanity check with UCB1, see docs/delayed.md). The guarantee is for
    stochastic (i.i.d.) losses only; use :class:`BOLD` against an adversary.

    Full information. The feedback of a round is the whole loss vector; it is queued under the
    action *played in that round* and popped when the base learner next chooses that action, so
    the base learner's trajectory is one it could have had without delay (each of its
    predictions is answered by the outcome of a round in which that prediction was played).
    Any loss vector would do for i.i.d. losses that do not depend on the action; keying by
    action also covers losses whose distribution depends on the action played (in HedgeSpec the
    round boundaries depend on how many drafted tokens were accepted).

    Censoring removes a round from ``outstanding`` and nothing else: the queues only hold
    arrived feedback, and a pending prediction keeps waiting for a later round of its action.

    Parameters
    ----------
    learner : Learner
        The base learner (updated in place; ``self.learner``).

    Attributes
    ----------
    pending : int or None
        The base learner's prediction that is waiting for feedback.
    queued : dict
        ``{arm: [round ids in FIFO order]}`` of arrived, unused feedback (fresh; non-empty
        queues only).
    """

    def __init__(self, learner: Learner) -> None:
        super().__init__(learner)
        self._pending: int | None = None
        self._queues: dict[int, deque[tuple[int, Any]]] = {}

    @property
    def pending(self) -> int | None:
        return self._pending

    @property
    def queued(self) -> dict[int, list[int]]:
        return {a: [rid for rid, _ in q] for a, q in sorted(self._queues.items()) if q}

    @property
    def weights(self) -> np.ndarray:
        """The distribution of the next play's first draw.

        One-hot on :attr:`pending` if a prediction is pending (the next play repeats it);
        otherwise the base learner's distribution. When feedback is queued the arm finally played
        can differ (step 2), so this is exact whenever no draw can hit a non-empty queue, e.g.
        always with zero delay.
        """
        if self._pending is not None:
            w = np.zeros(self.n)
            w[self._pending] = 1.0
            return w
        return self.learner.weights

    def _play(self, rid: int, rng: np.random.Generator) -> int:
        while self._pending is None:
            arm = int(self.learner.sample(rng))
            queue = self._queues.get(arm)
            if queue:
                _, value = queue[0]
                self._update_learner(self.learner, arm, value)
                queue.popleft()
            else:
                self._pending = arm
        return self._pending

    def _feed(self, rid: int, arm: int, value: Any) -> None:
        if self._pending == arm:  # its queue is empty (invariant): use the feedback at once
            self._update_learner(self.learner, arm, value)
            self._pending = None
        else:
            self._queues.setdefault(arm, deque()).append((rid, value))

    def _policy_state(self) -> dict[str, Any]:
        return {
            **super()._policy_state(),
            "pending": self._pending,
            "queues": [
                [a, [[rid, self._feedback_json(v)] for rid, v in q]]
                for a, q in sorted(self._queues.items())
                if q
            ],
        }

    def _prepare_policy_state(self, state, next_round, outstanding, censored):
        commit_learner = super()._prepare_policy_state(state, next_round, outstanding, censored)
        pending = state["pending"]
        if pending is not None:
            pending = check_int(pending, "pending", 0, self.n)
        queues: dict[int, deque[tuple[int, Any]]] = {}
        seen: set[int] = set()
        for a, entries in state["queues"]:
            a = check_int(a, "queue action", 0, self.n)
            if a in queues:
                raise ValueError(f"queue action {a} is listed twice")
            q: deque[tuple[int, Any]] = deque()
            for rid, v in entries:
                rid = check_int(rid, "queued round id", 0, next_round)
                if rid in seen or rid in outstanding or rid in censored:
                    raise ValueError(f"queued round {rid} is outstanding, censored or repeated")
                seen.add(rid)
                q.append((rid, self._check_feedback_value(v, f"queued feedback of round {rid}")))
            if q:
                queues[a] = q
        if pending is not None and pending in queues:
            raise ValueError(f"pending action {pending} has queued feedback (it must be used)")

        def commit() -> None:
            commit_learner()
            self._pending, self._queues = pending, queues

        return commit

    def _reset_policy(self) -> None:
        super()._reset_policy()
        self._pending = None
        self._queues = {}
