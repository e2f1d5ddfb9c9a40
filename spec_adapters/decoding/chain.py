"""HedgeSpec single-draft speculative decoding on transformers models.

One round (HedgeSpec paper, Figure 1; ``docs/architecture.md``, "the single-draft round"):

1. **select**: the policy picks drafter ``i`` (``round_id, i = policy.play(rng)``);
2. **draft**: drafter ``i`` samples ``K`` tokens from its warped distributions ``q``;
3. **verify**: the target scores ``[last] + drafts`` in one pass (``p``, ``K + 1`` rows),
   speculative sampling accepts ``n`` drafts and yields one more token, the target's KV cache is
   cropped past the rejected drafts;
4. **evaluate**: every drafter appends the verified tokens (keeping its cache in sync) and
   returns its distributions there, giving ``gamma`` (Theorem 1) and ``rho`` per drafter and
   position;
5. **update**: rounds whose window of ``K`` positions is now verified get a loss per drafter
   (EAL or TAP, :mod:`spec_adapters.core.rounds`) fed to the delayed-feedback policy; rounds still
   open when generation stops are censored.

Losslessness: the drafts and the acceptance rule use the same :class:`SamplingConfig` for ``p``
and ``q``, and the drafter choice depends only on the past, so the output is distributed
exactly as the target's warped distribution (greedy: identical to the target's greedy output).
Bandit policies (EXP3Spec, UCBSpec) and ``fixed:<i>`` skip step 4: they only need the chosen
drafter's accepted length, and a drafter catches up on the verified tokens lazily when next
chosen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from spec_adapters.core.policies import FixedPolicy, bandit_loss, make_policy
from spec_adapters.core.rounds import LOSSES, RoundTable, position_stats
from spec_adapters.core.sampling import SamplingConfig, speculative_accept
from spec_adapters.drafters import as_drafter, check_vocab, expand_drafters
from spec_adapters.hf.target import TargetModel

__all__ = ["GenerateOutput", "HedgeSpecDecoder"]


@dataclass
class GenerateOutput:
    """Result of :meth:`HedgeSpecDecoder.generate`.

    Attributes
    ----------
    sequences : torch.LongTensor
        ``[1, prompt_len + new_tokens]``: the prompt followed by the generated tokens.
    stats : dict
        ``target_calls`` (verification passes; the prefill is not counted), ``new_tokens``,
        ``mean_accepted_tokens`` (= new_tokens / target_calls, the bonus token included),
        ``chosen`` (drafter index per round), ``accepted`` (drafts accepted per round, 0..K),
        ``weights`` (per round, before the choice: the base learner's distribution),
        ``losses`` (``(round_id, loss vector)`` fed to full-information policies),
        ``censored`` (rounds censored at the end), ``gamma`` / ``rho`` (``(N, new_tokens)``
        float64 per drafter and generated position; ``None`` for bandit / fixed policies),
        timings in seconds: ``prefill_seconds``, ``select_seconds``, ``draft_seconds``,
        ``verify_seconds``, ``eval_seconds``, ``update_seconds``, ``total_seconds``;
        and ``policy``, ``drafters``, ``draft_length``. The oracle adds ``oracle_mat``
        (MAT of each fixed drafter) and ``oracle_choice``.
    """

    sequences: torch.LongTensor
    stats: dict[str, Any]


def _learner_weights(policy) -> np.ndarray:
    """The base learner's distribution (QPMD's own ``weights`` is one-hot while a prediction
    is pending, which says nothing about what was learnt)."""
    learner = getattr(policy, "learner", None)
    return learner.weights if learner is not None else policy.weights


@dataclass
class _Query:
    """Mutable state of one generate() call."""

    seq: list[int]
    prompt_len: int
    limit: int  # the sequence stops growing at this length
    eos: frozenset[int]
    sampling: SamplingConfig
    gen: torch.Generator
    rng: np.random.Generator
    streamer: Any
    table: RoundTable
    synced: list[int]  # verified tokens each drafter has appended
    done: bool = False
    chosen: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    weights: list[list[float]] = field(default_factory=list)
    losses: list[tuple[int, list[float]]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("prefill", "select", "draft", "verify", "eval", "update"), 0.0))


class HedgeSpecDecoder:
    """Lossless single-draft speculative decoding with online drafter selection.

    Parameters
    ----------
    target : transformers.PreTrainedModel or TargetModel
        The causal LM whose distribution is reproduced exactly.
    drafters : list
        :class:`~spec_adapters.drafters.Drafter` objects, transformers causal LMs (wrapped as
        :class:`~spec_adapters.drafters.HFDrafter`) or
        :class:`~spec_adapters.drafters.StackedHFDrafters` groups (expanded into their members,
        evaluated in one batched pass); all share the target's vocabulary.
    draft_length : int, default 5
        ``K >= 1`` tokens drafted per round.
    policy : str or learner, default "normalhedge"
        See :func:`spec_adapters.core.policies.make_policy`; also ``"oracle"`` (runs every drafter
        fixed and returns the run with the best mean accepted tokens; for benchmarks).
    loss : {"eal", "tap"}, default "eal"
        Expected-acceptance-length or token-acceptance-probability loss (Theorem 3).
    delay : {"onarrival", "qpmd", "bold"}, default "onarrival"
        Delayed-feedback reduction around full-information learners (see
        :mod:`spec_adapters.core.policies` for the choice).
    carry_state : bool, default False
        Keep the learner's state across ``generate`` calls instead of resetting it per query.

    Raises
    ------
    ValueError
        Empty drafter pool, a drafter whose vocabulary differs from the target's, ``K < 1``,
        unknown policy, loss or delay.
    """

    def __init__(self, target, drafters, draft_length: int = 5, policy="normalhedge",
                 loss: str = "eal", delay: str = "onarrival", carry_state: bool = False
                 ) -> None:
        if isinstance(draft_length, bool) or not isinstance(draft_length, int | np.integer) \
                or draft_length < 1:
            raise ValueError(f"draft_length (K) must be an integer >= 1, got {draft_length!r}")
        drafters = [] if drafters is None else list(drafters)
        if not drafters:
            raise ValueError("empty drafter pool: pass at least one drafter")
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; expected one of {LOSSES}")
        self.target = target if isinstance(target, TargetModel) else TargetModel(target)
        self.drafters = [as_drafter(d, i) for i, d in enumerate(expand_drafters(drafters))]
        check_vocab(self.drafters, self.target.vocab_size)
        self.k, self.loss, self.carry_state = int(draft_length), loss, carry_state
        self.oracle = isinstance(policy, str) and policy.strip().lower() == "oracle"
        self.policy_name = policy if isinstance(policy, str) else type(policy).__name__
        self.policy = None if self.oracle else make_policy(policy, len(self.drafters), delay)

    # ------------------------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------------------------
    def generate(self, input_ids, max_new_tokens: int = 128, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int | None = None, seed: int | None = None,
                 eos_token_id: int | list[int] | None = None, streamer=None) -> GenerateOutput:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (shape ``[1, L]``).

        Sampling parameters warp both the target and the drafters (temperature 0 = greedy).
        ``seed`` seeds the torch generator (drafting, acceptance) and the policy's numpy
        generator, so a sampled generation is reproducible. ``eos_token_id`` defaults to the
        target's ``generation_config.eos_token_id``; generation stops after it. The total length
        never exceeds the target's context. ``streamer`` gets ``put(prompt)``, then
        ``put(tokens)`` once per round, then ``end()`` (transformers' streamer protocol).

        Raises
        ------
        ValueError
            ``input_ids`` not a 2-D integer tensor, batch size > 1 (not supported yet), empty
            prompt, token ids out of range, prompt longer than the target's context,
            ``max_new_tokens < 0``, ``temperature < 0`` or bad ``top_p`` / ``top_k``.
        """
        prompt = self._check_prompt(input_ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) \
                or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        sampling = SamplingConfig(temperature, top_p, top_k)
        eos = self._eos_set(eos_token_id)
        limit = prompt.numel() + int(max_new_tokens)
        if self.target.max_length is not None:
            limit = min(limit, self.target.max_length)
        if self.oracle:
            return self._generate_oracle(prompt, limit, eos, sampling, seed, streamer)
        if not self.carry_state:
            self.policy.reset()
        return self._decode(prompt, self.policy, limit, eos, sampling, seed, streamer)

    # ------------------------------------------------------------------------------------
    # the round
    # ------------------------------------------------------------------------------------
    def _decode(self, prompt, policy, limit, eos, sampling, seed, streamer) -> GenerateOutput:
        start = time.perf_counter()
        q = self._begin(prompt, policy, limit, eos, sampling, seed, streamer)
        while not q.done:
            round_id, i = self._select(policy, q)
            drafts, dists = self._draft(i, q)
            n_accepted, new, p = self._verify(drafts, dists, q)
            self._evaluate(policy, new, p, q)
            self._update(policy, round_id, n_accepted, q)
        return self._finish(policy, q, time.perf_counter() - start)

    def _select(self, policy, q: _Query) -> tuple[int, int]:
        """Step 1: the policy picks a drafter; the round drafts positions len(seq)..+K-1."""
        t = time.perf_counter()
        q.weights.append(np.asarray(_learner_weights(policy), dtype=float).tolist())
        round_id, i = policy.play(q.rng)
        if self._counterfactual(policy):
            q.table.open(round_id, len(q.seq))
        q.chosen.append(int(i))
        q.seconds["select"] += time.perf_counter() - t
        return round_id, int(i)

    def _draft(self, i: int, q: _Query) -> tuple[torch.LongTensor, torch.Tensor]:
        """Step 2: drafter ``i`` proposes K tokens (fewer only at the context limit)."""
        t = time.perf_counter()
        drafter = self.drafters[i]
        if q.synced[i] < len(q.seq):  # lazy catch-up (bandit / fixed policies)
            drafter.extend(torch.tensor(q.seq[q.synced[i]:]))
            q.synced[i] = len(q.seq)
        k = self.k if self.target.max_length is None else \
            max(1, min(self.k, self.target.max_length - len(q.seq)))
        drafts, dists = drafter.propose(k, q.sampling, q.gen)
        q.seconds["draft"] += time.perf_counter() - t
        return drafts.to(self.target.device), dists.to(self.target.device)

    def _verify(self, drafts, dists, q: _Query) -> tuple[int, torch.LongTensor, torch.Tensor]:
        """Step 3: one target pass over ``[last] + drafts``, speculative acceptance, crop.

        Returns the number of accepted drafts, the new verified tokens (accepted drafts and the
        resampled / bonus token, cut after EOS or at the length limit) and ``p`` at them.
        """
        t = time.perf_counter()
        length = len(q.seq)
        logits = self.target.verify(torch.tensor([q.seq[-1]]), drafts)
        p = q.sampling.probs(logits)
        n_accepted, nxt = speculative_accept(p, dists, drafts, q.gen)
        self.target.crop(length + n_accepted)  # cache = new sequence minus its last token
        new = [*drafts[:n_accepted].tolist(), int(nxt)]
        for j, tok in enumerate(new):
            if tok in q.eos:
                new, q.done = new[:j + 1], True
                break
        if length + len(new) >= q.limit:
            new, q.done = new[:q.limit - length], True
        q.seq.extend(new)
        q.accepted.append(int(n_accepted))
        if q.streamer is not None:
            q.streamer.put(torch.tensor(new))
        q.seconds["verify"] += time.perf_counter() - t
        return n_accepted, torch.tensor(new, device=p.device), p[:len(new)]

    def _evaluate(self, policy, new, p, q: _Query) -> None:
        """Step 4: every drafter appends the verified tokens; gamma and rho at each of them."""
        if not self._counterfactual(policy):
            return
        t = time.perf_counter()
        dists = []
        for i, drafter in enumerate(self.drafters):
            dists.append(q.sampling.probs(drafter.extend(new).to(p.device)))
            q.synced[i] = len(q.seq)
        gamma, rho = position_stats(p, torch.stack(dists), new)
        q.table.record(gamma, rho)
        q.seconds["eval"] += time.perf_counter() - t

    def _update(self, policy, round_id: int, n_accepted: int, q: _Query) -> None:
        """Step 5: feed the losses of every round whose window is complete."""
        t = time.perf_counter()
        if self._counterfactual(policy):
            for rid, losses in q.table.pop_completed():
                policy.feed(rid, losses)
                q.losses.append((rid, losses.tolist()))
        else:  # bandit feedback: the chosen drafter's accepted length, available now
            policy.feed(round_id, bandit_loss(n_accepted, self.k))
        q.seconds["update"] += time.perf_counter() - t

    # ------------------------------------------------------------------------------------
    # plumbing
    # ------------------------------------------------------------------------------------
    @staticmethod
    def _counterfactual(policy) -> bool:
        """Full-information policies need every drafter's loss; bandits and fixed do not."""
        return bool(policy.full_information) and not isinstance(policy, FixedPolicy)

    def _begin(self, prompt, policy, limit, eos, sampling, seed, streamer) -> _Query:
        t = time.perf_counter()
        gen = torch.Generator(device=self.target.device)
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(int(seed))
        self.target.prefill(prompt)
        for drafter in self.drafters:
            drafter.start(prompt)
        table = RoundTable(len(self.drafters), self.k, self.loss, corrected=not sampling.greedy)
        table.reset(prompt.numel())
        if streamer is not None:
            streamer.put(prompt.view(1, -1).cpu())
        q = _Query(seq=prompt.tolist(), prompt_len=prompt.numel(), limit=limit, eos=eos,
                   sampling=sampling, gen=gen, rng=np.random.default_rng(seed),
                   streamer=streamer, table=table, synced=[prompt.numel()] * len(self.drafters),
                   done=prompt.numel() >= limit)
        q.seconds["prefill"] = time.perf_counter() - t
        return q

    def _finish(self, policy, q: _Query, total: float) -> GenerateOutput:
        t = time.perf_counter()
        censored = q.table.close() if self._counterfactual(policy) else []
        for rid in censored:
            policy.censor(rid)
        q.seconds["update"] += time.perf_counter() - t
        if q.streamer is not None:
            q.streamer.end()
        new_tokens = len(q.seq) - q.prompt_len
        calls = len(q.chosen)
        counterfactual = self._counterfactual(policy)
        stats = {
            "target_calls": calls,
            "new_tokens": new_tokens,
            "mean_accepted_tokens": new_tokens / calls if calls else 0.0,
            "chosen": q.chosen,
            "accepted": q.accepted,
            "weights": q.weights,
            "losses": q.losses,
            "censored": len(censored),
            "gamma": q.table.gamma if counterfactual else None,
            "rho": q.table.rho if counterfactual else None,
            **{f"{k}_seconds": v for k, v in q.seconds.items()},
            "total_seconds": total,
            "policy": self.policy_name,
            "drafters": [d.name for d in self.drafters],
            "draft_length": self.k,
        }
        sequences = torch.tensor([q.seq], dtype=torch.long)
        return GenerateOutput(sequences=sequences, stats=stats)

    def _generate_oracle(self, prompt, limit, eos, sampling, seed, streamer) -> GenerateOutput:
        """Run every drafter with a fixed policy; return the run with the best MAT."""
        runs = [self._decode(prompt, FixedPolicy(len(self.drafters), i), limit, eos, sampling,
                             seed, None) for i in range(len(self.drafters))]
        mats = [r.stats["mean_accepted_tokens"] for r in runs]
        best = int(np.argmax(mats))
        out = runs[best]
        out.stats.update(policy="oracle", oracle_mat=mats, oracle_choice=best,
                         oracle_total_seconds=sum(r.stats["total_seconds"] for r in runs))
        if streamer is not None:
            streamer.put(prompt.view(1, -1).cpu())
            streamer.put(out.sequences[0, prompt.numel():])
            streamer.end()
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

    def _eos_set(self, eos_token_id) -> frozenset[int]:
        if eos_token_id is None:
            config = getattr(self.target.model, "generation_config", None)
            eos_token_id = getattr(config, "eos_token_id", None)
        if eos_token_id is None:
            return frozenset()
        if isinstance(eos_token_id, torch.Tensor):
            eos_token_id = eos_token_id.flatten().tolist()
        if isinstance(eos_token_id, int | np.integer):
            eos_token_id = [eos_token_id]
        return frozenset(int(e) for e in eos_token_id)
