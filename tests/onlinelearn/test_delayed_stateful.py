"""Stateful tests of the round bookkeeping and of each reduction's routing.

A Hypothesis ``RuleBasedStateMachine`` plays, feeds and censors rounds in any order, tries every
kind of bad call, and round-trips the state through JSON, while a small independent model
tracks what must hold:

- each round is delivered at most once, and only after it was fed;
- ``outstanding == played - fed - censored`` (with the arms), ``censored`` exactly;
- BOLD: each round is played by the lowest-index free copy, its feedback reaches that copy and
  no other, and the pool is exactly as large as the most rounds ever outstanding;
- QPMD: each action's feedback is consumed first-in first-out, only when the base learner
  chose that action, and an arriving feedback for the pending action is used at once;
- a bad call raises ``ValueError`` and leaves ``state_dict()`` unchanged.

Base learners are spies: they record every draw and every update; each round's feedback is
tagged with its id (loss ``rid / 4096``, exact in binary) so the recorded updates say which
round they came from.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from onlinelearn.base import Learner, check_arm, check_loss, check_losses, softmin_weights
from onlinelearn.delayed import BOLD, QPMD, OnArrival

N = 3
TAG = 4096.0


class Spy(Learner):
    """Tiny learner that records its draws and updates (state is JSON, so it is compared too)."""

    full_information = True

    def __init__(self, n: int = N) -> None:
        super().__init__(n)
        self.reset()

    @property
    def weights(self) -> np.ndarray:
        return softmin_weights(np.asarray(self.L))

    def sample(self, rng: np.random.Generator) -> int:
        arm = super().sample(rng)
        self.events.append(["sample", arm])
        return arm

    def update(self, *args: Any):
        if self.full_information:
            (losses,) = args
            arr = check_losses(losses, self.n)
            self.L = (np.asarray(self.L) + arr).tolist()
            self.events.append(["update", None, round(arr[0] * TAG)])
        else:
            arm, loss = check_arm(args[0], self.n), check_loss(args[1])
            self.L[arm] += loss
            self.events.append(["update", arm, round(loss * TAG)])
        return self

    def reset(self):
        self.L = [0.0] * self.n
        self.events: list[list[Any]] = []
        return self

    def state_dict(self):
        return {"L": list(self.L), "events": [list(e) for e in self.events]}

    def load_state_dict(self, state):
        self.L, self.events = list(state["L"]), [list(e) for e in state["events"]]
        return self


class BanditSpy(Spy):
    full_information = False


def updates(spy: Spy) -> list[int]:
    return [e[2] for e in spy.events if e[0] == "update"]


def snapshot(dl) -> str:
    return json.dumps(dl.state_dict(), sort_keys=True)


class DelayedMachine(RuleBasedStateMachine):
    """Shared rules; subclasses set ``make`` and add the reduction's own model checks."""

    spy_cls: type[Spy] = Spy

    def make(self):
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.dl = self.make()
        self.played: dict[int, int] = {}
        self.fed: list[int] = []  # in feed order
        self.cens: set[int] = set()
        self.max_outstanding = 0

    # -- helpers
    def feedback(self, rid: int, rest: list[float]):
        if self.dl.full_information:
            return np.array([rid / TAG, *rest])
        return rid / TAG

    def open_rounds(self) -> list[int]:
        return sorted(set(self.played) - set(self.fed) - self.cens)

    def expect_rejected(self, call) -> None:
        before = snapshot(self.dl)
        try:
            call()
        except ValueError:
            pass
        else:
            raise AssertionError("bad call was accepted")
        assert snapshot(self.dl) == before

    # -- rules
    @rule(seed=st.integers(0, 2**16))
    def play(self, seed):
        rid, arm = self.dl.play(np.random.default_rng(seed))
        assert rid == len(self.played) and 0 <= arm < N
        self.played[rid] = arm
        self.after_play(rid, arm)
        self.max_outstanding = max(self.max_outstanding, len(self.open_rounds()))

    @precondition(lambda self: self.open_rounds())
    @rule(pick=st.integers(0, 10**6), rest=st.lists(st.floats(0, 1), min_size=N - 1,
                                                     max_size=N - 1))
    def feed(self, pick, rest):
        rounds = self.open_rounds()
        rid = rounds[pick % len(rounds)]
        self.before_feed(rid)
        self.dl.feed(rid, self.feedback(rid, rest))
        self.fed.append(rid)
        self.after_feed(rid)

    @precondition(lambda self: self.open_rounds())
    @rule(pick=st.integers(0, 10**6))
    def censor(self, pick):
        rounds = self.open_rounds()
        rid = rounds[pick % len(rounds)]
        self.before_feed(rid)
        self.dl.censor(rid)
        self.cens.add(rid)
        self.after_censor(rid)

    @rule(pick=st.integers(0, 10**6), how=st.sampled_from(["fed", "censored", "unknown"]),
          verb=st.sampled_from(["feed", "censor"]))
    def bad_round(self, pick, how, verb):
        pool = {"fed": self.fed, "censored": sorted(self.cens),
                "unknown": [len(self.played), len(self.played) + 7, -1]}[how]
        if not pool:
            return
        rid = pool[pick % len(pool)]
        if verb == "feed":
            self.expect_rejected(lambda: self.dl.feed(rid, self.feedback(0, [0.5] * (N - 1))))
        else:
            self.expect_rejected(lambda: self.dl.censor(rid))

    @precondition(lambda self: self.open_rounds())
    @rule(pick=st.integers(0, 10**6),
          bad=st.sampled_from([np.nan, np.inf, -0.25, 1.5, "shape", "text"]))
    def bad_feedback(self, pick, bad):
        rounds = self.open_rounds()
        rid = rounds[pick % len(rounds)]
        if bad == "shape":
            value: Any = np.zeros(N + 1) if self.dl.full_information else [0.1, 0.2]
        elif bad == "text":
            value = "abc" if self.dl.full_information else {"loss": 0.5}
        elif self.dl.full_information:
            value = np.array([bad, 0.5, 0.5])
        else:
            value = bad
        self.expect_rejected(lambda: self.dl.feed(rid, value))

    @rule()
    def json_round_trip(self):
        text = json.dumps(self.dl.state_dict())
        restored = self.make().load_state_dict(json.loads(text))
        assert json.dumps(restored.state_dict()) == text
        self.dl = restored

    # -- invariants
    @invariant()
    def outstanding_is_played_minus_fed_minus_censored(self):
        assert self.dl.outstanding == {r: self.played[r] for r in self.open_rounds()}
        assert self.dl.censored == frozenset(self.cens)
        assert self.dl.rounds_played == len(self.played)
        assert len(set(self.fed)) == len(self.fed)

    @invariant()
    def weights_on_simplex(self):
        w = self.dl.weights
        assert w.shape == (N,) and np.all(w >= 0) and abs(w.sum() - 1) < 1e-12

    @invariant()
    def each_round_delivered_at_most_once_and_only_if_fed(self):
        delivered = [r for spy in self.spies() for r in updates(spy)]
        assert len(delivered) == len(set(delivered))
        assert set(delivered) <= set(self.fed)

    # -- hooks
    def spies(self) -> list[Spy]:
        return [self.dl.learner]

    def after_play(self, rid, arm): ...
    def before_feed(self, rid): ...
    def after_feed(self, rid): ...
    def after_censor(self, rid): ...


class OnArrivalMachine(DelayedMachine):
    def make(self):
        return OnArrival(self.spy_cls())

    @invariant()
    def weights_are_the_learners(self):
        assert np.array_equal(self.dl.weights, self.dl.learner.weights)

    @invariant()
    def every_feed_applied_in_arrival_order(self):
        assert updates(self.dl.learner) == self.fed
        if not self.dl.full_information:
            arms = [e[1] for e in self.dl.learner.events if e[0] == "update"]
            assert arms == [self.played[r] for r in self.fed]


class BOLDMachine(DelayedMachine):
    def make(self):
        return BOLD(self.spy_cls)

    def __init__(self) -> None:
        self.owner: dict[int, int] = {}  # model: outstanding round -> copy
        self.expected: dict[int, list[int]] = {}  # model: copy -> rounds it must have received
        super().__init__()

    def spies(self):
        return list(self.dl.pool)

    def after_play(self, rid, arm):
        busy = set(self.owner.values())
        j = min(set(range(len(busy) + 1)) - busy)  # lowest free index
        self.owner[rid] = j
        assert self.dl.owners == self.owner
        copy = self.dl.pool[j]
        assert copy.events[-1] == ["sample", arm], "the round was not played by its owner"

    def after_feed(self, rid):
        self.expected.setdefault(self.owner.pop(rid), []).append(rid)

    def after_censor(self, rid):
        self.owner.pop(rid)

    @invariant()
    def feedback_only_reaches_its_owner(self):
        for j, copy in enumerate(self.dl.pool):
            assert updates(copy) == self.expected.get(j, [])
        assert self.dl.owners == self.owner

    @invariant()
    def weights_are_those_of_the_next_player(self):
        busy = set(self.owner.values())
        j = min(set(range(len(busy) + 1)) - busy)
        nxt = self.dl.pool[j] if j < len(self.dl.pool) else self.spy_cls()
        assert np.array_equal(self.dl.weights, nxt.weights)

    @invariant()
    def pool_is_as_large_as_the_most_rounds_outstanding(self):
        assert len(self.dl.pool) == max(1, self.max_outstanding)


class QPMDMachine(DelayedMachine):
    def make(self):
        return QPMD(self.spy_cls())

    def __init__(self) -> None:
        self.queues: dict[int, list[int]] = {}  # model: arm -> arrived, unused rounds (FIFO)
        self.pending: int | None = None
        super().__init__()
        self.seen_events = 0

    def new_events(self):
        events = self.dl.learner.events[self.seen_events :]
        self.seen_events = len(self.dl.learner.events)
        return events

    def after_play(self, rid, arm):
        """Replay the base learner's draws against the model queues."""
        events = self.new_events()
        i = 0
        while self.pending is None:
            kind, a = events[i][0], events[i][1]
            assert kind == "sample"
            i += 1
            if self.queues.get(a):
                # FIFO: the oldest arrived feedback of action a answers the prediction a.
                assert events[i][0] == "update" and events[i][2] == self.queues[a].pop(0)
                if not self.dl.full_information:
                    assert events[i][1] == a
                i += 1
            else:
                self.pending = a
        assert i == len(events), "base learner did more than the algorithm allows"
        assert arm == self.pending

    def after_feed(self, rid):
        events = self.new_events()
        arm = self.played[rid]
        if self.pending == arm:
            assert not self.queues.get(arm)
            assert [e[0] for e in events] == ["update"] and events[0][2] == rid
            self.pending = None
        else:
            assert events == []
            self.queues.setdefault(arm, []).append(rid)

    def after_censor(self, rid):
        assert self.new_events() == []

    @invariant()
    def queues_match_model(self):
        assert self.dl.pending == self.pending
        assert self.dl.queued == {a: q for a, q in sorted(self.queues.items()) if q}
        assert self.pending is None or not self.queues.get(self.pending)

    @invariant()
    def weights_are_the_next_first_draw(self):
        if self.pending is None:
            assert np.array_equal(self.dl.weights, self.dl.learner.weights)
        else:
            assert np.array_equal(self.dl.weights, np.eye(N)[self.pending])

    @invariant()
    def used_feedback_is_fifo_per_action(self):
        used = updates(self.dl.learner)
        for a in range(N):
            arrived = [r for r in self.fed if self.played[r] == a]
            consumed = [r for r in used if self.played[r] == a]
            assert consumed == arrived[: len(consumed)]


STATEFUL = settings(
    max_examples=50, stateful_step_count=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _bandit(machine):
    return type(machine.__name__ + "Bandit", (machine,), {"spy_cls": BanditSpy})


TestOnArrivalFull = OnArrivalMachine.TestCase
TestOnArrivalBandit = _bandit(OnArrivalMachine).TestCase
TestBOLDFull = BOLDMachine.TestCase
TestBOLDBandit = _bandit(BOLDMachine).TestCase
TestQPMDFull = QPMDMachine.TestCase
TestQPMDBandit = _bandit(QPMDMachine).TestCase
for _case in (TestOnArrivalFull, TestOnArrivalBandit, TestBOLDFull, TestBOLDBandit,
              TestQPMDFull, TestQPMDBandit):
    _case.settings = STATEFUL
del _case
