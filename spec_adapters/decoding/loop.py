"""The HedgeSpec round loop, shared by every proposal form (chain, tree).

One round (HedgeSpec paper, Figure 1; ``docs/architecture.md``):

1. **select**: the policy picks drafter ``i`` (``round_id, i = policy.play(rng)``), or with
   ``cost_aware=True`` an expert ``(i, k)``: drafter ``i`` drafting ``k = 0 .. K`` tokens
   (:mod:`spec_adapters.selection.experts`; ``k = 0`` is a plain target step);
2. **draft**: the :class:`DraftScheme` drafts with ``i`` (a chain of ``k`` tokens, a tree);
3. **verify**: the scheme scores the draft with one target pass and its lossless acceptance
   rule; the loop cuts the new tokens after EOS or at the length limit and streams them;
4. **evaluate**: the scheme appends the verified tokens to every drafter and returns ``gamma``
   and ``rho`` per drafter and position, and where each abstains (only for full-information
   policies);
5. **update**: rounds whose window of ``K`` positions is verified are fed their loss vector
   (:class:`~spec_adapters.selection.session.SelectionSession`, the session every engine
   drives; cost-aware: every ``(i, k)``'s time loss
   from the window and the step costs measured online, paying for the drafts ``i`` would have
   made before abstaining); a bandit or fixed policy is fed the
   chosen drafter's loss right away (MetaSD-UCB: from the block's gamma that the scheme's
   ``verify`` computes, :attr:`Verdict.block_gamma`); rounds still open when generation stops,
   or when a step raises, are censored.

:class:`RoundLoop` is that loop and everything the two decoders share (input checks, policy,
round table, EOS / length cut, streamer, ``on_round`` callback, timings, stats, the oracle).
A scheme supplies only what differs: :mod:`spec_adapters.decoding.chain` (single draft) and
:mod:`spec_adapters.eagle.decoder` (EAGLE trees).

Losslessness: each scheme's acceptance rule reproduces the target's warped distribution for any
draft, and the drafter choice depends only on the past, so the output is distributed exactly as
the target's (greedy: identical to the target's greedy output).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.settings import PolicySettings
from spec_adapters.hf.target import TargetModel
from spec_adapters.selection.costs import StepCosts
from spec_adapters.selection.experts import LOSSES
from spec_adapters.selection.policies import (
    FixedPolicy,
    bandit_loss,
    block_loss,
    feedback_of,
    make_policy,
)
from spec_adapters.selection.session import (
    Play,
    RoundInfo,
    SelectionSession,
    options_per_drafter,
)

__all__ = ["DraftScheme", "GenerateOutput", "Query", "RoundInfo", "RoundLoop", "Verdict",
           "check_eos", "check_seed"]

STEPS = ("prefill", "select", "draft", "verify", "eval", "update")
MAX_SEED = 2**63 - 1


@dataclass
class GenerateOutput:
    """Result of :meth:`RoundLoop.generate`.

    Attributes
    ----------
    sequences : torch.LongTensor
        ``[1, prompt_len + new_tokens]``: the prompt followed by the generated tokens.
    stats : dict
        ``target_calls`` (verification passes; the prefill is not counted), ``new_tokens``,
        ``mean_accepted_tokens`` (= new_tokens / target_calls, the bonus token included),
        ``chosen`` (drafter index per round), ``accepted`` (drafts accepted per round, 0..K),
        ``drafted`` (tokens drafted per round) and ``lengths`` (the draft length chosen per
        round: ``K``, or the cost-aware expert's ``k``; ``drafted`` is at most it),
        ``weights`` (per round, before the choice: the base learner's distribution),
        ``losses`` (``(round_id, loss vector)`` fed to full-information policies),
        ``censored`` (rounds censored at the end), ``gamma`` / ``rho`` (``(N, new_tokens)``
        float64 per drafter and generated position, ``NaN`` in a consensus slot's row, which
        is scored per window; ``None`` for bandit / fixed policies),
        timings in seconds: ``prefill_seconds``, ``select_seconds``, ``draft_seconds``,
        ``verify_seconds``, ``eval_seconds``, ``update_seconds``, ``total_seconds``;
        and ``policy``, ``drafters``, ``draft_length``. The oracle adds ``oracle_mat``
        (MAT of each fixed drafter), ``oracle_choice`` and ``oracle_total_seconds``; the
        tree decoder adds ``tree_nodes`` (drafted nodes per round) and ``tree``.
    """

    sequences: torch.LongTensor
    stats: dict[str, Any]


@dataclass
class Verdict:
    """Outcome of a scheme's verification step.

    Attributes
    ----------
    accepted : int
        Drafts accepted (chain: ``0 .. K``; tree: nodes on the accepted path).
    tokens : list of int
        The candidate new tokens: accepted drafts, then the resampled / bonus token.
    p : torch.Tensor
        ``(len(tokens), V)`` warped target distributions at those positions.
    features : torch.Tensor or None
        ``(len(tokens), F*H)`` target features at those positions when the scheme's drafters
        read them (EAGLE heads), else ``None``.
    drafted : int or None
        Tokens (nodes) the target verified beside the last one; ``None``: the round's ``k``.
    block_gamma : float or None
        Only when ``Query.block_gamma``: the chosen drafter's mean ``gamma_j = sum_x min(p_j,
        q_j)`` over the round's window of ``K`` positions (a position it did not draft counts
        0), MetaSD-UCB's feedback; else ``None``.
    """

    accepted: int
    tokens: list[int]
    p: torch.Tensor
    features: torch.Tensor | None = None
    drafted: int | None = None
    block_gamma: float | None = None

    def head(self, m: int) -> Verdict:
        """The first ``m`` tokens (the loop's EOS / length cut), rows of ``p`` and features."""
        feats = None if self.features is None else self.features[:m]
        return Verdict(self.accepted, self.tokens[:m], self.p[:m], feats, self.drafted,
                       self.block_gamma)


@dataclass
class Query:
    """State of one ``generate`` call. Schemes read ``seq``, ``sampling``, ``gen`` and
    ``coupled`` (a coupled query's drafts also stop before ``limit`` and any ``eos``)."""

    seq: list[int]  # the verified sequence, prompt included
    prompt_len: int
    limit: int  # the sequence stops growing at this length
    eos: frozenset[int]
    sampling: SamplingConfig
    gen: torch.Generator
    rng: np.random.Generator
    session: SelectionSession
    streamer: Any = None
    on_round: Callable[[RoundInfo], None] | None = None
    block_gamma: bool = False  # the scheme's verify fills Verdict.block_gamma (MetaSD-UCB)
    # generate(generator=...), sampled: point-mass drafts, verified by the coupled rule with
    # ``gen``'s draws, so the output is plain decoding's for the same generator state
    coupled: bool = False
    done: bool = False
    rounds: list[RoundInfo] = field(default_factory=list)
    losses: list[tuple[int, list[float]]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEPS, 0.0))
    last: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEPS, 0.0))

    @contextmanager
    def clock(self, step: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``seconds[step]`` (``last[step]``: this
        round's)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.last[step] = time.perf_counter() - t
            self.seconds[step] += self.last[step]


class DraftScheme(Protocol):
    """What differs between proposal forms: how to draft and verify, and how to evaluate.

    Attributes
    ----------
    target : TargetModel
        The target; the scheme owns its cache (prefill, verification, crop / compaction).
    names : list of str
        One name per drafter slot.
    draft_length : int
        ``K``, the number of positions one round drafts (chain length, tree depth).
    computes_block_gamma : bool, optional
        ``True`` if ``verify`` fills :attr:`Verdict.block_gamma` when ``Query.block_gamma``
        (needed by MetaSD-UCB); absent means ``False``.
    couples_seeds : bool, optional
        ``True`` if the scheme honours ``Query.coupled`` (a sampled request drawing from its
        own generator drafts point masses and verifies them by the coupled rule); absent
        means ``False``: ``generate(generator=...)`` is refused.
    consensus : dict, optional
        ``{slot: member slots}`` of consensus slots, scored per window from the members'
        argmaxes (``evaluate`` then also returns ``argmax, p_argmax``;
        :class:`~spec_adapters.selection.book.RoundBook`); absent means none.
    """

    target: TargetModel
    names: list[str]
    draft_length: int

    def start(self, prompt: torch.LongTensor) -> None:
        """A new query: prefill the target and every drafter with the 1-D prompt."""

    def draft(self, i: int, q: Query, k: int) -> Any:
        """Drafter ``i`` drafts up to ``k <= draft_length`` tokens (a tree: up to depth ``k``) from
        ``q.seq``, no deeper than the target's context allows; ``k = 0``: no draft."""

    def verify(self, draft: Any, q: Query) -> Verdict:
        """One target pass over ``draft`` and the acceptance rule; the target's cache keeps
        the accepted path."""

    def evaluate(self, verdict: Verdict, q: Query, counterfactual: bool
                 ) -> tuple[torch.Tensor, ...] | None:
        """Append ``verdict.tokens`` (already in ``q.seq``) to the drafters that track the
        context; with ``counterfactual``, return ``gamma, rho`` ``(N, m)`` at those tokens and,
        optionally, ``proposes`` ``(N, m)`` bool (``False`` where a drafter abstains;
        :func:`~spec_adapters.core.position_stats.position_stats`), for
        :meth:`~spec_adapters.selection.session.SelectionSession.record`."""

    def stats(self) -> dict[str, Any]:
        """Scheme-specific stats of the query that just ended (may be empty)."""


def check_seed(seed) -> int | None:
    """``seed`` must be ``None`` or an integer in ``[0, 2**63 - 1]``; returns it as ``int``."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) \
            or not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"seed must be None or an integer in [0, 2**63 - 1], got {seed!r}")
    return int(seed)


def check_eos(eos_token_id, vocab_size: int) -> frozenset[int]:
    """The EOS ids as a set: an integer, or a list / tuple / 1-D tensor or array of them, each in
    ``[0, vocab_size)``; ``None`` or an empty list: no EOS."""
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, torch.Tensor | np.ndarray):
        if isinstance(eos_token_id, torch.Tensor):
            integer = not (eos_token_id.is_floating_point() or eos_token_id.is_complex()
                           or eos_token_id.dtype == torch.bool)
        else:
            integer = eos_token_id.dtype.kind in "iu"
        if not integer:
            raise ValueError(f"eos_token_id must hold integer token ids, got dtype "
                             f"{eos_token_id.dtype}")
        ids = eos_token_id.reshape(-1).tolist()
    elif isinstance(eos_token_id, list | tuple):
        ids = list(eos_token_id)
    else:
        ids = [eos_token_id]
    for e in ids:
        if isinstance(e, bool) or not isinstance(e, int | np.integer) \
                or not 0 <= int(e) < vocab_size:
            raise ValueError(f"eos_token_id must be a token id in [0, {vocab_size}) or a list "
                             f"of them, got {eos_token_id!r}")
    return frozenset(int(e) for e in ids)


class RoundLoop:
    """Lossless speculative decoding with online drafter selection over a :class:`DraftScheme`.

    Parameters
    ----------
    scheme : DraftScheme
        Drafting and verification (:class:`spec_adapters.decoding.chain.ChainScheme`,
        :class:`spec_adapters.eagle.decoder.TreeScheme`).
    settings : PolicySettings, default ``PolicySettings()``
        The policy, its loss, delay reduction, state carrying and cost awareness.

    Raises
    ------
    ValueError
        Unknown loss, policy or delay; ``cost_aware`` with a bandit or fixed policy;
        ``"metasd-ucb"`` with a scheme that does not compute the block's gamma (trees).
    """

    def __init__(self, scheme: DraftScheme, settings: PolicySettings | None = None) -> None:
        settings = PolicySettings() if settings is None else settings
        policy, loss, delay = settings.policy, settings.loss, settings.delay
        carry_state, cost_aware = settings.carry_state, settings.cost_aware
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; expected one of {LOSSES}")
        if not isinstance(cost_aware, bool):
            raise ValueError(f"cost_aware must be True or False, got {cost_aware!r}")
        self.scheme, self.target = scheme, scheme.target
        self.draft_length, self.loss, self.carry_state = scheme.draft_length, loss, carry_state
        self.cost_aware = cost_aware
        self.oracle = isinstance(policy, str) and policy.strip().lower() == "oracle"
        self.policy_name = policy if isinstance(policy, str) else type(policy).__name__
        n = len(scheme.names)
        self.options = options_per_drafter(self.draft_length, "time" if cost_aware else loss,
                                           None)
        self.policy = None if self.oracle else make_policy(policy, n * self.options, delay)
        if cost_aware and self.policy is not None and not self.policy.full_information:
            raise ValueError(f"cost_aware=True needs a full-information policy (normalhedge, "
                             f"hedge, adahedge), got {self.policy_name!r}")
        self.costs = StepCosts(n, self.draft_length) if cost_aware else None
        self.block_gamma = feedback_of(policy) == "block_gamma"
        if self.block_gamma and not getattr(scheme, "computes_block_gamma", False):
            raise ValueError(f"policy {self.policy_name!r} learns from the chosen drafter's "
                             f"block gamma, which {type(scheme).__name__} does not compute; "
                             "use the single-draft decoder (spec_adapters.decoding.chain)")

    # ------------------------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------------------------
    def generate(self, input_ids, max_new_tokens: int = 128, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int | None = None, seed: int | None = None,
                 eos_token_id: int | list[int] | None = None, streamer=None,
                 on_round: Callable[[RoundInfo], None] | None = None,
                 generator: torch.Generator | None = None) -> GenerateOutput:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (shape ``[1, L]``).

        Sampling parameters warp both the target and the drafters (temperature 0 = greedy).
        ``seed`` seeds the torch generator (drafting, acceptance) and the policy's numpy
        generator, so a sampled generation is reproducible. ``generator`` instead (e.g.
        ``torch.default_generator``) makes a sampled generation *plain decoding's sample* from
        that generator: drafts are point masses (each drafter's argmax) verified by the coupled
        rule (:func:`~spec_adapters.core.sampling.coupled_accept`), whose one draw per emitted
        position is ``torch.multinomial(p, 1, generator=generator)``, transformers'
        ``generate(do_sample=True)`` draw; so the tokens equal ``generate``'s from the same
        generator state (the target's rows agree up to float rounding, as greedy) and the
        generator ends where ``generate`` leaves it. ``eos_token_id`` defaults to the target's
        ``generation_config.eos_token_id`` (``[]``: none); generation stops after it.
        The total length never exceeds the target's context. ``streamer`` gets ``put(prompt)``,
        then ``put(tokens)`` once per round, then ``end()`` (transformers' streamer protocol).
        ``on_round(info)`` is called once per round with a :class:`RoundInfo`. The oracle
        replays the chosen run to both after all runs.

        If a step raises (a drafter's ``propose`` failing, say), the exception propagates after
        the rounds of this call still open are censored, so the policy holds no stale rounds
        and the decoder stays usable.

        Raises
        ------
        ValueError
            ``input_ids`` not a 2-D integer tensor, batch size > 1 (not supported yet), empty
            prompt, token ids out of range, prompt longer than the target's context,
            ``max_new_tokens < 0``, ``temperature < 0``, bad ``top_p`` / ``top_k``, ``seed``
            or ``eos_token_id``, ``on_round`` not callable; ``generator`` not a torch
            generator, on another device than the target, given with ``seed``, with the
            oracle or with a scheme that does not couple (draft trees); a drafter's proposal
            malformed.
        """
        prompt = self._check_prompt(input_ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) \
                or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        sampling = SamplingConfig(temperature, top_p, top_k)
        seed = check_seed(seed)
        self._check_generator(generator, seed)
        if eos_token_id is None:
            config = getattr(self.target.model, "generation_config", None)
            eos_token_id = getattr(config, "eos_token_id", None)
        eos = check_eos(eos_token_id, self.target.vocab_size)
        if on_round is not None and not callable(on_round):
            raise ValueError(f"on_round must be callable, got {type(on_round).__name__}")
        limit = prompt.numel() + int(max_new_tokens)
        if self.target.max_length is not None:
            limit = min(limit, self.target.max_length)
        coupled = generator is not None and not sampling.greedy

        def query(policy, streamer, on_round) -> Query:
            session = SelectionSession(
                policy, len(self.scheme.names), self.draft_length,
                loss="time" if self.cost_aware else self.loss, corrected=not sampling.greedy,
                first_position=prompt.numel(), consensus=getattr(self.scheme, "consensus", None))
            gen = generator
            if gen is None:
                gen = torch.Generator(device=self.target.device)
                if seed is None:
                    gen.seed()
                else:
                    gen.manual_seed(seed)
            return Query(seq=prompt.tolist(), prompt_len=prompt.numel(), limit=limit, eos=eos,
                         sampling=sampling, gen=gen, rng=np.random.default_rng(seed),
                         session=session, streamer=streamer, on_round=on_round,
                         block_gamma=self.block_gamma, coupled=coupled,
                         done=prompt.numel() >= limit)

        if self.oracle:
            n = len(self.scheme.names)
            # drafter i, K tokens (its last option)
            runs = [self._decode(query(FixedPolicy(n * self.options, (i + 1) * self.options - 1),
                                       None, None)) for i in range(n)]
            return self._best_of(runs, prompt, streamer, on_round)
        if not self.carry_state:
            self.policy.reset()
        out, _ = self._decode(query(self.policy, streamer, on_round))
        return out

    def _check_generator(self, generator, seed: int | None) -> None:
        """``generator`` is ``None`` or a torch generator on the target's device, not given
        with ``seed`` (two sources of the same draws), with the oracle (whose runs would each
        advance it) or with a scheme that cannot verify by the coupled rule."""
        if generator is None:
            return
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got "
                             f"{type(generator).__name__}")
        if seed is not None:
            raise ValueError("pass seed or generator, not both: each names the request's draws")
        if self.oracle:
            raise ValueError("the oracle decodes once per drafter, each run drawing afresh: "
                             "pass seed, not generator")
        if not getattr(self.scheme, "couples_seeds", False):
            raise ValueError(f"{type(self.scheme).__name__} does not verify by the coupled rule "
                             "(plain decoding's draws): pass seed, not generator")
        if generator.device.type != torch.device(self.target.device).type:
            raise ValueError(f"generator is on {generator.device}, the target on "
                             f"{self.target.device}")

    # ------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------
    def _decode(self, q: Query) -> tuple[GenerateOutput, list[RoundInfo]]:
        """Rounds until EOS or the length limit; the output and the rounds (for the oracle)."""
        start = time.perf_counter()
        full = q.session.full_information  # does the policy need every drafter's loss?
        try:
            with q.clock("prefill"):
                self._start(q)
            while not q.done:
                with q.clock("select"):
                    play, k, weights = self._select(full, q)                          # 1.
                with q.clock("draft"):
                    draft = self.scheme.draft(play.drafter, q, k)                     # 2.
                with q.clock("verify"):
                    verdict = self._commit(self.scheme.verify(draft, q), q)           # 3.
                with q.clock("eval"):
                    stats = self.scheme.evaluate(verdict, q, full)                    # 4.
                with q.clock("update"):
                    self._update(full, play, verdict, stats, q)                       # 5.
                self._report(play.drafter, k, verdict, weights, q)
        finally:  # normal end or a step raised: no round of this call stays open
            with q.clock("update"):
                censored = q.session.close()
        if q.streamer is not None:
            q.streamer.end()
        return self._output(q, full, censored, time.perf_counter() - start), q.rounds

    def _start(self, q: Query) -> None:
        """Prefill the target and every drafter with the prompt."""
        prompt = torch.tensor(q.seq[:q.prompt_len], dtype=torch.long)
        self.scheme.start(prompt)
        if q.streamer is not None:
            q.streamer.put(prompt.view(1, -1))

    def _select(self, full: bool, q: Query) -> tuple[Play, int, tuple[float, ...]]:
        """Step 1: the policy picks a drafter and a draft length (``K`` unless cost-aware);
        the round's window is positions len(seq)..+K-1. Also the learner's weights per
        drafter before the choice."""
        weights = tuple(q.session.weights.tolist())
        play = q.session.play(q.rng)
        if full:
            q.session.open(play, len(q.seq))
        return play, play.option if self.cost_aware else self.draft_length, weights

    @staticmethod
    def _commit(verdict: Verdict, q: Query) -> Verdict:
        """Append the verified tokens to the sequence, cut after EOS or at the length limit."""
        eos = next((j for j, tok in enumerate(verdict.tokens) if tok in q.eos), None)
        m = min(len(verdict.tokens) if eos is None else eos + 1, q.limit - len(q.seq))
        q.done = eos is not None or len(q.seq) + m >= q.limit
        verdict = verdict.head(m)
        q.seq.extend(verdict.tokens)
        if q.streamer is not None:
            q.streamer.put(torch.tensor(verdict.tokens))
        return verdict

    def _update(self, full: bool, play: Play, verdict: Verdict, stats, q: Query) -> None:
        """Step 5: feed the losses of every round whose window is complete (full information:
        per drafter, the paper's ``loss``, or cost-aware per ``(drafter, k)``, the time per
        token Dinkelbach-linearised around the time per token achieved so far, expert
        ``(i, k)`` paying for the ``min(k, lengths_i)`` tokens drafter ``i`` would have
        drafted), or the chosen drafter's loss now (bandit / fixed; MetaSD-UCB: from the block
        gamma)."""
        if not full:
            q.session.feed_chosen(play, block_loss(verdict.block_gamma) if q.block_gamma
                                  else bandit_loss(verdict.accepted, self.draft_length))
            return
        q.session.record(verdict.tokens, *stats)
        costs = self.costs
        for scored in q.session.feed(None if costs is None else costs.round_costs,
                                     None if costs is None else costs.time_per_token):
            q.losses.append((scored.round_id, scored.losses.tolist()))

    def _report(self, i: int, k: int, verdict: Verdict, weights: tuple[float, ...], q: Query
                ) -> None:
        drafted = k if verdict.drafted is None else int(verdict.drafted)
        if self.costs is not None:  # what this round cost, for the next losses
            self.costs.observe_target(drafted + 1, q.last["verify"])
            if drafted:
                self.costs.observe_draft(i, drafted, q.last["draft"])
            self.costs.observe_overhead(q.last["select"] + q.last["eval"] + q.last["update"])
            self.costs.observe_round(sum(q.last[s] for s in STEPS[1:]), len(verdict.tokens))
        info = RoundInfo(index=len(q.rounds), drafter=i, drafter_name=self.scheme.names[i],
                         accepted=int(verdict.accepted), drafted=drafted,
                         tokens=tuple(verdict.tokens), weights=weights, length=int(k))
        q.rounds.append(info)
        if q.on_round is not None:
            q.on_round(info)

    # ------------------------------------------------------------------------------------
    # plumbing
    # ------------------------------------------------------------------------------------
    def _output(self, q: Query, full: bool, censored: list[int], total: float
                ) -> GenerateOutput:
        new_tokens = len(q.seq) - q.prompt_len
        calls = len(q.rounds)
        stats = {
            "target_calls": calls,
            "new_tokens": new_tokens,
            "mean_accepted_tokens": new_tokens / calls if calls else 0.0,
            "chosen": [r.drafter for r in q.rounds],
            "accepted": [r.accepted for r in q.rounds],
            "drafted": [r.drafted for r in q.rounds],
            "lengths": [r.length for r in q.rounds],
            "weights": [list(r.weights) for r in q.rounds],
            "losses": q.losses,
            "censored": len(censored),
            "gamma": torch.from_numpy(q.session.book.gamma) if full else None,
            "rho": torch.from_numpy(q.session.book.rho) if full else None,
            **{f"{k}_seconds": v for k, v in q.seconds.items()},
            "total_seconds": total,
            "policy": self.policy_name,
            "drafters": list(self.scheme.names),
            "draft_length": self.draft_length,
            "cost_aware": self.cost_aware,
            **({"step_costs": self.costs.state_dict()} if self.costs is not None else {}),
            **self.scheme.stats(),
        }
        return GenerateOutput(sequences=torch.tensor([q.seq], dtype=torch.long), stats=stats)

    @staticmethod
    def _best_of(runs, prompt, streamer, on_round) -> GenerateOutput:
        """The oracle: the fixed-drafter run with the best MAT, replayed to the listeners."""
        mats = [out.stats["mean_accepted_tokens"] for out, _ in runs]
        best = int(np.argmax(mats))
        out, rounds = runs[best]
        out.stats.update(policy="oracle", oracle_mat=mats, oracle_choice=best,
                         oracle_total_seconds=sum(r.stats["total_seconds"] for r, _ in runs))
        if streamer is not None:
            streamer.put(prompt.view(1, -1))
            streamer.put(out.sequences[0, prompt.numel():])
            streamer.end()
        if on_round is not None:
            for info in rounds:
                on_round(info)
        return out

    def _check_prompt(self, input_ids) -> torch.LongTensor:
        if not isinstance(input_ids, torch.Tensor):
            raise ValueError(f"input_ids must be a torch.LongTensor of shape [1, L], got "
                             f"{type(input_ids).__name__}")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be 2-D [batch, length], got shape "
                             f"{tuple(input_ids.shape)}")
        if input_ids.shape[0] != 1:
            raise ValueError(f"input_ids has batch size {input_ids.shape[0]}: batch > 1 is not "
                             "supported yet; call generate once per prompt")
        if input_ids.is_floating_point() or input_ids.is_complex() or \
                input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        if input_ids.shape[1] == 0:
            raise ValueError("input_ids is empty: the prompt needs at least one token")
        prompt = input_ids[0].long().cpu()
        if int(prompt.min()) < 0 or int(prompt.max()) >= self.target.vocab_size:
            raise ValueError(f"input_ids has token ids outside [0, {self.target.vocab_size})")
        self.target.check_prompt_length(prompt.numel())
        return prompt
