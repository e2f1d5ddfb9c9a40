"""The transformers loop's consensus slot: lossless greedy, seeded and sampled, and scored by the
round book exactly as it drafts."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.vote import majority_path
from spec_adapters.selection.book import RoundBook, consensus_stats
from tests.spec_adapters.single_helpers import (
    UnigramDrafter,
    chi2_pvalue,
    exact_continuations,
    pool,
)


@pytest.fixture(scope="module")
def models():
    target, drafters = pool(vocab_size=96, peak=30.0)  # peaked: the copies' drafts often kept
    return target, [*drafters, UnigramDrafter(torch.linspace(0, 3, 96))]


def _prompts(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 96, (1, 3 + i), generator=g) for i in range(n)]


@pytest.mark.parametrize(("policy", "cost_aware"), [
    ("normalhedge", False), ("normalhedge", True), ("exp3spec", False), ("fixed:4", False)])
def test_greedy_output_with_the_consensus_is_the_targets(models, policy, cost_aware):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3, policy=policy,
                           cost_aware=cost_aware, consensus=True)
    assert dec.scheme.names[-1] == "consensus" and len(dec.scheme.names) == len(drafters) + 1
    played = 0
    for i, ids in enumerate(_prompts(3, seed=1)):
        n = 13 + 6 * i
        out = dec.generate(ids, max_new_tokens=n)
        ref = target.generate(ids, do_sample=False, max_new_tokens=n, pad_token_id=0)
        assert out.sequences.tolist() == ref.tolist(), (policy, i)
        played += sum(c == len(drafters) for c in out.stats["chosen"])
    assert played > 0 or policy != "fixed:4"  # the consensus drafted


def test_a_consensus_window_is_scored_as_the_consensus_drafts(models):
    """Greedy: the loss fed for the consensus at every completed round (EAL, ``(K - accepted)
    / (K + 1)``) is that of the majority path the drafters' own greedy drafts from the
    round's start would have had accepted, drafted afresh here."""
    target, drafters = models
    K, c = 3, len(drafters)
    dec = HedgeSpecDecoder(target, drafters, draft_length=K, policy="hedge", consensus=True)
    checked = 0
    for ids in _prompts(2, seed=2):
        rounds = []
        out = dec.generate(ids, max_new_tokens=30, on_round=rounds.append)
        seq, start = out.sequences[0].tolist(), ids.shape[1]
        for rid, loss in out.stats["losses"]:
            at = start + sum(len(r.tokens) for r in rounds[:rid])
            table = np.full((c, K), -1)
            for i, d in enumerate(dec.drafters):
                d.start(torch.tensor(seq[:at]))
                drafted = d.propose(K, SamplingConfig(0.0), None)[0].tolist()
                table[i, :len(drafted)] = drafted
            path = majority_path(table)[0].tolist()
            accepted = next((j for j, t in enumerate(path) if t != seq[at + j]), len(path))
            assert loss[c] == pytest.approx((K - accepted) / (K + 1)), (rid, path)
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("warp", [{"temperature": 1.0, "top_p": 1.0, "top_k": None},
                                  {"temperature": 0.7, "top_p": 0.9, "top_k": 20}])
def test_a_generator_run_with_the_consensus_is_plain_generates_sample(models, warp):
    """Seeded (the coupled rule): token for token the target's own sampled output."""
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3, consensus=True)
    accepted = 0
    for i, ids in enumerate(_prompts(3, seed=3)):
        torch.manual_seed(50 + i)
        plain = target.generate(ids, do_sample=True, max_new_tokens=20, pad_token_id=0,
                                **{**warp, "top_k": warp["top_k"] or 0})
        out = dec.generate(ids, max_new_tokens=20, generator=torch.Generator().manual_seed(
            50 + i), **warp)
        assert out.sequences.tolist() == plain.tolist(), (warp, i)
        accepted += sum(out.stats["accepted"])
    assert accepted > 5


@pytest.mark.parametrize("policy", ["fixed:3", "normalhedge"])
def test_sampled_continuations_with_the_consensus_follow_the_target(policy):
    """Unseeded: the consensus's point-mass drafts verified by speculative sampling leave the
    target's law (chi-square against enumeration; the sharper law is rejected)."""
    V, prompt, n_samples = 12, torch.tensor([[1, 5, 7]]), 300
    target, drafters = pool(vocab_size=V, peak=20.0, layers=1)
    drafters = [drafters[0], drafters[1], UnigramDrafter(torch.linspace(3, 0, V))]
    dec = HedgeSpecDecoder(target, drafters, draft_length=2, policy=policy, consensus=True)
    counts = Counter()
    for seed in range(n_samples):
        out = dec.generate(prompt, max_new_tokens=3, temperature=1.0, seed=seed)
        counts[tuple(out.sequences[0, 3:].tolist())] += 1

    def law(t):
        return exact_continuations(target, prompt, 3, lambda x: torch.softmax(x.float() / t, -1))

    assert chi2_pvalue(counts, law(1.0), n_samples) > 1e-3
    assert chi2_pvalue(counts, law(0.8), n_samples) < 1e-4


def test_consensus_stats_by_hand():
    argmax = np.array([[5, 6, 7], [5, 6, 9], [5, 8, -1], [4, 6, 9]])
    p = np.array([[0.5, 0.4, 0.1], [0.5, 0.4, 0.3], [0.5, 0.2, 0.0], [0.1, 0.4, 0.3]])
    # depth 0: 5 (3 votes) -> members 0-2; depth 1: 6 (2 of 3) -> 0, 1; depth 2: 7 (tie, first)
    assert majority_path(argmax)[0].tolist() == [5, 6, 7]
    gamma, rho, proposes = consensus_stats(argmax, p, np.array([5, 6, 9]))
    assert gamma.tolist() == [0.5, 0.4, 0.1] and rho.tolist() == [1, 1, 0]
    assert proposes.tolist() == [True, True, True]
    gamma, rho, proposes = consensus_stats(np.array([[3, -1, 4]]), np.ones((1, 3)),
                                           np.array([3, 4, 4]))
    assert gamma.tolist() == [1, 0, 0] and rho.tolist() == [1, 0, 0]
    assert proposes.tolist() == [True, False, False]


def test_a_book_with_a_consensus_scores_it_per_window():
    """Two rounds whose windows overlap read different consensus paths over the same
    positions; the members' rows are untouched."""
    book = RoundBook(3, 2, corrected=False, consensus={2: [0, 1]})
    book.open(0, 0)
    book.open(1, 1)
    argmax = np.array([[4, 6, 1], [4, 7, 8], [-1, -1, -1]])
    hit = (argmax == np.array([4, 7, 8])).astype(float)
    gamma = np.vstack([hit[:2], np.full(3, np.nan)])
    book.record([4, 7, 8], gamma, gamma, argmax >= 0, argmax, hit)
    w0, w1 = book.pop_completed()
    # from 0: 4 (both), then 6 (tie, first member): rejected; from 1: 6 vs 7 tie -> 6
    assert w0.gamma[2].tolist() == [1, 0] and w1.gamma[2].tolist() == [0, 0]
    assert w0.gamma[:2].tolist() == hit[:2, :2].tolist()


def test_a_book_with_a_consensus_refuses_missing_argmaxes_and_bad_rows():
    book = RoundBook(3, 2, consensus={2: [0, 1]})
    book.open(0, 0)
    with pytest.raises(ValueError, match="argmax and p_argmax"):
        book.record([1, 2], np.zeros((3, 2)), np.zeros((3, 2)))
    for bad in ({2: [2, 1]}, {3: [0]}, {2: []}, {2: [1], 1: [0]}):
        with pytest.raises(ValueError, match="consensus must map"):
            RoundBook(3, 2, consensus=bad)


def test_a_bad_consensus_setting_is_refused(models):
    target, drafters = models
    with pytest.raises(ValueError, match="consensus must be True or False"):
        HedgeSpecDecoder(target, drafters, consensus="yes")
