"""One selection core under two engines: the transformers round loop and the vLLM proposer,
fed the same stream, feed their learners the same losses and end with the same weights.

The stream: a hidden continuation (a deterministic rule with noise) and three deterministic
drafters (the rule, the rule where a token is even, a wrong rule). The transformers loop sees
them as a scheme whose ``evaluate`` gives every drafter's argmax at each verified position
(greedy); the vLLM proposer sees them as point-mass drafters whose K-token drafts a fake engine
verifies against the same continuation. Both learners play the same scripted experts, so
the rounds start at the same positions; everything else (the round book, the window losses,
the feeding) is each adapter's own code."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch

from onlinelearn import NormalHedge
from onlinelearn.delayed import OnArrival
from spec_adapters.decoding.loop import RoundLoop, Verdict
from spec_adapters.decoding.settings import PolicySettings
from spec_adapters.drafters.point import PointDrafter, Proposal
from spec_adapters.selection.book import greedy_stats
from spec_adapters.vllm.config import ProposerConfig
from spec_adapters.vllm.proposer import HedgeSpecProposer

V, K, N = 50, 3, 3
PROMPT = [3, 7, 1, 4, 9, 2]
NEW = 90


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

    def __init__(self, arms) -> None:
        super().__init__(NormalHedge(N))
        self.arms, self.fed = list(arms), []

    def _play(self, rid, rng):
        return self.arms[rid % len(self.arms)]

    def _feed(self, rid, arm, value):
        self.fed.append(np.asarray(value, dtype=float))
        super()._feed(rid, arm, value)

    def reset(self):  # the loop resets its policy per query: keep the script and the record
        return self


ARMS = [0, 2, 1, 1, 0, 2, 2, 0, 1, 0]


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


class _Point(PointDrafter):
    def __init__(self, i):
        self.i, self.name = i, f"d{i}"

    def propose(self, history, k):
        tokens = np.array(_chain(self.i, list(history), k), np.int64)
        return Proposal(tokens, np.ones(len(tokens)))


def _transformers_losses():
    policy = Scripted(ARMS)
    loop = RoundLoop(_Scheme(), PolicySettings(policy=policy))
    start = len(PROMPT) + 1  # vLLM's first step samples one token before any draft
    loop.generate(torch.tensor([TRUTH[:start]]), max_new_tokens=NEW, eos_token_id=[])
    return policy


def _vllm_losses(monkeypatch):
    config = ProposerConfig(pool=None, prompt_lookup=(1, 2, 3), suffix=False, cost_aware=False,
                            prior_rounds=0, feedback_budget=1.0)
    prop = HedgeSpecProposer.standalone(config, vocab_size=V, max_k=K, max_model_len=4096)
    prop.drafters = [_Point(i) for i in range(N)]
    policy = Scripted(ARMS)
    monkeypatch.setattr(prop, "_prior", lambda: policy)
    monkeypatch.setattr(prop, "evaluation_probability", lambda rows: 1.0)
    buf, sampled = list(TRUTH[:len(PROMPT) + 1]), [TRUTH[len(PROMPT)]]
    while True:
        (draft,) = prop.propose([sampled], np.array([len(buf)]), np.array([buf]))
        if len(buf) >= len(PROMPT) + 1 + NEW:
            return policy
        sampled = _accept(buf, draft)
        buf += sampled


def test_both_adapters_feed_the_same_losses_and_reach_the_same_weights(monkeypatch):
    ours, theirs = _transformers_losses(), _vllm_losses(monkeypatch)
    assert len(ours.fed) > 15  # the rounds whose window completed before the end
    n = len(ours.fed)
    np.testing.assert_array_equal(np.array(theirs.fed[:n]), np.array(ours.fed))
    assert len(theirs.fed) in (n, n + 1)  # vLLM sees the last verification one step later
    replay = NormalHedge(N)
    for losses in theirs.fed[:n]:
        replay.update(losses)
    np.testing.assert_allclose(ours.weights, replay.weights, rtol=0, atol=0)
    assert np.std([f.std() for f in ours.fed]) > 0  # the drafters were told apart
    assert ours.weights[0] > ours.weights[2]  # the exact rule beats the wrong one


def test_the_selection_core_and_the_vllm_proposer_import_no_torch():
    code = ("import sys, spec_adapters.selection, spec_adapters.drafters.point, "
            "spec_adapters.vllm.proposer; "
            "bad = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_stream_is_not_trivial():
    """The noise breaks the rule sometimes, and drafter 1 is right only on even tokens."""
    hits = [sum(_drafter(i, TRUTH[:t]) == TRUTH[t] for t in range(8, len(TRUTH)))
            for i in range(N)]
    assert hits[0] > hits[1] > hits[2]
