"""Drafter-selection policies for the decoders: HedgeSpec, EXP3Spec, UCBSpec, MetaSD-UCB, fixed.

A policy is an :mod:`onlinelearn.delayed` ``DelayedLearner`` (or :class:`FixedPolicy`, which
has the same verbs): ``play(rng) -> (round_id, arm)``, ``feed(round_id, feedback)``,
``censor(round_id)``, ``weights``, ``reset()``, ``full_information``.

- **HedgeSpec** (``"normalhedge"`` default, ``"hedge"``, ``"adahedge"``, or any
  full-information ``onlinelearn`` learner instance): the decoder feeds every drafter's loss
  (a vector) once the round's window of K positions is verified, i.e. with a delay of up to
  K - 1 rounds, so the learner is wrapped in a delayed-feedback reduction. Default:
  ``OnArrival``, which applies each loss vector as it arrives (adversarial regret bound in
  ``docs/delayed.md``). ``"qpmd"`` is Joulani et al.'s stochastic-setting queue that the
  HedgeSpec paper uses; it makes the base learner wait for feedback on its own prediction, so
  a failing drafter is replayed until one of its rounds completes (up to K - 1 extra rounds).
  Measured on tiny pools (docs/decoding.md) OnArrival gave the higher mean accepted tokens in
  3 of 4 settings, hence the default. ``"bold"`` runs copies of the learner.
- **EXP3Spec / UCBSpec** (BanditSpec, arXiv 2505.15141): bandit feedback only for the chosen
  drafter, its accepted length ``Y`` in [1, K+1], known right after verification. The loss fed
  to the bandit learner is ``(K + 1 - Y) / K`` in [0, 1] (BanditSpec's EXP3 estimate divides
  the same quantity by ``L p_i``, which ``onlinelearn.bandits.Exp3`` does itself); UCBSpec's
  "mean(Y) + radius" is UCB1 on that loss. There is no delay, so the wrapper is ``OnArrival``,
  which with zero delay reproduces the base learner exactly.
- **MetaSD-UCB** (``"metasd-ucb"``; Kim et al., "Multi-Drafter Speculative Decoding with
  Alignment Feedback", arXiv 2604.05417): UCB1 over drafters whose feedback is the chosen
  drafter's *block divergence*, the mean over its drafted block of ``1 - TV(p_j, q_j) =
  sum_x min(p_j, q_j) = gamma_j`` (Theorem 1), each ``p_j`` the target's distribution given
  the prefix and the drafts before ``j`` (all ``K`` rows of the verification pass, past the
  first rejection too). The loss fed right after verification is :func:`block_loss`
  ``= 1 - mean_j gamma_j`` in [0, 1]. :func:`feedback_of` tells the decoder that this policy
  wants the block's gamma (only the single-draft scheme computes it) rather than the accepted
  length.
- **fixed:<i>**: always drafter ``i``. It learns nothing, so it is not full-information: the
  decoders skip counterfactual evaluation for it and feed it the bandit loss (ignored).

``"oracle"`` is not a policy: the decoder runs every ``fixed:<i>`` and keeps the best.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FEEDBACKS", "POLICY_NAMES", "FixedPolicy", "bandit_loss", "block_loss",
           "feedback_of", "make_policy"]

POLICY_NAMES = ("normalhedge", "hedge", "adahedge", "exp3spec", "ucbspec", "metasd-ucb",
                "fixed:<i>", "oracle")
DELAYS = ("onarrival", "qpmd", "bold")
# what a bandit (or fixed) policy is fed: the accepted length, or the block's mean gamma
FEEDBACKS = ("accepted", "block_gamma")
_BLOCK_GAMMA_POLICIES = ("metasd-ucb",)


def bandit_loss(n_accepted: int, k: int) -> float:
    """BanditSpec's loss for the chosen drafter: ``(K + 1 - Y) / K`` with ``Y = n_accepted + 1``
    tokens produced by the round, so 0 when all ``K`` drafts are accepted, 1 when none is."""
    return (k - n_accepted) / k


def block_loss(block_gamma: float) -> float:
    """MetaSD-UCB's loss for the chosen drafter: ``1 - mean_j gamma_j`` over its drafted block,
    the block's mean total-variation distance ``mean_j TV(p_j, q_j)`` (0 when the drafter's
    ``q`` equals the target's ``p`` at every drafted position, 1 when it has no overlap).

    Raises
    ------
    ValueError
        ``block_gamma`` not a finite number in ``[0, 1]``.
    """
    if not isinstance(block_gamma, int | float | np.floating) or isinstance(block_gamma, bool) \
            or not 0.0 <= float(block_gamma) <= 1.0:
        raise ValueError(f"block_gamma must be a number in [0, 1], got {block_gamma!r}")
    return 1.0 - float(block_gamma)


def feedback_of(spec) -> str:
    """What the decoder feeds policy ``spec`` (a :func:`make_policy` spec) right after
    verification when it is not full-information: ``"block_gamma"`` for MetaSD-UCB
    (:func:`block_loss` of the chosen drafter's mean gamma over its block), ``"accepted"`` for
    every other spec (:func:`bandit_loss`; fixed policies ignore it)."""
    if isinstance(spec, str) and spec.strip().lower() in _BLOCK_GAMMA_POLICIES:
        return "block_gamma"
    return "accepted"


class FixedPolicy:
    """Always play arm ``arm``; keeps the ``DelayedLearner`` bookkeeping (round ids,
    outstanding, censored) so the decoder treats it like any other policy.

    ``full_information`` is ``False``: a fixed choice needs no other drafter's loss, so the
    decoders do not evaluate counterfactuals for it; ``feed`` takes any feedback and ignores
    it."""

    full_information = False

    def __init__(self, n: int, arm: int) -> None:
        if not 0 <= arm < n:
            raise ValueError(f"fixed policy index {arm} is out of range for {n} drafters")
        self.n, self.arm = n, arm
        self.reset()

    def reset(self):
        self._next_id = 0
        self.outstanding: dict[int, int] = {}
        self._censored: set[int] = set()
        return self

    @property
    def censored(self) -> frozenset[int]:
        return frozenset(self._censored)

    @property
    def weights(self) -> np.ndarray:
        w = np.zeros(self.n)
        w[self.arm] = 1.0
        return w

    def play(self, rng: np.random.Generator) -> tuple[int, int]:
        rid = self._next_id
        self._next_id += 1
        self.outstanding[rid] = self.arm
        return rid, self.arm

    def _close(self, round_id: int) -> None:
        if round_id not in self.outstanding:
            raise ValueError(f"round {round_id} is not outstanding")
        del self.outstanding[round_id]

    def feed(self, round_id: int, feedback: Any):
        self._close(round_id)
        return self

    def censor(self, round_id: int):
        self._close(round_id)
        self._censored.add(round_id)
        return self


def _full_information_learner(name: str, n: int):
    if name == "normalhedge":
        from onlinelearn.normalhedge import NormalHedge
        return NormalHedge(n)
    if name == "hedge":
        from onlinelearn.hedge import Hedge
        return Hedge(n)
    if name == "adahedge":
        from onlinelearn.adahedge import AdaHedge
        return AdaHedge(n)
    raise AssertionError(name)


def _bandit_learner(name: str, n: int):
    from onlinelearn.bandits import UCB1, Exp3
    return Exp3(n) if name == "exp3spec" else UCB1(n)  # ucbspec, metasd-ucb


def _wrap(learner, delay: str):
    from onlinelearn import delayed

    if not learner.full_information:
        return delayed.OnArrival(learner)  # bandit feedback arrives in the same round
    if delay == "qpmd":
        return delayed.QPMD(learner)
    if delay == "onarrival":
        return delayed.OnArrival(learner)
    learner_type, state = type(learner), learner.state_dict()
    return delayed.BOLD(lambda: learner_type(learner.n).load_state_dict(state))


def make_policy(spec, n: int, delay: str = "onarrival"):
    """Build the drafter-selection policy for a pool of ``n`` drafters.

    Parameters
    ----------
    spec : str or onlinelearn learner or DelayedLearner
        ``"normalhedge"`` (default of the decoders), ``"hedge"``, ``"adahedge"``,
        ``"exp3spec"``, ``"ucbspec"``, ``"metasd-ucb"`` (fed :func:`block_loss`, see
        :func:`feedback_of`), ``"fixed:<i>"``; an ``onlinelearn.base.Learner`` with
        ``n`` experts (full-information learners are wrapped in ``delay``, bandit learners in
        ``OnArrival``); or an ``onlinelearn.delayed`` reduction, used as is.
    n : int
        Number of drafters, ``>= 1``.
    delay : {"onarrival", "qpmd", "bold"}, default "onarrival"
        Delayed-feedback reduction for full-information learners.

    Returns
    -------
    policy
        An object with ``play``, ``feed``, ``censor``, ``weights``, ``reset``,
        ``full_information``.

    Raises
    ------
    ValueError
        Unknown policy name or delay, a bad ``fixed:`` index, or a learner whose ``n``
        differs from the pool size.
    """
    if delay not in DELAYS:
        raise ValueError(f"unknown delay reduction {delay!r}; expected one of {DELAYS}")
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name.startswith("fixed:"):
            try:
                arm = int(name.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"bad fixed policy {spec!r}; expected 'fixed:<index>'") from None
            return FixedPolicy(n, arm)
        if name in ("normalhedge", "hedge", "adahedge"):
            return _wrap(_full_information_learner(name, n), delay)
        if name in ("exp3spec", "ucbspec", "metasd-ucb"):
            return _wrap(_bandit_learner(name, n), delay)
        raise ValueError(f"unknown policy {spec!r}; expected one of {POLICY_NAMES} or an "
                         "onlinelearn learner instance")
    if hasattr(spec, "play") and hasattr(spec, "feed") and hasattr(spec, "censor"):
        learner = spec
    elif hasattr(spec, "update") and hasattr(spec, "weights") and hasattr(spec, "n"):
        learner = None
    else:
        raise ValueError(f"unknown policy {spec!r}: not a policy name nor an onlinelearn learner")
    if spec.n != n:
        raise ValueError(f"policy learner has n={spec.n} experts but the pool has {n} drafters")
    return learner if learner is not None else _wrap(spec, delay)
