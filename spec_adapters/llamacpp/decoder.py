"""HedgeSpec on llama.cpp: the round loop over a GGUF target and the selection core.

One round (the transformers loop's, with point-mass drafters; every decision is
:mod:`spec_adapters.selection`'s)::

    the learner plays an expert (drafter i, stop rule r; the rule k = 0: a plain step)
    every drafter drafts K tokens with confidences from the verified sequence (the round's
                                   counterfactuals; skipped but for a probe share when none pays)
    drafter i's draft is cut by rule r (its running confidence above r's threshold, at most
    r's cap: :mod:`spec_adapters.selection.stop_rules`), then to the longest draft whose
    expected accepted tokens pay for its rows (nothing pays: k = 0)
    one llama_decode over [last] + draft_i[:k], logits for those rows (after the prompt, which
    is prefilled as llama.cpp prefills it: the draft alone, the prompt's logits known)
    accept: greedy = the draft's prefix that matches the argmax; sampled = the coupled rule
            (each position's token drawn as plain_generate draws it, one uniform from the
            request's seeded generator; a draft kept while it equals that token: accepted
            with probability p(d), as by the point-mass rule, and the output is plain
            decoding's for the same seed), on rows warped with llama.cpp's sampling chain:
            top-k, top-p on the softmax of the raw logits, then the temperature over what is
            kept (common/sampling.cpp's order; typical and min-p off)
    the cache keeps [last] + the accepted drafts; the next token is the round's last
    the request's SelectionSession (:mod:`spec_adapters.selection.session`, the one every
    engine drives) scores every drafter's draft against the verified tokens -> window losses
    (the time loss of each (drafter, k), step costs measured online; a rule's loss is that
    of its length this round) -> the learner

A finished request is committed to the drafters that keep a memory of earlier requests (the
suffix drafter), as the vLLM proposer does.

Priced before it learns. At load the decoder times its target's own decode of ``1 .. K + 1``
rows (:meth:`~spec_adapters.llamacpp.target.GGUFTarget.row_prices`, about a second): the
learner's round costs ``c_i(k)`` start from them instead of from nothing, and the rounds are
cut by :mod:`spec_adapters.selection.abstention`: drafter ``i``'s ``k``-token draft is played
only where its expected accepted tokens ``A_i(k)`` (counterfactual, this request's shrunk to
the stream's with the weight of ``prior_rounds`` rounds) pay what its rows add to a plain step
and the drafting a played round runs (every drafter's proposal, timed),
``tau A_i(k) > T(1 + D_i(k)) - T(1) + sum_j D_j`` (``tau``: seconds per token so far). Before
any round is
scored ``k = 0``; a stream none of whose drafts pays runs plain steps and drafts its
counterfactuals on a ``probe`` share of rounds only (it must see a request turn repetitive).
On the shipped Q4_1 file a row costs most of a step here (docs/benchmark.md), so the learner
drafts only where nearly every drafted token is accepted.

Lossless: greedy output is the argmax of the target's logits row by row, sampled output follows
the warped target law whatever the draft and equals :func:`plain_generate`'s for the same seed
(``python -m proofs_check --only seeded``). Against llama.cpp decoding one token per
``llama_decode``: with a quantized model (Q4_1, the default target's) a row's logits are the
same bits alone or in a round's batch (tested) while the cache spans fewer than 512 cells;
llama.cpp pads the cache it attends over to multiples of 256 and, from 512 on, splits a lone
row's attention over the cache across threads (ggml-cpu ``use_split_kv_path``), so past 256
cached tokens a one-token loop and any batched verifier, llama.cpp's own speculation included,
differ in the last bits and a near-tie may flip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_adapters.core.coupled import coupled_walk
from spec_adapters.drafters.point import PointDrafter, consensus_rows, propose_all
from spec_adapters.llamacpp.sampling_chain import draw_token
from spec_adapters.llamacpp.target import GGUFTarget
from spec_adapters.selection import (
    RoundInfo,
    SelectionSession,
    StepCosts,
    StopRules,
    Stream,
    make_policy,
)
from spec_adapters.selection.abstention import paying_k
from spec_adapters.selection.stop_rules import THRESHOLDS

__all__ = ["LlamaCppDecoder", "LlamaOutput", "plain_generate"]


@dataclass
class LlamaOutput:
    """``tokens``: the generated tokens (prompt excluded); ``stats``: ``target_calls``,
    ``new_tokens``, ``mean_accepted_tokens``, per round ``chosen`` / ``lengths`` /
    ``accepted`` (a round the learner does not play reports its last drafter in ``chosen``),
    seconds per part (``prefill``, ``target``: the rounds' decodes, ``draft``, ``select``,
    ``update``), ``non_target_share`` (the share of the whole that is not a
    ``llama_decode``), ``prompt_reused`` (the prompt's tokens the target's prompt cache
    held), ``row_ms`` (a decode of ``1 .. K + 1`` rows, as priced at load),
    ``rows_invariant`` (the target's rows alone = batched, checked at load for rounds of up to
    ``K + 1`` rows: greedy output is then llama.cpp's one-token greedy output), and
    per drafter ``counterfactual_accepted``: the mean tokens its
    ``K``-token draft would have had accepted over the ``evaluated_rounds`` (its draft scored
    against the verified tokens whether or not it drafted: which drafter to keep or train)."""

    tokens: list[int]
    stats: dict = field(default_factory=dict)


class LlamaCppDecoder:
    """Lossless speculative decoding of a GGUF model with the drafter and the draft length
    learned per step.

    Parameters
    ----------
    target : GGUFTarget
    drafters : list of PointDrafter
        Model-free point-mass drafters (:mod:`spec_adapters.drafters.point`); a
        drafter with a ``vocab_size`` must share the target's.
    draft_length : int, default 4
        ``K``: the longest draft.
    stop_rules : sequence of float, default (0, 0.25, 0.5, 0.75)
        The stop rules' confidence thresholds (:class:`~spec_adapters.selection.StopRules`);
        the learner's experts are ``(drafter, rule)``; ``(0,)``: the fixed lengths
        ``k = 0 .. K`` alone.
    policy : str, default "normalhedge"
        A full-information policy of :func:`spec_adapters.selection.make_policy`.
    carry_state : bool, default True
        Keep what the learner learnt across ``generate`` calls (a stream of requests: a short
        request does not start exploring ``N R`` experts from uniform); ``False``
        resets it per call, as the paper does per query.
    row_seconds : sequence of K + 1 floats, optional
        Seconds of one decode of ``1 .. K + 1`` rows; default: measured at load
        (:meth:`GGUFTarget.row_prices`). Kept as :attr:`row_seconds`.
    prior_rounds : int, default 8
        Weight, in rounds, of the stream's acceptance in a request's (module docstring).
    probe : float, default 0.1
        Share of the rounds where no draft pays that still draft every drafter's
        counterfactual.

    Raises
    ------
    ValueError
        No drafter, a drafter over another vocabulary, ``K < 1``, bad ``stop_rules``, a
        bandit or unknown policy,
        ``row_seconds`` not ``K + 1`` finite seconds >= 0, ``prior_rounds < 0``, ``probe``
        outside [0, 1].
    """

    def __init__(self, target: GGUFTarget, drafters: Sequence[PointDrafter],
                 draft_length: int = 4, stop_rules: Sequence[float] = THRESHOLDS,
                 policy: str = "normalhedge",
                 carry_state: bool = True, row_seconds: Sequence[float] | None = None,
                 prior_rounds: int = 8, probe: float = 0.1) -> None:
        if not drafters:
            raise ValueError("empty drafter pool: pass at least one point-mass drafter")
        for d in drafters:
            v = getattr(d, "vocab_size", None)
            if v is not None and v != target.vocab_size:
                raise ValueError(f"drafter {d.name} has a vocabulary of {v} tokens, the GGUF "
                                 f"target {target.vocab_size}: a pool built for another model")
        if isinstance(draft_length, bool) or not isinstance(draft_length, int) \
                or draft_length < 1:
            raise ValueError(f"draft_length must be an integer >= 1, got {draft_length!r}")
        self.target, self.drafters, self.K = target, list(drafters), draft_length
        self.names = [d.name for d in self.drafters]
        self.consensus_rows = consensus_rows(self.drafters)  # found once, as the vLLM proposer
        self.rules = StopRules(draft_length, stop_rules)
        self.policy = make_policy(policy, len(self.drafters) * len(self.rules))
        if not self.policy.full_information:
            raise ValueError(f"policy {policy!r} is a bandit: the llama.cpp engine learns "
                             "from every drafter's counterfactual (a full-information policy)")
        self.stream = Stream(len(self.drafters), draft_length, prior_rounds)
        if not 0.0 <= float(probe) <= 1.0:
            raise ValueError(f"probe must be in [0, 1], got {probe!r}")
        if row_seconds is None:
            row_seconds = target.row_prices(draft_length + 1)
        row_seconds = np.asarray(row_seconds, np.float64)
        if row_seconds.shape != (draft_length + 1,) or not np.isfinite(row_seconds).all() \
                or (row_seconds < 0).any():
            raise ValueError(f"row_seconds must be {draft_length + 1} finite seconds >= 0 "
                             f"(1 .. K + 1 rows), got {row_seconds.tolist()}")
        self.row_seconds = row_seconds
        self.costs = StepCosts(len(self.drafters), draft_length)
        for n, sec in enumerate(row_seconds, 1):
            self.costs.observe_target(n, sec)
        self.carry_state, self.probe = carry_state, float(probe)

    def generate(self, prompt: Sequence[int], max_new_tokens: int = 128,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float = 1.0,
                 seed: int = 0, stop_at_eog: bool = True,
                 on_round: Callable[[RoundInfo], None] | None = None) -> LlamaOutput:
        """Generate up to ``max_new_tokens`` after ``prompt`` (token ids); ``on_round`` gets a
        :class:`~spec_adapters.selection.RoundInfo` per round (as the transformers decoder's).
        Stops after an end-of-generation token (``stop_at_eog``) or at the context's end."""
        seq = self._check_prompt(prompt)
        # the learner's randomness, and the draws: plain_generate's generator for this seed
        rng, draws = np.random.default_rng([seed, 1]), np.random.default_rng(seed)
        limit = min(len(seq) + max_new_tokens, self.target.n_ctx)
        if not self.carry_state:
            self.policy.reset()
            self.stream = Stream(len(self.drafters), self.K, self.stream.prior_rounds)
        session = SelectionSession(self.policy, len(self.drafters), self.K, rules=self.rules,
                                   stream=self.stream, first_position=len(seq))
        secs = dict.fromkeys(("prefill", "target", "draft", "select", "update"), 0.0)
        rounds: dict[str, list[int]] = {"chosen": [], "lengths": [], "accepted": []}
        counterfactual, evaluated = np.zeros(len(self.drafters)), 0
        i = 0  # the drafter reported for a round that is not played: the last one played
        # the expected gains, recomputed when a round is scored, and whether any draft pays
        gain, pays, rescore = None, True, True
        weights = None if on_round is None else session.weights
        start_all = time.perf_counter()
        pending = self.target.prefill(seq)  # the next token's logits while its input is cached
        secs["prefill"] = time.perf_counter() - start_all
        done = len(seq) >= limit
        while not done:
            t0 = time.perf_counter()
            if rescore:                                                       # 1 select
                gain, rescore = self._gains(session), False
                pays = gain is None or bool(gain.max() > 0)
            # a round is played (and scored) unless no draft pays, then on a probe share only:
            # an unplayed round is a plain step and costs the learner nothing
            evaluate = pays or rng.random() < self.probe
            k = 0
            if evaluate:
                if on_round is not None:
                    weights = session.weights
                play = session.play(rng)
                i, r = play.drafter, play.option
            t1 = time.perf_counter()
            draft = []                                                        # 2 draft
            if evaluate:
                drafts, confidence, drafting = propose_all(
                    self.drafters, np.asarray(seq, np.int64), self.K, members=self.consensus_rows)
                lengths = self.rules.lengths(confidence)
                # the rule's cut, then what pays (nothing scored yet: k = 0)
                k = 0 if gain is None else paying_k(gain[i], int(lengths[i, r]))
                k = min(k, limit - len(seq) - 1)
                draft = [int(t) for t in drafts[i, :k] if t >= 0]
            t2 = time.perf_counter()
            if pending is None:                                               # 3 verify
                logits = self.target.step([seq[-1], *draft])
            else:  # after the prompt: its last token is cached, its logits known
                logits = np.vstack([pending[None], *([self.target.step(draft)] if draft else [])])
            t3 = time.perf_counter()
            if temperature <= 0:
                top = logits.argmax(1)
                n = next((j for j, t in enumerate(draft) if t != top[j]), len(draft))
                nxt = int(top[n])
            else:  # each position's token drawn as plain_generate draws it (same seed: same
                # tokens); a draft is kept while it equals that token; a row is warped only
                # when the rule reaches it
                n, nxt = coupled_walk(draft, lambda j, rows=logits: draw_token(
                    rows[j], temperature, top_k, top_p, draws))
            self.target.keep(len(seq) + n)            # [last] + the accepted drafts
            pending = None  # the next token (nxt) is not cached yet
            new = [*draft[:n], nxt]
            eog = next((j for j, t in enumerate(new) if stop_at_eog and self.target.is_eog(t)),
                       None)
            new = new[:min(len(new) if eog is None else eog + 1, limit - len(seq))]
            done = eog is not None or len(seq) + len(new) >= limit
            if evaluate:                                                      # 4 evaluate
                session.open(play, len(seq), drafts, rule_lengths=lengths)
            seq += new
            session.record(new)                                               # 5 update
            for scored in session.feed(self.costs.round_costs, self._tau):
                counterfactual += scored.accepted[:, -1]
                evaluated, rescore = evaluated + 1, True
            t4 = time.perf_counter()
            self.costs.observe_target(len(draft) + 1, t3 - t2)
            if evaluate:
                for j, sec in enumerate(drafting):
                    self.costs.observe_draft(j, self.K, sec)
            self.costs.observe_overhead((t1 - t0) + (t4 - t3))
            self.costs.observe_round(t4 - t0, len(new))
            for key, s in (("select", t1 - t0), ("draft", t2 - t1), ("target", t3 - t2),
                           ("update", t4 - t3)):
                secs[key] += s
            rounds["chosen"].append(i)
            rounds["lengths"].append(len(draft))
            rounds["accepted"].append(n)
            if on_round is not None:
                on_round(RoundInfo(len(rounds["chosen"]) - 1, i, self.names[i], n, len(draft),
                                   tuple(new), tuple(weights.tolist()), k))
        session.close()
        for d in self.drafters:  # the suffix drafter's memory of finished requests
            if hasattr(d, "commit"):
                d.commit(np.asarray(seq, np.int64))
        total = time.perf_counter() - start_all
        produced = seq[len(prompt):]
        calls = len(rounds["chosen"])
        stats = {"target_calls": calls, "new_tokens": len(produced),
                 "mean_accepted_tokens": len(produced) / calls if calls else 0.0,
                 "drafters": self.names, **rounds,
                 **{f"{k}_seconds": v for k, v in secs.items()}, "total_seconds": total,
                 "non_target_share":
                     1.0 - (secs["target"] + secs["prefill"]) / total if total else 0.0,
                 "evaluated_rounds": evaluated, "prompt_reused": self.target.prompt_reused,
                 "row_ms": (1e3 * self.row_seconds).round(3).tolist(),
                 "rows_invariant": self.target.rows_invariant
                 and self.target.round_rows >= self.K + 1,
                 "counterfactual_accepted": (counterfactual / max(evaluated, 1)).tolist()}
        return LlamaOutput(produced, stats)

    def _gains(self, session: SelectionSession) -> np.ndarray | None:
        """Every expert's expected gain in seconds over a plain step
        (:func:`~spec_adapters.selection.abstention.expected_gains`), what a round drafting
        ``d`` tokens adds being ``T(1 + d) - T(1)`` (never negative, never falling with
        ``d``) and drafting at all costing every drafter's proposal; ``None`` before any
        round is scored. :meth:`generate` asks again only when a
        round is scored (the prices and ``tau`` it reads move slowly), so an abstaining stream
        pays nothing for it."""
        curve = self.costs.target_curve()
        extra = np.maximum.accumulate(np.maximum(curve - curve[0], 0.0))
        tau = self._tau(self.costs.round_costs())
        # a played round runs every drafter: drafting at all costs all their proposals
        drafting = self.K * float(np.nansum(self.costs.per_token))
        return session.gains(tau, extra, drafting)

    def _tau(self, costs: np.ndarray) -> float:
        """Seconds per token to linearise at: the rate so far, never above a plain step's
        ``costs[0, 0] = T(1) + O`` (above it every draft would look worth more than it is; as
        the vLLM proposer's ``_tau``)."""
        plain = float(costs[0, 0])
        tau = self.costs.time_per_token
        return plain if tau is None else min(tau, plain) if plain > 0 else tau

    def _check_prompt(self, prompt: Sequence[int]) -> list[int]:
        seq = [int(t) for t in prompt]
        if not seq:
            raise ValueError("the prompt needs at least one token")
        if min(seq) < 0 or max(seq) >= self.target.vocab_size:
            raise ValueError(f"prompt token ids must lie in [0, {self.target.vocab_size})")
        if len(seq) >= self.target.n_ctx:
            raise ValueError(f"the prompt has {len(seq)} tokens; the context holds "
                             f"{self.target.n_ctx}")
        return seq


def plain_generate(target: GGUFTarget, prompt: Sequence[int], max_new_tokens: int = 128,
                   stop_at_eog: bool = True,
                   on_token: Callable[[int], None] | None = None, temperature: float = 0.0,
                   top_k: int | None = None, top_p: float = 1.0, seed: int = 0) -> list[int]:
    """llama.cpp decoding, one token per ``llama_decode`` with the last row's logits only:
    the baseline, and the output HedgeSpec's must equal (greedy: the argmax; sampled: one draw
    per token, :func:`~spec_adapters.llamacpp.sampling_chain.draw_token`: llama.cpp's chain,
    then the inverse CDF of one uniform from a numpy generator seeded with ``seed``, as
    :meth:`LlamaCppDecoder.generate` draws). ``on_token`` is called with each new token as
    soon as it is known."""
    draws = np.random.default_rng(seed)
    seq = [int(t) for t in prompt]
    limit = min(len(seq) + max_new_tokens, target.n_ctx)
    logits = target.prefill(seq)
    while len(seq) < limit:
        nxt = (int(logits.argmax()) if temperature <= 0
               else draw_token(logits, temperature, top_k, top_p, draws))
        seq.append(nxt)
        if on_token is not None:
            on_token(nxt)
        if (stop_at_eog and target.is_eog(nxt)) or len(seq) >= limit:
            break
        logits = target.step([nxt])[0]
    return seq[len(prompt):]
