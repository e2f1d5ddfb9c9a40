"""One request's selection session: the verbs every engine drives (numpy only).

An engine drafts and verifies; everything it decides and learns goes through a
:class:`SelectionSession`, the same in the transformers loop, the vLLM proposer and the
llama.cpp decoder::

    play = session.play(rng)                   # the learner picks an expert (drafter, option)
    session.open(play, start, drafts, ...)     # full information: the round's window opens
      or session.censor(play)                  #   (a round left unscored)
      or session.feed_chosen(play, loss)       # bandit / fixed: the chosen drafter's loss now
    session.record(tokens[, gamma, rho, ...])  # the verified tokens (and per-position stats)
    scored = session.feed(costs, tau)          # every completed window -> losses -> learner
    gain = session.gains(tau, draft_s, fixed_s)  # what each expert is expected to pay
    session.close()                            # generation stopped: open rounds censored

An expert is a drafter and an *option*: with stop rules (:class:`~.stop_rules.StopRules`) the
option is a rule ``r``; with the time loss and no rules it is the draft length ``k = 0 .. K``
(the ``(drafter, k)`` family of :mod:`~.experts`); with a per-drafter loss (the paper's EAL or
TAP) there is one option, the whole draft. A window's loss vector is
:func:`~.experts.window_losses` (Theorem 3's estimators; the Dinkelbach time loss of
docs/theory.md), gathered at each rule's length where there are rules
(:meth:`~.stop_rules.StopRules.losses`).

What a stream of requests shares (:class:`Stream`): the counterfactual acceptance of every
expert (a new request's abstention estimates start from it, shrunk to ``prior_rounds``
rounds) and, where new requests are warm-started, one NormalHedge fed every scored window
(:meth:`onlinelearn.NormalHedge.warm_start`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from onlinelearn.normalhedge import NormalHedge
from spec_adapters.selection.abstention import AcceptanceBook, expected_gains
from spec_adapters.selection.book import RoundBook
from spec_adapters.selection.experts import (
    LENGTH_LOSSES,
    LOSSES,
    acceptance_lengths,
    window_losses,
)
from spec_adapters.selection.policies import make_policy
from spec_adapters.selection.stop_rules import StopRules

__all__ = ["Play", "RoundInfo", "Scored", "SelectionSession", "Stream"]

Tau = float | None | Callable[[np.ndarray], float | None]


@dataclass(frozen=True)
class RoundInfo:
    """What ``generate(..., on_round=f)`` passes to ``f`` once per round.

    Attributes
    ----------
    index : int
        Round number within this ``generate`` call, from 0.
    drafter : int
        Index of the drafter the policy chose for this round.
    drafter_name : str
        Its name (``stats["drafters"][drafter]``).
    accepted : int
        Drafts accepted by the target, ``0 .. K``.
    drafted : int
        Tokens drafted this round (``K``; fewer at the context limit, when the drafter
        abstains, or when a cost-aware policy chose a shorter draft; 0 = a plain step).
    tokens : tuple of int
        The round's new verified tokens (accepted drafts plus the resampled / bonus token, cut
        after EOS or at the length limit); concatenated over rounds they are the output.
    weights : tuple of float
        The policy's base-learner distribution over drafters before the choice
        (``stats["weights"]``; cost-aware: summed over each drafter's draft lengths).
    length : int
        The draft length the policy chose, ``K`` unless cost-aware (``stats["lengths"]``);
        ``drafted`` is at most this.
    """

    index: int
    drafter: int
    drafter_name: str
    accepted: int
    drafted: int
    tokens: tuple[int, ...]
    weights: tuple[float, ...]
    length: int


class Play(NamedTuple):
    """A played round: the learner's ``round_id`` and ``expert``, as ``(drafter, option)``
    (the option: a stop rule's index, a draft length ``k``, or 0 for the whole draft)."""

    round_id: int
    expert: int
    drafter: int
    option: int


class Scored(NamedTuple):
    """A window fed to the learner: its ``losses`` (one per expert) and ``accepted``, the
    ``(N, K + 1)`` tokens each drafter's ``k``-token draft would have had accepted."""

    round_id: int
    losses: np.ndarray
    accepted: np.ndarray


def options_per_drafter(max_k: int, loss: str, rules: StopRules | None) -> int:
    """How many experts a drafter has: its stop rules, else ``K + 1`` lengths under a length
    loss (``"time"``, ``"mat"``), else one.

    Raises
    ------
    ValueError
        An unknown loss, or stop rules with a per-drafter loss.
    """
    if loss not in (*LOSSES, *LENGTH_LOSSES):
        raise ValueError(f"unknown loss {loss!r}; expected one of {(*LOSSES, *LENGTH_LOSSES)}")
    if rules is not None:
        if loss not in LENGTH_LOSSES:
            raise ValueError(f"stop rules need a per-length loss {LENGTH_LOSSES}, got {loss!r}")
        return len(rules)
    return max_k + 1 if loss in LENGTH_LOSSES else 1


class Stream:
    """What the requests of one stream share.

    Parameters
    ----------
    n_drafters, max_k : int
    prior_rounds : int, default 8
        Weight, in rounds, of the stream's evidence in a new request's (its acceptance
        estimates; its warm-started learner's regrets).
    warm_experts : int, optional
        Keep a stream-wide NormalHedge over this many experts, fed every scored window, to
        warm-start new requests' learners (:meth:`policy`); ``None``: no warm starts.

    Attributes
    ----------
    acceptance : AcceptanceBook
        Every scored window's counterfactual accepted and drafted tokens.
    learner : onlinelearn.NormalHedge or None
    """

    def __init__(self, n_drafters: int, max_k: int, prior_rounds: int = 8,
                 warm_experts: int | None = None) -> None:
        if isinstance(prior_rounds, bool) or not isinstance(prior_rounds, int | np.integer) \
                or prior_rounds < 0:
            raise ValueError(f"prior_rounds must be an integer >= 0, got {prior_rounds!r}")
        self.prior_rounds = int(prior_rounds)
        self.acceptance = AcceptanceBook(n_drafters, max_k)
        self.learner = NormalHedge(warm_experts) \
            if warm_experts is not None and prior_rounds else None

    def policy(self, spec: Any, n_experts: int, delay: str = "onarrival"):
        """A new request's policy: :func:`make_policy` of ``spec``, except that a
        ``"normalhedge"`` request of a warm stream starts from the stream's regrets shrunk to
        ``prior_rounds`` rounds (``R_0 = R_stream m / t_stream``, ``t_0 = m``: the stream's
        weights with ``m`` rounds of evidence, so its own rounds outweigh the prior after
        about ``m`` of them and its regret bound gains at most ``m``)."""
        if spec == "normalhedge" and self.learner is not None and self.learner.t > 0:
            spec = NormalHedge(n_experts).warm_start(self.learner, self.prior_rounds)
        return make_policy(spec, n_experts, delay)


class SelectionSession:
    """One request's choice of drafter and draft: its learner's rounds, their windows, what
    they taught.

    Parameters
    ----------
    policy
        A policy of :func:`~.policies.make_policy` over ``n_drafters * options`` experts
        (carried across requests by engines that learn over a stream in one learner).
    n_drafters, max_k : int
        ``N`` and ``K``, the window of every round.
    loss : str, default "time"
        ``"eal"`` / ``"tap"`` (one expert per drafter), ``"time"`` / ``"mat"`` (per length or
        stop rule): :func:`~.experts.window_losses`.
    rules : StopRules, optional
        The options are these stop rules, each window's per-length losses gathered at the
        rule lengths the round was opened with.
    corrected : bool, default False
        Feed the corrected estimator (``rho``) of per-position statistics (sampling with
        drafters that have distributions); point-mass windows have ``rho = gamma``.
    stream : Stream, optional
        Shared acceptance (and warm-start learner) of the requests' stream.
    first_position : int, default 0
        The verified length when the request starts (its prompt's).
    consensus : dict, optional
        ``{drafter: member drafters}``: consensus drafters scored per window from their
        members' per-position argmaxes (:class:`~.book.RoundBook`; the transformers loop).

    Raises
    ------
    ValueError
        An unknown loss, rules with a per-drafter loss, a policy over another number of
        experts.
    """

    def __init__(self, policy, n_drafters: int, max_k: int, *, loss: str = "time",
                 rules: StopRules | None = None, corrected: bool = False,
                 stream: Stream | None = None, first_position: int = 0,
                 consensus: dict[int, list[int]] | None = None) -> None:
        self.options = options_per_drafter(max_k, loss, rules)
        n_experts = int(n_drafters) * self.options
        if getattr(policy, "n", n_experts) != n_experts:
            raise ValueError(f"the policy has {policy.n} experts; {n_drafters} drafters x "
                             f"{self.options} options make {n_experts}")
        self.policy, self.n, self.K = policy, int(n_drafters), int(max_k)
        self.loss, self.rules, self.stream = loss, rules, stream
        self.book = RoundBook(self.n, self.K, corrected=corrected, consensus=consensus)
        self.book.reset(first_position)
        self.acceptance = AcceptanceBook(self.n, self.K)
        self.rule_lengths: dict[int, np.ndarray] = {}

    @property
    def full_information(self) -> bool:
        """Does the policy learn from every expert's loss (else from the chosen one's)?"""
        return bool(self.policy.full_information)

    @property
    def weights(self) -> np.ndarray:
        """The learner's distribution summed over each drafter's options, ``(N,)`` (a
        delayed reduction's base learner's: QPMD's own is one-hot while it waits)."""
        learner = getattr(self.policy, "learner", None)
        w = np.asarray((learner if learner is not None else self.policy).weights, np.float64)
        return w.reshape(self.n, -1).sum(1) if w.size == self.n * self.options else w

    def play(self, rng: np.random.Generator) -> Play:
        """The learner picks an expert for the next round."""
        round_id, e = self.policy.play(rng)
        drafter, option = divmod(int(e), self.options)
        return Play(round_id, int(e), drafter, option)

    def open(self, play: Play, start: int, drafts: np.ndarray | None = None,
             rule_lengths: np.ndarray | None = None, costs: np.ndarray | None = None) -> None:
        """A played round's window opens at verified position ``start``: scored from every
        drafter's point-mass ``drafts`` ``(N, K)`` or, ``None``, from the per-position
        statistics :meth:`record` gets. ``rule_lengths`` ``(N, R)``: each rule's length this
        round (with rules); ``costs``: the round's prices ``c(k)``, if fixed when it is played
        (else :meth:`feed`'s)."""
        if self.rules is not None and rule_lengths is None:
            raise ValueError("a session with stop rules opens a round with its rule_lengths")
        self.book.open(play.round_id, start, drafts, data=costs)
        if rule_lengths is not None:
            self.rule_lengths[play.round_id] = np.asarray(rule_lengths)

    def censor(self, play: Play) -> None:
        """A played round that will not be scored (outside the feedback budget)."""
        self.policy.censor(play.round_id)

    def feed_chosen(self, play: Play, loss: float) -> None:
        """A bandit's (or fixed policy's) feedback, right after verification: the chosen
        expert's ``loss`` (:func:`~.policies.bandit_loss`, :func:`~.policies.block_loss`)."""
        self.policy.feed(play.round_id, loss)

    def record(self, tokens, gamma=None, rho=None, proposes=None, argmax=None, p_argmax=None
               ) -> None:
        """The next verified ``tokens`` (with per-position statistics where rounds read
        them, and the argmaxes a consensus is scored from: :meth:`RoundBook.record`)."""
        self.book.record(tokens, gamma, rho, proposes, argmax, p_argmax)

    def feed(self, costs: np.ndarray | Callable[[], np.ndarray] | None = None,
             tau: Tau = None) -> list[Scored]:
        """Feed every window now complete to the learner; the scored windows, in order.

        Parameters
        ----------
        costs : numpy.ndarray or callable, optional
            The time loss's ``c(k)`` ``(K + 1,)`` or ``c_i(k)`` ``(N, K + 1)`` for windows
            opened without their own, or a function giving them, called once and only when
            such a window completes (most rounds complete none: no pricing then).
        tau : float, callable or None
            Seconds per token to linearise at, or a function of a window's costs giving it.
        """
        out = []
        for w in self.book.pop_completed():
            if w.data is None and callable(costs):
                costs = costs()
            c = costs if w.data is None else w.data
            if self.loss == "time":
                losses = window_losses(w, "time", self.book.corrected, c,
                                       tau(c) if callable(tau) else tau)
            else:
                losses = window_losses(w, self.loss, self.book.corrected)
            if self.rules is not None:
                losses = self.rules.losses(losses, self.rule_lengths.pop(w.round_id))
            self.policy.feed(w.round_id, losses)
            accepted = acceptance_lengths(w.gamma, w.rho if self.book.corrected else None,
                                          validate=False) - 1.0
            drafted = np.minimum(np.arange(self.K + 1)[None, :], w.lengths[:, None])
            self.acceptance.add(accepted, drafted)
            if self.stream is not None:
                self.stream.acceptance.add(accepted, drafted)
                if self.stream.learner is not None:
                    self.stream.learner.update(losses)
            out.append(Scored(w.round_id, losses, accepted))
        return out

    def gains(self, tau: float, draft_s: float | np.ndarray,
              fixed_s: float | np.ndarray = 0.0) -> np.ndarray | None:
        """Every ``(drafter, k)``'s expected gain in seconds over a plain step
        (:func:`~.abstention.expected_gains`) from this request's counterfactual acceptance
        shrunk to the stream's; ``None`` before any evidence."""
        prior = None if self.stream is None else self.stream.acceptance
        weight = 0 if self.stream is None else self.stream.prior_rounds
        est = self.acceptance.estimate(prior, weight)
        return None if est is None else expected_gains(*est, tau, draft_s, fixed_s)

    def close(self) -> list[int]:
        """Generation stopped: censor every round still outstanding (windows past the end; a
        step that raised); their ids. A policy is driven by one session at a time (an engine
        carrying it across requests closes each request's session before the next opens), so
        every outstanding round is this session's, and the session keeps no list of its own
        rounds: its size does not grow with the request."""
        self.book.close()
        self.rule_lengths.clear()
        ids = sorted(self.policy.outstanding)
        for rid in ids:
            self.policy.censor(rid)
        return ids
