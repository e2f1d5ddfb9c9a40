"""SuffixIndex against a brute-force longest-suffix-match reference; its memory cap; the
SuffixDrafter's protocol, abstention, adaptive draft length, learning from the stream; lossless
decoding with it in a HedgeSpec pool (greedy: equal outputs; sampled: chi-square)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from spec_adapters.core.proposal import PointMass, Sparse, warp
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters import PromptLookupDrafter, SuffixDrafter
from spec_adapters.drafters.suffix import SuffixIndex, SuffixRule
from tests.spec_adapters.drafter_contract import check_drafter_contract
from tests.spec_adapters.single_helpers import chi2_pvalue, exact_continuations, pool

torch.set_num_threads(1)
GREEDY = SamplingConfig(temperature=0.0)
WARM = SamplingConfig(temperature=0.8)


# ------------------------------------------------------------------------------ references
def brute_continuations(memory: list[list[int]], context: list[int], max_depth: int
                        ) -> tuple[int, Counter]:
    """Every position with a next token, in each stored sequence and in the context itself:
    how many tokens ending there equal the context's last ones (at most ``max_depth``); the
    longest such length over all positions and the next tokens of the positions reaching it."""
    found = []
    for seq in [*memory, context]:
        for p in range(len(seq) - 1):
            m = 0
            while m < max_depth and m <= p and m < len(context) \
                    and seq[p - m] == context[len(context) - 1 - m]:
                m += 1
            if m:
                found.append((m, seq[p + 1]))
    if not found:
        return 0, Counter()
    best = max(m for m, _ in found)
    return best, Counter(t for m, t in found if m == best)


def kept_sequences(committed: list[list[int]], cap: int) -> list[list[int]]:
    """The newest whole sequences that fit in ``cap`` tokens (an oversized one: its last
    ``cap`` tokens)."""
    out, total = [], 0
    for seq in reversed([s[-cap:] for s in committed if s]):
        if total + len(seq) > cap:
            break
        out.insert(0, seq)
        total += len(seq)
    return out


def _as_counter(found) -> Counter:
    return Counter(dict(zip(found.tokens.tolist(), found.counts.tolist(), strict=True)))


# ------------------------------------------------------------------------------ the index
@pytest.mark.parametrize(("vocab", "max_depth", "seq_len"), [(2, 4, 30), (3, 6, 120), (5, 24, 30),
                                                            (40, 3, 30)])
def test_continuations_equal_brute_force_longest_suffix_match(vocab, max_depth, seq_len):
    rng = np.random.default_rng(vocab * 100 + max_depth)
    for trial in range(12):
        memory = [rng.integers(0, vocab, size=int(rng.integers(0, seq_len))).tolist()
                  for _ in range(int(rng.integers(0, 5)))]
        if memory and trial % 2:  # a repeated token run: long self-overlapping matches
            memory.append([int(rng.integers(0, vocab))] * int(rng.integers(2, 12)))
        idx = SuffixIndex(max_tokens=10_000, max_depth=max_depth)
        for seq in memory:
            idx.commit(seq)
        for _ in range(10):
            own = rng.integers(0, vocab, size=int(rng.integers(1, 25))).tolist()
            if memory and rng.random() < 0.5:  # end on a copy of a stored span: global matches
                seq = memory[int(rng.integers(0, len(memory)))]
                a = int(rng.integers(0, len(seq) + 1))
                own += seq[a:a + int(rng.integers(1, 10))]
            length, counts = brute_continuations(memory, own, max_depth)
            got = idx.continuations(np.array(own))
            assert got.length == length, (memory, own)
            assert _as_counter(got) == counts, (memory, own)
            assert got.tokens.dtype == np.int64 and np.all(np.diff(got.tokens) > 0)


def test_own_context_and_memory_are_pooled_and_the_longer_match_wins():
    idx = SuffixIndex(max_depth=8)
    idx.commit([7, 1, 2, 3, 9])
    idx.commit([1, 2, 3, 9, 5])
    # context ends in 1 2 3: both stored sequences match 3 tokens; the context's own
    # occurrence of "2 3" matches 2 only, so it does not count
    got = idx.continuations([2, 3, 4, 1, 2, 3])
    assert (got.length, _as_counter(got)) == (3, Counter({9: 2}))
    # a tie across sources: the context's own "1 2 3" then 6 counts with the memory's
    got = idx.continuations([1, 2, 3, 6, 1, 2, 3])
    assert (got.length, _as_counter(got)) == (3, Counter({9: 2, 6: 1}))
    # the own context matches longer (4 tokens): the memory no longer counts
    got = idx.continuations([0, 1, 2, 3, 6, 0, 1, 2, 3])
    assert (got.length, _as_counter(got)) == (4, Counter({6: 1}))
    # matches never cross the boundary between two stored sequences (9 | 1 2)
    assert idx.continuations([9, 1, 2]).length == 2
    # a sequence's last token has no next token: 5 alone matches nothing
    assert idx.continuations([5]).length == 0
    assert idx.continuations([]).length == 0


def test_memory_stays_under_the_cap_evicting_the_oldest_sequences():
    rng = np.random.default_rng(0)
    cap = 500
    idx = SuffixIndex(max_tokens=cap, max_depth=6)
    committed = []
    for i in range(300):
        seq = rng.integers(0, 7, size=int(rng.integers(0, 90 if i % 50 else 700))).tolist()
        committed.append(seq)
        idx.commit(seq)
        want = kept_sequences(committed, cap)
        assert idx.n_tokens == sum(map(len, want)) <= cap
        assert idx.nbytes <= 12 * cap + 4
        if i % 25 == 0:
            assert [s.tolist() for s in idx.sequences()] == want
            ctx = rng.integers(0, 7, size=12).tolist()
            length, counts = brute_continuations(want, ctx, 6)
            got = idx.continuations(ctx)
            assert (got.length, _as_counter(got)) == (length, counts)
    assert idx.nbytes == 12 * idx.n_tokens - 4 * idx.n_sequences + 4
    idx.reset()
    assert (idx.n_tokens, idx.n_sequences, idx.sequences()) == (0, 0, [])


def test_bad_parameters_and_input_raise_and_leave_the_memory_unchanged():
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
        SuffixIndex(max_tokens=0)
    with pytest.raises(ValueError, match="max_depth must be an integer >= 1"):
        SuffixIndex(max_depth=2.5)
    with pytest.raises(ValueError, match="min_match must be an integer >= 1"):
        SuffixRule(min_match=0)
    with pytest.raises(ValueError, match=r"min_prob must be a number in \[0, 1\]"):
        SuffixRule(min_prob=1.5)
    with pytest.raises(ValueError, match="spec_factor must be a finite number > 0"):
        SuffixRule(spec_factor=0)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 1"):
        SuffixDrafter(0)
    with pytest.raises(ValueError, match="index is given"):
        SuffixDrafter(8, index=SuffixIndex(), max_tokens=10)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        SuffixDrafter(8, name="")
    idx = SuffixIndex()
    idx.commit([1, 2, 3])
    for bad, match in (([1, -2], "outside"), ([[1, 2]], "1-D"), ([1.5], "integer")):
        with pytest.raises(ValueError, match=match):
            idx.commit(bad)
    assert [s.tolist() for s in idx.sequences()] == [[1, 2, 3]]
    d = SuffixDrafter(8)
    with pytest.raises(RuntimeError, match="propose called before start"):
        d.propose(2, GREEDY)
    d.start(torch.tensor([1, 2, 1]))
    with pytest.raises(ValueError, match=r"outside \[0, 8\)"):
        d.extend(torch.tensor([9]))
    with pytest.raises(ValueError, match=r"k .* must be an integer >= 1"):
        d.propose(0, GREEDY)
    assert d.propose(2, GREEDY).tokens.tolist() == [2]  # unchanged: 1 -> 2, budget 1


# ------------------------------------------------------------------------------ the drafter
def test_suffix_drafter_keeps_the_protocol():
    # learn=False: the contract's second start must find the memory as it was
    check_drafter_contract(SuffixDrafter(16, learn=False), [3, 4, 5, 3, 4, 5, 3, 4], 16)
    d = SuffixDrafter(16, min_prob=0.0, learn=False)
    d.index.commit([1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 6])
    check_drafter_contract(d, [9, 1, 2], 16)  # matches only in the memory, several followers
    assert d.index.n_sequences == 1  # three starts, nothing committed


def test_rows_are_the_empirical_continuations_and_warp_in_every_form():
    d = SuffixDrafter(10, min_prob=0.0)
    d.index.commit([4, 1, 4, 2, 4, 2, 4, 7])
    d.start(torch.tensor([0, 4]))  # "4" is followed by 1, 2, 2, 7
    rows = d.extend(torch.tensor([3]))
    assert isinstance(rows, Sparse) and float(rows.lam[0]) == 0.0
    want = torch.zeros(10)
    want[[1, 2, 7]] = torch.tensor([0.25, 0.5, 0.25])
    torch.testing.assert_close(rows.dense()[0], want)
    assert warp(rows, GREEDY).tokens.tolist() == [2]
    torch.testing.assert_close(warp(rows, WARM).dense()[0], want ** 1.25 / (want ** 1.25).sum())
    # top-k / top-p go dense; tokens never seen after "4" keep q = 0 (no NaN from log 0)
    torch.testing.assert_close(warp(rows, SamplingConfig(temperature=1.0, top_k=1)).dense()[0],
                               torch.eye(10)[2])
    torch.testing.assert_close(warp(rows, SamplingConfig(temperature=1.0, top_p=0.9)).dense()[0],
                               want)
    torch.testing.assert_close(rows.prob(torch.tensor([2, 5])), torch.tensor([0.5, 0.0]))
    # pruning: with min_prob 0.3 only 2 survives, renormalised to a point mass
    pruned = SuffixDrafter(10, min_prob=0.3, index=d.index)
    pruned.start(torch.tensor([0, 4]))
    torch.testing.assert_close(pruned.extend(torch.tensor([3])).dense()[0],
                               torch.eye(10)[2])


def test_abstains_where_nothing_matches_or_everything_is_rare():
    d = SuffixDrafter(30)
    d.start(torch.tensor([1, 2, 3]))
    for sampling in (GREEDY, WARM):
        tokens, q = d.propose(4, sampling, torch.Generator().manual_seed(0))
        assert tokens.shape == (0,) and len(q) == 0
    rows = d.extend(torch.tensor([1, 2]))  # after [1 2 3]: nothing; after [1 2 3 1]: 1 -> 2
    assert warp(rows, GREEDY).tokens.tolist() == [-1, 2]
    assert float(rows.dense()[0].sum()) == 0.0
    spread = SuffixDrafter(30, min_prob=0.3)  # 5 is followed by 10, 11, 12, 13: 0.25 each
    spread.start(torch.tensor([5, 10, 5, 11, 5, 12, 5, 13, 5]))
    assert spread.propose(3, GREEDY).tokens.shape == (0,)
    short = SuffixDrafter(30, min_match=3)  # the match "6 5" is 2 tokens long
    short.start(torch.tensor([6, 5, 10, 6, 5]))
    assert short.propose(3, GREEDY).tokens.shape == (0,)
    assert SuffixDrafter(30, min_match=2).index is not short.index  # memories are separate
    long_enough = SuffixDrafter(30, min_match=2)
    long_enough.start(torch.tensor([6, 5, 10, 6, 5]))
    assert long_enough.propose(3, GREEDY).tokens.tolist() == [10, 6]  # budget 2


@pytest.mark.parametrize(("spec_factor", "want"), [(1.0, [6, 7, 8, 9]), (0.5, [6, 7]),
                                                   (0.1, [6]), (3.0, [6, 7, 8, 9, 10, 11])])
def test_draft_length_adapts_to_the_match_length(spec_factor, want):
    d = SuffixDrafter(20, spec_factor=spec_factor)
    d.index.commit([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    d.start(torch.tensor([0, 2, 3, 4, 5]))  # a 4-token match
    tokens, q = d.propose(6, GREEDY)
    assert tokens.tolist() == want and isinstance(q, PointMass)


def test_learns_from_the_stream_a_repeated_query_gets_long_drafts():
    rng = np.random.default_rng(0)
    prompt = torch.from_numpy(rng.permutation(1000)[:12])
    answer = torch.from_numpy(rng.permutation(1000)[:10])
    d = SuffixDrafter(1000, max_depth=8)
    d.start(prompt)
    assert d.propose(8, GREEDY).tokens.numel() == 0  # nothing repeats yet
    d.extend(answer)
    d.start(prompt)  # commits prompt + answer
    assert [s.tolist() for s in d.index.sequences()] == [prompt.tolist() + answer.tolist()]
    assert d.propose(8, GREEDY).tokens.tolist() == answer[:8].tolist()
    d.reset_memory()
    d.start(prompt)
    assert d.propose(8, GREEDY).tokens.numel() == 0


# ------------------------------------------------------------------------------ decoding
def test_greedy_decoding_with_suffix_and_prompt_lookup_equals_the_target():
    target, _ = pool(vocab_size=96)
    suffix = SuffixDrafter(96)
    dec = HedgeSpecDecoder(target, [suffix, PromptLookupDrafter(96)], draft_length=4,
                           policy="fixed:0")
    ids = torch.tensor([[5, 17, 40, 9, 33, 5, 17]])
    ref = target.generate(ids, do_sample=False, max_new_tokens=30, eos_token_id=None,
                          pad_token_id=0)
    first = dec.generate(ids, max_new_tokens=30, seed=0)
    second = dec.generate(ids, max_new_tokens=30, seed=0)  # the first run is in the memory
    assert first.sequences.tolist() == ref.tolist() == second.sequences.tolist()
    assert second.stats["mean_accepted_tokens"] > first.stats["mean_accepted_tokens"]
    assert second.stats["mean_accepted_tokens"] > 4.5  # nearly every draft accepted whole
    hedge = HedgeSpecDecoder(target, [SuffixDrafter(96), PromptLookupDrafter(96)],
                             draft_length=3)
    for seed in range(2):
        assert hedge.generate(ids, max_new_tokens=20, seed=seed).sequences.tolist() \
            == ref[:, :ids.shape[1] + 20].tolist()


def test_sampled_continuations_follow_the_target_distribution():
    V, n_samples = 12, 250
    target, _ = pool(vocab_size=V, peak=20.0, layers=1)
    prompt = torch.tensor([[1, 5, 7]])
    suffix = SuffixDrafter(V, min_prob=0.0)
    rng = np.random.default_rng(0)
    for _ in range(20):  # a memory of the target's own continuations and of noise
        out = target.generate(prompt, do_sample=True, max_new_tokens=4, pad_token_id=0)
        suffix.index.commit(out[0].tolist())
        suffix.index.commit(rng.integers(0, V, size=8).tolist())
    dec = HedgeSpecDecoder(target, [suffix, PromptLookupDrafter(V)], draft_length=2)
    exact = exact_continuations(target, prompt, 3, lambda logits: torch.softmax(logits, -1))
    counts, drafted = Counter(), 0
    for seed in range(n_samples):  # the memory keeps growing: drafts change along the stream
        out = dec.generate(prompt, max_new_tokens=3, temperature=1.0, seed=seed)
        counts[tuple(out.sequences[0, 3:].tolist())] += 1
        drafted += sum(a for a, c in zip(out.stats["accepted"], out.stats["chosen"],
                                         strict=True) if c == 0)
    assert drafted > n_samples // 4  # the suffix drafter's drafts were accepted often
    assert chi2_pvalue(counts, exact, n_samples) > 1e-3
    sharper = exact_continuations(target, prompt, 3,
                                  lambda logits: torch.softmax(logits / 0.8, -1))
    assert chi2_pvalue(counts, sharper, n_samples) < 1e-4  # the test has power
