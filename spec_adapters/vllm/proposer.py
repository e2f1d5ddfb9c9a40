"""HedgeSpec as a vLLM ``custom_class`` speculative proposer.

Use::

    LLM(model, speculative_config={"method": "custom_class",
        "model": "spec_adapters.vllm.HedgeSpecProposer", "num_speculative_tokens": 4})

with the settings in ``$HEDGESPEC_VLLM_CONFIG`` (:mod:`spec_adapters.vllm.config`). vLLM builds
the class with its ``VllmConfig`` and calls :meth:`HedgeSpecProposer.propose` once per engine
step with, per batch row, the tokens sampled in that step (accepted drafts + bonus token;
empty = the row is skipped), the row's token count and the token buffer. It passes no request
ids, so each row is matched to the request state whose history it extends
(:meth:`HedgeSpecProposer._match`, twins included).

One step for one request (the paper's loop, with point-mass drafters)::

    feed the rounds whose K verified tokens are now known  ->  learner update (delayed)
    the request's learner picks an expert (drafter, rule)  ->  the rule's cut of the draft
    the played drafter drafts K tokens with confidences    ->  cut to what pays at this load
    (a sampled share of rounds) every drafter drafts K     ->  the round's counterfactuals

The experts are (drafter, stop rule) pairs (:mod:`spec_adapters.selection.stop_rules`): a rule
keeps the prefix of the drafter's draft whose running confidence stays above its threshold, at
most its cap; the fixed lengths k = 0 .. K are rules too (``"stop_rules": [0]`` keeps only
them).

The proposer is an adapter over the selection core (:mod:`spec_adapters.selection`): per
request a :class:`~spec_adapters.selection.session.SelectionSession` (the session the
transformers loop and the llama.cpp decoder drive too) whose rounds open with every drafter's
draft and the step's prices, and which is fed the verified tokens; what is vLLM's own is
matching rows to requests, timing engine steps, and the feedback budget below. A bandit or
fixed policy drafts ``K`` tokens with its drafter (as published: no stop rules, no
abstention) and is fed BanditSpec's loss of its accepted length at the next step, as in the
transformers loop.

Abstention at load (:mod:`spec_adapters.selection.abstention`). The step time is learned online
as ``a + b_R rows + b_D drafted + c [drafted > 0]``
(:class:`~spec_adapters.selection.costs.StepTimeModel`); a drafted
token costs the whole batch ``b_D`` and an accepted one saves it ``tau`` (its seconds per
token), so the learner's draft is cut to the longest length whose expected accepted tokens
(the request's counterfactual acceptance, shrunk to the stream's) pay ``b_D`` per drafted
token, and a request none of whose experts pays drafts nothing and skips the counterfactual
drafting of that round (but for a ``probe`` share). The price of speculating at all, ``c``, is
the step's, paid once whichever rows draft: the step drafts only when its rows' best expected
gains, added up, cover it; else it is a plain step (a per-row share ``c / B`` undercharges a
step where only some rows draft, and under load those are most steps). At a steady load
nearly every step may draft, so nothing tells ``c`` from the plain step's ``a``: while fewer
than a share ``explore_steps`` (5%) of the recent decode steps drafted nothing, that share of
them is made to draft nothing (the proposer's own seeded coin), so the fit sees both kinds of
step at the same load; a load where steps without drafts are common costs nothing.
``"step_costs"`` pins the model instead of learning it (and nothing is explored).

Prior from the stream (``prior_rounds``, NormalHedge). A request's learner starting uniform
over ``N (K + 1)`` experts spends its first rounds exploring, which at high concurrency is
most of a short request. The proposer also feeds every evaluated round's losses to one
stream-wide NormalHedge, and a new request starts from its regrets shrunk to the evidence of
``prior_rounds`` rounds (``NormalHedge.warm_start``): ``R_0 = R_stream * m / t_stream``,
``t_0 = m``. NormalHedge's weights
are invariant to scaling the regrets (the scale ``c`` scales with ``R^2``), so the request
starts with the stream's weights, and its own rounds outweigh the prior after about ``m`` of
them; the request's regret bound gains at most ``m`` (``|R_0| <= m``). The same ``m`` weighs
the stream's acceptance in a new request's abstention estimates. Default ``m = 8``
(docs/benchmark.md, "vLLM under load", measures it against ``m = 0``).

Feedback budget. Evaluating a round (drafting with every drafter, then scoring every
expert and updating the learners) costs the engine's main process ~0.5-1 ms per row here,
which at 16 concurrent requests is a tenth of a step. The proposer measures both (an
evaluated round's drafting and scoring, the step) and evaluates a round with probability
``min(1, share * step / (rows * evaluation))``, by a coin drawn before the outcome; the
others are censored (the learner is fed on an unbiased sample of the rounds, each with full
information). ``share`` is what the proposer's other work of a step (matching rows, pricing,
the played drafts; measured, an EMA) leaves of ``time_budget`` (3% of a step), at most
``feedback_budget`` (2%) and never below a quarter of it, so that the proposer's whole time
stays within ``time_budget`` where its other work allows and the learner always learns. A
bandit policy (EXP3Spec, UCBSpec) needs only its own draft, so only the played drafter drafts.

Feedback: a deterministic draft's prefix that matches the verified continuation is its exact
acceptance length under greedy decoding and an unbiased estimate of its expected acceptance
length at temperature > 0 (``python -m proofs_check --only pointmass``), so every expert's
loss comes from the tokens alone.

State: everything the learner keeps is per request (:class:`RequestState`). The suffix drafter's
memory (``"suffix": true``, :class:`~spec_adapters.drafters.point.SuffixDraft`) is
deliberately global: when the proposer frees a finished request's state, the request's tokens
(prompt + output) are committed to it, so later requests draft from earlier answers. Feedback
never recomputes a draft: a round records every drafter's draft when it is made, so a commit
between a round and its feedback changes nothing of it (and commits only happen when a request
is freed, never within a step's drafting). What is committed is the buffer of the request's last
step: the tokens of its final verification (at most ``K + 1``) never reach the proposer. A
request absent for ``idle_steps`` steps (preempted) that comes back gets a new state, and its
earlier tokens are then both in the memory and in its own buffer (counted twice).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from spec_adapters.drafters.point import (
    Consensus,
    PromptLookup,
    SuffixDraft,
    consensus_rows,
    propose_all,
    solo_seconds,
)
from spec_adapters.drafters.pool_folder import load_pool_folder
from spec_adapters.selection.abstention import paying_k, step_pays
from spec_adapters.selection.costs import StepTimeModel, TokenRate
from spec_adapters.selection.policies import bandit_loss, make_policy
from spec_adapters.selection.session import Play, SelectionSession, Stream
from spec_adapters.selection.stop_rules import StopRules
from spec_adapters.store.target_pool import pool_folder
from spec_adapters.vllm import sampling_fix
from spec_adapters.vllm.config import ENV_VAR, ProposerConfig, load_config
from spec_adapters.vllm.telemetry import ProposerStats

__all__ = ["HedgeSpecProposer", "RequestState"]

log = logging.getLogger(__name__)

HEAD, TAIL = 16, 8     # tokens kept to recognise a request's row
IDLE_GAP_S = 5.0       # a gap between propose calls this long is an idle engine, not a step


class StepPrices(NamedTuple):
    """One engine step's prices, the same for every row: ``costs`` ``c(k)``, ``k = 0 .. K``
    (a row's share of the step); ``tau``, the seconds per token to linearise at
    (:meth:`HedgeSpecProposer._tau`); ``draft_s``, a drafted token's price; ``fixed_s``, each
    drafter's price of drafting at all."""

    costs: np.ndarray
    tau: float | None
    draft_s: float
    fixed_s: np.ndarray | float


@dataclass
class RequestState:
    """Everything HedgeSpec keeps for one request; owned by that request alone.

    Size: its :class:`~spec_adapters.selection.session.SelectionSession` (the policy over
    ``N R`` experts, ``R`` stop rules; a round book of at most ``K`` open rounds of ``N K``
    tokens), and ``HEAD + TAIL`` tokens of identity, whatever the request's length; with the
    suffix drafter, also the request's tokens (``history``, the buffer of its last step, 8
    bytes a token), committed to the suffix memory when the state is freed. ``chosen``: a
    bandit's round played last step, fed its accepted length at this one.
    """

    uid: int
    head: np.ndarray
    session: SelectionSession
    rng: np.random.Generator
    chosen: Play | None = None
    n_tokens: int = 0
    tail: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    draft: list[int] = field(default_factory=list)
    idle: int = 0
    history: np.ndarray | None = None

    @property
    def key(self) -> tuple[int, bytes]:
        """What a row continuing this request must end with before its sampled tokens: the
        length and the tail this state last saw (:func:`row_key`)."""
        return self.n_tokens, self.tail.tobytes()

    def fit(self, buf: np.ndarray, sampled: list[int]) -> int:
        """How well a row holding ``buf`` after sampling ``sampled`` continues this request:
        0 not at all; 1 it extends it (same head, same tail, the accepted tokens a prefix of
        its draft); 2 exactly (also the sampled token after the accepted ones is not the
        draft's there: verification rejects a point-mass draft's token only for another one,
        greedy or sampled, so a row that accepted fewer tokens of this draft than its own
        length differs from it there, unless the engine cut the draft)."""
        m, end = len(sampled), self.n_tokens
        if not (len(buf) == end + m  # bytes: cheaper than array_equal (int64 both)
                and buf[:len(self.head)].tobytes() == self.head.tobytes()
                and buf[end - len(self.tail):end].tobytes() == self.tail.tobytes()
                and list(sampled[:-1]) == self.draft[:m - 1]):
            return 0
        return 2 if m - 1 >= len(self.draft) or sampled[m - 1] != self.draft[m - 1] else 1


def row_key(buf: np.ndarray, sampled: list[int]) -> tuple[int, bytes]:
    """The :attr:`RequestState.key` of the states a row holding ``buf`` after sampling
    ``sampled`` can continue: its length before them and its last ``TAIL`` tokens there."""
    end = len(buf) - len(sampled)
    return end, buf[max(0, end - TAIL):end].tobytes()


class HedgeSpecProposer:
    """Per-request online choice of drafter and draft length inside vLLM.

    Parameters
    ----------
    vllm_config : vllm.config.VllmConfig
        Read for ``num_speculative_tokens``, the vocabulary size, ``max_model_len`` and the
        model folder (whose default pool ``"pool": "default"`` loads when it was built).

    Raises
    ------
    ValueError
        Bad settings (see :func:`spec_adapters.vllm.config.load_config`), a pool drafter over
        another vocabulary, ``k`` above ``num_speculative_tokens``, a ``fixed:`` index out of
        range; vLLM reports it at engine start.
    """

    def __init__(self, vllm_config) -> None:
        sampling_fix.install()  # where the plugin entry point is not installed
        spec, model = vllm_config.speculative_config, vllm_config.model_config
        self._setup(load_config(), vocab_size=int(model.get_vocab_size()),
                    max_k=int(spec.num_speculative_tokens),
                    max_model_len=int(model.max_model_len), model_folder=str(model.model))

    @classmethod
    def standalone(cls, config: ProposerConfig, *, vocab_size: int, max_k: int,
                   max_model_len: int, model_folder: str | None = None) -> HedgeSpecProposer:
        """The proposer without a vLLM config (tests, other engines)."""
        obj = cls.__new__(cls)
        obj._setup(config, vocab_size=vocab_size, max_k=max_k, max_model_len=max_model_len,
                   model_folder=model_folder)
        return obj

    def _setup(self, config: ProposerConfig, *, vocab_size: int, max_k: int,
               max_model_len: int, model_folder: str | None) -> None:
        k_max = config.k if config.k is not None else max_k
        if k_max > max_k:
            raise ValueError(f"{ENV_VAR} ({config.source}): k={k_max} exceeds vLLM's "
                             f"num_speculative_tokens={max_k}")
        drafters: list = [PromptLookup(n) for n in config.prompt_lookup]
        self.suffix = SuffixDraft(config.suffix_max_tokens) if config.suffix else None
        if self.suffix is not None:
            drafters.append(self.suffix)
        pool = self._pool(config, model_folder)
        if pool is not None:
            try:
                drafters += load_pool_folder(pool, vocab_size, config.pool_settings)
            except ValueError as err:
                raise ValueError(f"{ENV_VAR} ({config.source}): {err}") from None
        if config.consensus and len(drafters) > 1:
            drafters.append(Consensus(drafters))
        self.config, self.K, self.max_model_len = config, k_max, max_model_len
        self.drafters = drafters
        self.consensus_rows = consensus_rows(drafters)
        self.names = [d.name for d in drafters]
        self._policy_spec = self._resolve_policy(config)
        # a bandit or fixed policy drafts K tokens with its drafter, as published
        full = make_policy(self._policy_spec, len(drafters)).full_information
        self.cost_aware = config.cost_aware and full
        self.rules = StopRules(k_max, config.stop_rules) if self.cost_aware else None
        self.n_experts = len(drafters) * (len(self.rules) if self.rules else 1)
        self.step_time = StepTimeModel(fixed=config.step_costs,
                                       speculation_term=config.drafting_price, refit_every=4)
        self.stream = Stream(len(drafters), k_max, config.prior_rounds,
                             self.n_experts if self._policy_spec == "normalhedge" else None)
        self.stats = ProposerStats(self.names, config.stats)
        self.rate = TokenRate(alpha=0.2)  # the batch's seconds per generated token
        self.step_rng = np.random.default_rng([config.seed, 1])  # exploring steps' coins
        self.quiet = 0.0  # recent decode steps' share without drafts (EMA, the fit's memory)
        self.step_s: float | None = None  # seconds per engine step (EMA)
        self.drafting_s: float | None = None  # every drafter drafting for one row (EMA)
        self.propose_s = np.full(len(drafters), np.nan)  # each drafter's proposal (EMA)
        self.scoring_s: float | None = None  # scoring one evaluated round (EMA)
        self.rest_s: float | None = None  # a step's proposer time outside evaluation (EMA)
        self.rounds = {"played": 0, "evaluated": 0}
        self.states: dict[int, RequestState] = {}
        self._next_uid = 0
        self._last_call: float | None = None
        self._trace = open(config.trace, "a") if config.trace else None  # noqa: SIM115

    @staticmethod
    def _pool(config: ProposerConfig, model_folder: str | None) -> str | None:
        """The pool folder to load: ``config.pool``, or for ``"default"`` the served model's
        pool under ``config.cache_dir`` when it was built (else none, with a warning)."""
        if config.pool != "default" or model_folder is None:
            return None if config.pool == "default" else config.pool
        try:
            folder = pool_folder(model_folder, config.cache_dir)
        except ValueError as err:
            log.warning("HedgeSpec: no default pool (%s); model-free drafters only", err)
            return None
        if not any(folder.glob("ngram-*.npz")):
            log.warning("HedgeSpec: no pool built for %s at %s (run `hedgespec "
                        "train-drafters --target %s`); model-free drafters only", model_folder,
                        folder, model_folder)
            return None
        return str(folder)

    def _resolve_policy(self, config: ProposerConfig) -> str:
        if not config.policy.startswith("fixed:"):
            return config.policy
        i = int(config.policy[6:])
        if i >= len(self.drafters):
            raise ValueError(f"{ENV_VAR} ({config.source}): fixed:{i} is out of range for "
                             f"{len(self.drafters)} drafters {self.names}")
        return config.policy

    def load_model(self, *args, **kwargs) -> None:
        """vLLM's CPU runner calls this with the target model; nothing to load."""

    # ------------------------------------------------------------------ the engine step
    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings=None) -> list[list[int]]:
        """One engine step: feed, draft, choose, per row (see the module docstring).

        Returns one draft per row (``[]``: no draft).
        """
        seconds = self._step_seconds()
        entered, evaluating = time.perf_counter(), self.stats.evaluation_s
        rows, drafted = [], 0
        prefill = False  # a prompt (or a chunk of one) was in the step: not a decode step
        bufs = [np.array(token_ids_cpu[r, :int(num_tokens_no_spec[r])], dtype=np.int64)
                if sampled else None  # a copy: states keep it
                for r, sampled in enumerate(sampled_token_ids)]
        states = self._match(bufs, sampled_token_ids)
        for st, buf, sampled in zip(states, bufs, sampled_token_ids, strict=True):
            if st is None:
                rows.append(None)
                prefill = True
                continue
            prefill |= not st.n_tokens
            drafted += len(st.draft)
            rows.append((st, buf, sampled))
        claimed = {st.uid for st in states if st is not None}
        live = [row for row in rows if row is not None]
        if seconds is not None and live:
            if not prefill:  # prompt tokens cost far less each than decode rows: not fitted
                self.step_time.observe(len(live), drafted, seconds)
            self.rate.observe(seconds, sum(len(sampled) for _st, _buf, sampled in live))
            self.step_s = _ema(self.step_s, seconds)
        prices = self._prices(max(len(live), 1))
        evaluate = self.evaluation_probability(len(live))
        for st, buf, sampled in live:
            self._feed(st, buf, sampled)
        gains = [self._gains(st, prices) for st, _buf, _sampled in live]
        quiet = not self._step_drafts(gains, decode=not prefill)
        made = {st.uid: self._draft(st, buf, prices, evaluate, gain, quiet)
                for (st, buf, _sampled), gain in zip(live, gains, strict=True)}
        out = [[] if row is None else made[row[0].uid][1] for row in rows]
        played = [(drafter, len(draft)) for drafter, draft in made.values()]
        if not prefill and live:
            keep = self.step_time.decay
            self.quiet = keep * self.quiet + (1 - keep) * all(not d for _i, d in made.values())
        self._forget_idle(claimed)
        if live:
            spent = time.perf_counter() - entered
            self.rest_s = _ema(self.rest_s, spent - (self.stats.evaluation_s - evaluating))
            self.stats.step(seconds, spent, played, self.step_time.coefficients())
        return out

    def _step_drafts(self, gains: list[np.ndarray | None], decode: bool) -> bool:
        """May any row of this step draft? Not in an exploring step (while fewer than a share
        ``explore_steps`` of the recent decode steps drafted nothing, that share of them by the
        proposer's own coin, where the step model is learned and the policy cost-aware: the
        fit then sees steps without drafts at the load of the others and can tell the price of
        speculating at all, ``c``, from a plain step's ``a``); otherwise, where every row's
        gains are known, only when their best positive gains together cover ``c``, which the
        step pays once if any row drafts (module docstring, "Abstention at load")."""
        if not self.cost_aware:
            return True
        explore = self.config.explore_steps
        if decode and self.step_time.fixed is None and self.quiet < explore \
                and self.step_rng.random() < explore:
            return False
        if not self.config.drafting_price or any(g is None for g in gains):
            return True
        return step_pays(gains, self.step_time.coefficients()[3])

    def evaluation_probability(self, n_rows: int) -> float:
        """The chance that a round is evaluated with every drafter's draft (module docstring):
        ``min(1, share * step / (n_rows * evaluation))``, an evaluation costing its drafting
        and its scoring, ``share`` what the proposer's other work leaves of its
        ``time_budget``, at most ``feedback_budget`` and at least a quarter of it; 1 until the
        step and the drafting are measured."""
        if self.step_s is None or not self.drafting_s or n_rows < 1:
            return 1.0
        cost = self.drafting_s + (self.scoring_s or 0.0)
        share = self.config.feedback_budget
        if self.rest_s is not None:
            share = max(share / 4, min(share, self.config.time_budget - self.rest_s / self.step_s))
        return min(1.0, share * self.step_s / (n_rows * cost))

    def _step_seconds(self) -> float | None:
        now = time.perf_counter()
        last, self._last_call = self._last_call, now
        if last is None or now - last > IDLE_GAP_S:
            return None
        return now - last

    def _match(self, bufs: list[np.ndarray | None],
               sampled: list[list[int]]) -> list[RequestState | None]:
        """Each row's request state (``None`` for a skipped row), a new one for a row that
        continues none (its first step). Twins (the same prompt, the same answer so far) can
        fit each other's states, so the rows are matched as an assignment: an exact fit
        (:meth:`RequestState.fit`) before a plain one, the rows with fewest exact fits first."""
        live = [r for r, b in enumerate(bufs) if b is not None]
        # a row can only continue a state of its length before its sampled tokens and its
        # tail there (RequestState.fit's first two tests): only those are fitted, not every
        # state per row (twins share a key)
        ending: dict[tuple[int, bytes], list[int]] = {}
        for uid, st in self.states.items():
            ending.setdefault(st.key, []).append(uid)
        fits = {r: {uid: self.states[uid].fit(bufs[r], sampled[r])
                    for uid in ending.get(row_key(bufs[r], sampled[r]), ())}
                for r in live}
        live.sort(key=lambda r: (sum(f == 2 for f in fits[r].values()),
                                 sum(f > 0 for f in fits[r].values())))
        out: list[RequestState | None] = [None] * len(bufs)
        claimed: set[int] = set()
        for r in live:
            free = {uid: f for uid, f in fits[r].items() if f and uid not in claimed}
            out[r] = (self.states[max(free, key=free.get)] if free
                      else self._new_state(bufs[r]))
            claimed.add(out[r].uid)
        return out

    def _new_state(self, buf: np.ndarray) -> RequestState:
        """A request's state at its first step."""
        uid, self._next_uid = self._next_uid, self._next_uid + 1
        session = SelectionSession(  # point masses: rho = gamma
            self._policy(), len(self.drafters), self.K, rules=self.rules,
            loss="time" if self.cost_aware else "eal", stream=self.stream,
            first_position=len(buf))
        st = RequestState(uid, buf[:HEAD].copy(), session,
                          np.random.default_rng([self.config.seed, uid]))
        self.states[uid] = st
        return st

    def _policy(self):
        """A new request's learner: the policy, warm-started from the stream's
        (``prior_rounds``; :meth:`~spec_adapters.selection.session.Stream.policy`)."""
        return self.stream.policy(self._policy_spec, self.n_experts)

    def _forget_idle(self, claimed: set[int]) -> None:
        """Free the states of requests absent for ``idle_steps`` steps (finished ones), their
        tokens going to the suffix memory."""
        for uid in list(self.states):
            st = self.states[uid]
            st.idle = 0 if uid in claimed else st.idle + 1
            if st.idle > self.config.idle_steps:
                if self.suffix is not None and st.history is not None:
                    self.suffix.commit(st.history)
                del self.states[uid]

    # ------------------------------------------------------------------ one request
    def _feed(self, st: RequestState, buf: np.ndarray, sampled: list[int]) -> None:
        """A bandit's last round gets its accepted length (``sampled``: the accepted drafts
        and one more token); every round whose K verified tokens are in ``buf`` is scored and
        fed to the learner."""
        if st.chosen is not None:
            st.session.feed_chosen(st.chosen, bandit_loss(len(sampled) - 1, self.K))
            st.chosen = None
        start = time.perf_counter()
        st.session.record(buf[st.session.book.end:])
        scored = st.session.feed(tau=self._tau)
        for s in scored:
            self.stats.evaluated_round(s.accepted[:, self.K])
        if scored:
            spent = (time.perf_counter() - start) / len(scored)
            self.scoring_s = _ema(self.scoring_s, spent)
            self.stats.evaluation_s += spent * len(scored)

    @property
    def tau(self) -> float | None:
        """The batch's seconds per generated token (:class:`TokenRate`, forgetting 0.2 a
        step); ``None`` before a step is timed."""
        return self.rate.value

    def _tau(self, costs: np.ndarray) -> float | None:
        """The seconds per token the time loss and the gains are linearised at: the batch's
        (EMA), but never above a plain step's share ``costs[0] = a / B + b_R``. The best
        achievable rate is at most plain's, so a realised rate above it (speculation that
        costs more than it saves) would make every draft look more valuable than it is, and
        the more so the more it loses; at plain's rate a draft pays only where its expected
        rate beats not drafting (docs/theory.md, "Beyond the paper")."""
        if self.tau is None or not self.step_time.observed or costs[0] <= 0:
            return self.tau  # (a model pinned at a free plain step bounds nothing)
        return min(self.tau, float(costs[0]))

    def _prices(self, n_rows: int) -> StepPrices:
        """What a draft costs and gains in this step of ``n_rows`` rows, once per step."""
        costs = self.step_time.expert_costs(n_rows, self.K)
        return StepPrices(costs, self._tau(costs), self.step_time.draft_seconds(),
                          self._drafting_price())

    def _drafting_price(self) -> np.ndarray | float:
        """Each drafter's price of drafting at all (``f_i`` of
        :mod:`~spec_adapters.selection.abstention`): its proposal time (EMA; unmeasured: 0),
        a consensus's with its members' (:func:`solo_seconds`); 0 with ``drafting_price``
        off, or with a pinned step model (``step_costs``: the whole price list, no measured
        time mixed into its seconds). The step's price of speculating at all is weighed once
        per step (:meth:`_step_drafts`)."""
        if not self.config.drafting_price or self.step_time.fixed is not None:
            return 0.0
        return solo_seconds(self.drafters, self.propose_s, self.consensus_rows)

    def _draft(self, st: RequestState, buf: np.ndarray, prices: StepPrices, evaluate: float,
               gain: np.ndarray | None, quiet: bool) -> tuple[int | None, list[int]]:
        """``(drafter, draft)``: the played expert's drafter and draft, cut to the length that
        pays at this load (:mod:`spec_adapters.selection.abstention`; empty: it abstains). With
        probability ``evaluate`` (full-information policies; times ``probe`` where no expert
        of the request pays) every drafter's draft is made too, kept as the round's
        counterfactuals, else the round is censored; a request that abstains and is not scored
        plays no round at all (drafter ``None``). A bandit policy's round keeps its own draft
        only."""
        K, n, session = self.K, len(buf), st.session
        # no expert of this request pays, or the step drafts nothing (_step_drafts)
        abstain = quiet or (gain is not None and gain.max() <= 0)
        full = session.full_information and \
            st.rng.random() < evaluate * (self.config.probe if abstain else 1.0)
        i = None
        st.draft = []
        if full or not abstain:
            play = session.play(st.rng)
            i, r = play.drafter, play.option
            start = time.perf_counter()
            pays = not quiet and (gain is None or gain[i].max() > 0)  # a length of i pays
            drafts, confidence, seconds = propose_all(
                self.drafters, buf, K, None if full else (i,) if pays else (),
                self.consensus_rows)
            ran = ~np.isnan(seconds)
            old = self.propose_s[ran]
            self.propose_s[ran] = np.where(np.isnan(old), seconds[ran],
                                           _ema(old, seconds[ran]))
            # every drafter's rule lengths where the round is scored, else the played rule's
            lengths = self.rules.lengths(confidence) if self.rules and full else None
            k = K if not self.rules else int(lengths[i, r]) if full else \
                self.rules.length(confidence[i], r)
            if gain is not None:
                k = paying_k(gain[i], k)
            k = 0 if quiet else max(0, min(k, self.max_model_len - n - 1))
            self.rounds["played"] += 1
            if full:
                spent = time.perf_counter() - start
                self.drafting_s = _ema(self.drafting_s, spent)
                self.stats.evaluation_s += spent
                self.rounds["evaluated"] += 1
            if full:
                session.open(play, n, drafts, rule_lengths=lengths, costs=prices.costs)
            elif session.full_information:
                session.censor(play)
            else:  # a bandit: fed its accepted length at the next step
                st.chosen = play
            chosen = drafts[i, :k]
            st.draft = [int(t) for t in chosen[chosen >= 0]]
        st.n_tokens, st.tail = n, buf[-TAIL:].copy()
        if self.suffix is not None:
            st.history = buf
        if self._trace is not None:
            played_gain = None if gain is None or i is None else float(gain[i, len(st.draft)])
            self._write_trace(st, i, len(st.draft), full, prices, played_gain)
        return i, st.draft

    def _gains(self, st: RequestState, prices: StepPrices) -> np.ndarray | None:
        """Every expert's expected gain at this load (:func:`expected_gains`), ``None`` where
        the cost-aware abstention does not apply (a bandit, ``cost_aware`` off) or nothing is
        known yet (no step timed, no round scored)."""
        if not self.cost_aware or self.tau is None:
            return None
        return st.session.gains(prices.tau, prices.draft_s, prices.fixed_s)

    def _write_trace(self, st: RequestState, drafter: int | None, k: int, evaluated: bool,
                     prices: StepPrices, gain: float | None) -> None:
        """One line per request per step: what was played and what it was expected to gain
        (``gain_ms``, the played expert's at the played length; ``None`` without an estimate),
        at which prices, and the step's clock (``t``, seconds, the same for every row of a
        step) so that realised step times can be read back."""
        by_drafter = st.session.weights
        ms = None if prices.tau is None else round(1e3 * prices.tau, 3)
        self._trace.write(json.dumps({
            "req": st.uid, "head": st.head[:8].tolist(), "n": st.n_tokens,
            "live": len(self.states), "t": self._last_call,
            "drafter": None if drafter is None else self.names[drafter], "k": k,
            "evaluated": evaluated,
            "costs_ms": np.round(1e3 * prices.costs, 3).tolist(),
            "tau_ms": None if self.tau is None else round(1e3 * self.tau, 3),
            "tau_used_ms": ms, "draft_ms": round(1e3 * prices.draft_s, 3),
            # unrounded: a draft is played only where its gain is positive, however small
            "gain_ms": None if gain is None else 1e3 * gain,
            "weights": dict(zip(self.names, np.round(by_drafter, 4).tolist(), strict=True)),
        }) + "\n")
        self._trace.flush()


def _ema(old: float | None, new: float, keep: float = 0.8) -> float:
    """Exponential moving average (``new`` alone at the start)."""
    return new if old is None else keep * old + (1.0 - keep) * new
