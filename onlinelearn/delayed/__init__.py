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

from .base import DelayedLearner
from .bold import BOLD
from .onarrival import OnArrival
from .qpmd import QPMD

__all__ = ["BOLD", "QPMD", "DelayedLearner", "OnArrival"]
