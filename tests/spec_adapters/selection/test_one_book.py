"""One selection core under three engines: the transformers round loop, the vLLM proposer and
the llama.cpp decoder, fed the same stream, feed their learners the same losses and end with
the same weights.

The stream: a hidden continuation (a deterministic rule with noise) and three deterministic
drafters (the rule, the rule where a token is even, a wrong rule). The transformers loop sees
them as a scheme whose ``evaluate`` gives every drafter's argmax at each verified position
(greedy); the vLLM proposer and the llama.cpp decoder see them as point-mass drafters whose
K-token drafts a fake engine (a fake GGUF target) verifies against the same continuation.
Every learner plays the same scripted experts, so the rounds start at the same positions;
everything else (the round book, the window losses, the feeding) is each adapter's own driving
of :class:`~spec_adapters.selection.session.SelectionSession`. Cost-aware, the prices are
pinned (the same ``c(k)`` and ``tau`` in every engine) and the abstention is told that every
length pays, so the scripted length is the one drafted."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from onlinelearn import NormalHedge
from onlinelearn.delayed import OnArrival
from spec_adapters.decoding.loop import RoundLoop, Verdict
from spec_adapters.decoding.settings import PolicySettings
from spec_adapters.drafters.point import PointDrafter, Proposal
from spec_adapters.llamacpp.decoder import LlamaCppDecoder
from spec_adapters.selection.book import greedy_stats
from spec_adapters.selection.costs import StepCosts
from spec_adapters.vllm.config import ProposerConfig
from spec_adapters.vllm.proposer import HedgeSpecProposer

V, K, N = 50, 3, 3
PROMPT = [3, 7, 1, 4, 9, 2]
NEW = 90
START = len(PROMPT) + 1  # vLLM's first step samples one token before any draft
A, B_D, TAU = 0.04, 0.005, 0.03  # pinned prices: c(k) = A + B_D k, tau


def _rule(ctx) -> int:
    return (3 * ctx[-1] + ctx[-2] + 1) % V


def _drafter(i: int, ctx) -> int:
    """0: the rule; 1: the rule where the last token is even, else a wrong one; 2: wrong."""
    if i == 0 or (i == 1 and ctx[-1] % 2 == 0):
        return _rule(ctx)
    return (ctx[-1] + 5) % V


def _continuation() -> list[int]:
    rng = np.random.default_rng(1)
    seq = list(PROMPT)
    while len(seq) < len(PROMPT) + NEW + 2 * K + 2:
        seq.append(int(rng.integers(V)) if rng.random() < 0.15 else _rule(seq))
    return seq


TRUTH = _continuation()


def _chain(i: int, ctx, k: int) -> list[int]:
    out = list(ctx)
    for _ in range(k):
        out.append(_drafter(i, out))
    return out[len(ctx):]


def _accept(ctx, draft) -> list[int]:
    """The accepted drafts plus the target's next token (greedy against TRUTH)."""
    n = len(ctx)
    a = 0
    while a < len(draft) and draft[a] == TRUTH[n + a]:
        a += 1
    return TRUTH[n:n + a + 1]


class Scripted(OnArrival):
    """NormalHedge behind the on-arrival reduction, playing a fixed sequence of experts and
    keeping every loss vector it is fed."""

    def __init__(self, n, arms) -> None:
        super().__init__(NormalHedge(n))
        self.arms, self.fed = list(arms), []

    def _play(self, rid, rng):
        return self.arms[rid % len(self.arms)]

    def _feed(self, rid, arm, value):
        self.fed.append(np.asarray(value, dtype=float))
        super()._feed(rid, arm, value)

    def reset(self):  # the loop resets its policy per query: keep the script and the record
        return self


DRAFTERS = [0, 2, 1, 1, 0, 2, 2, 0, 1, 0]
LENGTHS = [3, 1, 2, 0, 3, 2, 3, 1, 3, 2]  # the cost-aware experts' k
EXPERTS = [i * (K + 1) + k for i, k in zip(DRAFTERS, LENGTHS, strict=True)]


class PinnedCosts(StepCosts):
    """Step costs that measure nothing: ``c_i(k) = A + B_D k``, ``tau = TAU``."""

    def __init__(self) -> None:
        super().__init__(N, K)
        self.target = A + B_D * np.arange(K + 1)

    def observe_target(self, *a):
        return self

    observe_draft = observe_overhead = observe_round = observe_target

    @property
    def time_per_token(self):
        return TAU


PAYS = np.tile(np.arange(K + 1, dtype=float), (N, 1))  # every longer draft pays more


class _Target:
    vocab_size, max_length, device, model = V, None, "cpu", None

    @staticmethod
    def check_prompt_length(n):
        return None


class _Scheme:
    """The stream as a transformers-loop scheme: greedy point-mass drafts, exact per-position
    argmaxes in ``evaluate``."""

    target, names, draft_length = _Target(), [f"d{i}" for i in range(N)], K

    def start(self, prompt):
        pass

    def draft(self, i, q, k):
        return _chain(i, q.seq, k)

    def verify(self, draft, q):
        tokens = _accept(q.seq, draft)
        return Verdict(len(tokens) - 1, tokens, torch.zeros(len(tokens), V), drafted=len(draft))

    def evaluate(self, verdict, q, counterfactual):
        start = len(q.seq) - len(verdict.tokens)
        argmax = np.array([[_drafter(i, q.seq[:start + j]) for j in range(len(verdict.tokens))]
                           for i in range(N)])
        return greedy_stats(argmax, np.array(verdict.tokens))

    def stats(self):
        return {}


class _GGUF:
    """The stream as a GGUF target: each row's logits are one-hot at TRUTH's next token."""

    vocab_size, n_ctx, rows_invariant, round_rows, prompt_reused = V, 4096, True, K + 1, 0

    def __init__(self) -> None:
        self.cached = 0

    @staticmethod
    def _rows(first: int, m: int) -> np.ndarray:
        rows = np.zeros((m, V), np.float32)
        rows[np.arange(m), [TRUTH[first + j + 1] for j in range(m)]] = 1.0
        return rows

    def prefill(self, seq):
        self.cached = len(seq)
        return self._rows(len(seq) - 1, 1)[0]

    def step(self, tokens):
        first, self.cached = self.cached, self.cached + len(tokens)
        return self._rows(first, len(tokens))

    def keep(self, n):
        self.cached = n

    @staticmethod
    def is_eog(token):
        return False


class _Point(PointDrafter):
    def __init__(self, i):
        self.i, self.name = i, f"d{i}"

    def propose(self, history, k):
        tokens = np.array(_chain(self.i, list(history), k), np.int64)
        return Proposal(tokens, np.ones(len(tokens)))


def _transformers(cost_aware: bool) -> Scripted:
    policy = Scripted(N * (K + 1) if cost_aware else N, EXPERTS if cost_aware else DRAFTERS)
    loop = RoundLoop(_Scheme(), PolicySettings(policy=policy, cost_aware=cost_aware))
    if cost_aware:
        loop.costs = PinnedCosts()
    loop.generate(torch.tensor([TRUTH[:START]]), max_new_tokens=NEW, eos_token_id=[])
    return policy


def _vllm(monkeypatch, cost_aware: bool) -> Scripted:
    config = ProposerConfig(pool=None, prompt_lookup=(1, 2, 3), suffix=False, consensus=False,
                            cost_aware=cost_aware, stop_rules=(0.0,), prior_rounds=0,
                            feedback_budget=1.0, time_budget=1.0,
                            step_costs=(A, 0.0, B_D))
    prop = HedgeSpecProposer.standalone(config, vocab_size=V, max_k=K, max_model_len=4096)
    prop.drafters = [_Point(i) for i in range(N)]
    policy = Scripted(N * (K + 1) if cost_aware else N, EXPERTS if cost_aware else DRAFTERS)
    monkeypatch.setattr(prop, "_policy", lambda: policy)
    monkeypatch.setattr(prop, "evaluation_probability", lambda rows: 1.0)
    monkeypatch.setattr(prop, "_tau", lambda costs: TAU)
    monkeypatch.setattr(prop, "_gains", lambda st, prices: PAYS)
    buf, sampled = list(TRUTH[:START]), [TRUTH[len(PROMPT)]]
    while True:
        (draft,) = prop.propose([sampled], np.array([len(buf)]), np.array([buf]))
        if len(buf) >= START + NEW:
            return policy
        sampled = _accept(buf, draft)
        buf += sampled


def _llamacpp(monkeypatch) -> Scripted:
    policy = Scripted(N * (K + 1), EXPERTS)
    decoder = LlamaCppDecoder(_GGUF(), [_Point(i) for i in range(N)], draft_length=K,
                              stop_rules=(0.0,), policy=policy, row_seconds=[0.0] * (K + 1))
    decoder.costs = PinnedCosts()
    monkeypatch.setattr(decoder, "_gains", lambda session: PAYS)
    out = decoder.generate(TRUTH[:START], max_new_tokens=NEW)
    assert out.tokens == TRUTH[START:START + NEW]  # lossless against the stream
    return policy


def _same(ours: Scripted, theirs: Scripted) -> None:
    """The same losses in the same order (vLLM sees the last verification one step later, so
    it may feed one more window) and the same weights."""
    n = len(ours.fed)
    assert n > 15  # the rounds whose window completed before the end
    np.testing.assert_array_equal(np.array(theirs.fed[:n]), np.array(ours.fed))
    assert len(theirs.fed) in (n, n + 1)
    replay = NormalHedge(ours.n)
    for losses in theirs.fed[:n]:
        replay.update(losses)
    np.testing.assert_allclose(ours.weights, replay.weights, rtol=0, atol=0)
    assert np.std([f.std() for f in ours.fed]) > 0  # the experts were told apart


def test_the_transformers_loop_and_the_vllm_proposer_feed_the_same_drafter_losses(monkeypatch):
    ours = _transformers(cost_aware=False)
    _same(ours, _vllm(monkeypatch, cost_aware=False))
    assert ours.weights[0] > ours.weights[2]  # the exact rule beats the wrong one


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_every_engine_feeds_the_same_cost_aware_losses(monkeypatch, engine):
    """(drafter, k) experts, the time loss at pinned prices: the three engines' sessions."""
    ours = _transformers(cost_aware=True)
    theirs = _vllm(monkeypatch, True) if engine == "vllm" else _llamacpp(monkeypatch)
    _same(ours, theirs)
    by_drafter = ours.weights.reshape(N, K + 1).sum(1)
    assert by_drafter[0] > by_drafter[2]


def test_the_selection_core_the_vllm_proposer_and_the_llama_cpp_engine_import_no_torch():
    code = ("import sys, spec_adapters.selection, spec_adapters.drafters.point, "
            "spec_adapters.vllm.proposer, spec_adapters.llamacpp.decoder, "
            "spec_adapters.app.serve_llamacpp; "
            "bad = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_stream_is_not_trivial():
    """The noise breaks the rule sometimes, and drafter 1 is right only on even tokens."""
    hits = [sum(_drafter(i, TRUTH[:t]) == TRUTH[t] for t in range(8, len(TRUTH)))
            for i in range(N)]
    assert hits[0] > hits[1] > hits[2]
