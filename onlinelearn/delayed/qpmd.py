"""QPM-D (Joulani et al., ICML 2013): per-action feedback queues for stochastic losses."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from onlinelearn.base import Learner, check_int

from .base import SingleLearnerReduction

__all__ = ["QPMD"]


class QPMD(SingleLearnerReduction):
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
