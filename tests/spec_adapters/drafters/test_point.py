"""The point-mass drafters: prompt lookup, the corpus n-gram rule (brute force), the suffix draft
(the torch suffix drafter's greedy draft on the same index), the consensus (brute force over
every path) and the draft table with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.drafters.ngram import NGramDrafter
from spec_adapters.drafters.point import (
    Consensus,
    CorpusNGram,
    PointDrafter,
    PromptLookup,
    Proposal,
    SuffixDraft,
    propose_all,
    solo_seconds,
)
from spec_adapters.drafters.suffix import SuffixDrafter

V = 256


def _ngram_file(folder: Path, name: str, docs: list[list[int]]) -> None:
    NGramDrafter.from_corpus(docs, V, order=3, name=name).save(folder / f"ngram-{name}.npz")


def test_prompt_lookup_copies_the_most_recent_match():
    h = np.array([5, 6, 7, 1, 5, 6, 9, 2, 5, 6])
    assert PromptLookup(2).draft(h, 3).tolist() == [9, 2, 5]
    assert PromptLookup(3).draft(h, 3).tolist() == []  # [2, 5, 6] never occurred before
    # the copied occurrence (5, 6 at 4..5) shares 2 tokens with the end (7, 1 / 2, 5 differ):
    # the rule of succession on a 2-token match, m / (m + k) for k tokens
    got = PromptLookup(2).propose(h, 3)
    np.testing.assert_allclose(got.confidence, [2 / 3, 3 / 4, 4 / 5])
    np.testing.assert_allclose(np.cumprod(got.confidence), [2 / 3, 2 / 4, 2 / 5])
    longer = np.array([1, 2, 3, 4, 8, 1, 2, 3, 4])  # the match runs 4 tokens back
    np.testing.assert_allclose(PromptLookup(2).propose(longer, 2).confidence, [4 / 5, 5 / 6])
    with pytest.raises(ValueError, match="n-gram size"):
        PromptLookup(0)


def test_corpus_ngram_follows_the_longest_context_brute_force(tmp_path):
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 6, size=40).tolist() for _ in range(5)]
    _ngram_file(tmp_path, "toy", docs)
    d = CorpusNGram.load(tmp_path / "ngram-toy.npz")

    def oracle_next(ctx):  # count every (context, next) pair by hand; longest context wins
        for n in range(min(3, len(ctx)), 0, -1):
            counts: dict[int, int] = {}
            for doc in docs:
                for s in range(len(doc) - n):
                    if doc[s:s + n] == ctx[-n:]:
                        counts[doc[s + n]] = counts.get(doc[s + n], 0) + 1
            if counts:
                best = max(counts.values())
                return (min(t for t, c in counts.items() if c == best),
                        best / sum(counts.values()))
        return None

    for _ in range(30):
        ctx = rng.integers(0, 6, size=5).tolist()
        want, ratios = [], []
        while len(want) < 4:
            nxt = oracle_next(ctx + want)
            if nxt is None:
                break
            want.append(nxt[0])
            ratios.append(nxt[1])
        got = d.propose(np.array(ctx), 4)
        assert got.tokens.tolist() == want
        np.testing.assert_allclose(got.confidence, ratios)  # the count ratio


@pytest.mark.parametrize("cw", [0.5, 4.0])
def test_corpus_ngram_with_the_request_counted_in_brute_force(tmp_path, cw):
    """context_weight: the corpus counts plus cw times the request's own (prompt, output,
    drafts so far), at the longest order found in either."""
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 6, size=30).tolist() for _ in range(3)]
    _ngram_file(tmp_path, "toy", docs)
    d = CorpusNGram.load(tmp_path / "ngram-toy.npz")
    d.context_weight = cw  # as saved by NGramDrafter(context_weight=cw)

    def oracle_next(h):
        for n in range(min(3, len(h)), 0, -1):
            counts: dict[int, float] = {}
            for doc, w in [*((x, 1.0) for x in docs), (h, cw)]:
                for s in range(len(doc) - n):
                    if doc[s:s + n] == h[-n:]:
                        counts[doc[s + n]] = counts.get(doc[s + n], 0.0) + w
            if counts:
                best = max(counts.values())
                return min(t for t, c in counts.items() if c == best)
        return None

    differs = 0
    for _ in range(40):
        h = rng.integers(0, 9, size=int(rng.integers(2, 25))).tolist()  # 6..8: request only
        want: list[int] = []
        while len(want) < 4 and (nxt := oracle_next(h + want)) is not None:
            want.append(nxt)
        got = d.draft(np.array(h), 4).tolist()
        assert got == want
        d.context_weight = 0.0
        plain = d.draft(np.array(h), 4).tolist()
        d.context_weight = cw
        differs += plain != got
    assert differs  # the request's own n-grams changed some drafts


def _suffix_reference(draft: SuffixDraft, history: np.ndarray, k: int):
    """SuffixDraft's rule written out over the index's Python queries: each token the rule's
    greedy choice of the continuations after the history plus the drafts so far."""
    ctx, conf, budget = list(history), [], k
    for j in range(k):
        found = draft.index.continuations(np.array(ctx))
        budget = min(k, draft.rule.budget(found.length)) if j == 0 else budget
        pick = draft.rule.greedy(found) if j < budget else None
        if pick is None:
            break
        ctx.append(pick[0])
        conf.append(pick[1])
    return ctx[len(history):], conf


@pytest.mark.parametrize(("vocab", "min_prob", "spec_factor"), [
    (6, 0.1, 1.0), (30, 0.4, 0.5), (3, 0.0, 2.0), (12, 0.6, 1.0)])
def test_the_compiled_suffix_draft_is_its_rule_over_the_index(vocab, min_prob, spec_factor):
    rng = np.random.default_rng(vocab)
    draft = SuffixDraft(max_tokens=300, max_depth=5, min_prob=min_prob, spec_factor=spec_factor)
    drafted = 0
    for _ in range(60):
        draft.commit(rng.integers(0, vocab, size=int(rng.integers(1, 50))))
        history = rng.integers(0, vocab, size=int(rng.integers(1, 40)))
        got = draft.propose(history, 5)
        tokens, conf = _suffix_reference(draft, history, 5)
        assert got.tokens.dtype == np.int64 and got.tokens.tolist() == tokens
        np.testing.assert_array_equal(got.confidence, conf)
        drafted += len(tokens)
    assert drafted >= 10  # the rule drafted, not only abstained


def test_suffix_draft_is_the_suffix_drafters_greedy_draft_on_the_same_index():
    rng = np.random.default_rng(0)
    for spec_factor in (1.0, 0.5):
        draft = SuffixDraft(max_tokens=400, max_depth=6, spec_factor=spec_factor)
        torch_side = SuffixDrafter(8, index=draft.index, spec_factor=spec_factor, learn=False)
        for _ in range(30):
            draft.commit(rng.integers(0, 8, size=int(rng.integers(1, 40))))
            history = rng.integers(0, 8, size=int(rng.integers(1, 30)))
            got = draft.draft(history, 4)
            assert got.dtype == np.int64 and np.array_equal(got, draft.draft(history, 4))
            torch_side.start(torch.from_numpy(history))
            want = torch_side.propose(4, SamplingConfig(temperature=0.0)).tokens
            assert got.tolist() == want.tolist()
    fresh = SuffixDraft()
    assert fresh.draft(np.array([1, 2, 3]), 4).tolist() == []  # nothing matches
    fresh.commit(np.array([1, 2, 3, 4, 5, 6]))
    assert fresh.draft(np.array([9, 2, 3]), 4).tolist() == [4, 5]  # a 2-token match: 2 tokens
    np.testing.assert_allclose(fresh.propose(np.array([9, 2, 3]), 4).confidence, [1.0, 1.0])
    fresh.commit(np.array([2, 3, 7, 5, 2, 3, 4, 6]))  # "2 3" went on with 4 twice, 7 once
    got = fresh.propose(np.array([9, 2, 3]), 4)
    assert got.tokens[0] == 4
    assert got.confidence[0] == pytest.approx(2 / 3)  # the node's empirical probability


def _majority_path(table: np.ndarray) -> tuple[list[int], list[float]]:
    """The consensus by its definition, brute force: among every prefix of every member's
    draft, depth by depth, the one the most members share (ties: the earliest member's)."""
    path: list[int] = []
    shares = []
    for j in range(table.shape[1]):
        behind = [m for m in range(len(table)) if list(table[m, :j]) == path and table[m, j] >= 0]
        if not behind:
            break
        counts = {}
        for m in behind:
            counts.setdefault(int(table[m, j]), []).append(m)
        best = sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))[0]
        path.append(best[0])
        shares.append(len(best[1]) / len(behind))
    return path, shares


@pytest.mark.parametrize("seed", range(6))
def test_consensus_is_the_majority_path_with_its_vote_shares(seed):
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 3, size=(9, 4))  # three tokens: many agreements and ties
    for m in range(9):  # members stop drafting at random depths (-1 from there)
        table[m, rng.integers(0, 5):] = -1
    got = Consensus.vote(table)
    path, shares = _majority_path(table)
    assert got.tokens.tolist() == path
    np.testing.assert_allclose(got.confidence, shares)


def test_consensus_breaks_ties_by_the_earliest_member_and_stops_where_the_path_ends():
    table = np.array([[7, 1, -1], [8, 2, 3], [8, 2, -1], [7, 1, 5]])
    got = Consensus.vote(table)
    assert got.tokens.tolist() == [7, 1, 5]  # 7 and 8 tie 2-2: member 0's; then 1 (2 of 2)
    np.testing.assert_allclose(got.confidence, [0.5, 1, 1])  # the path's only voter at 2
    assert Consensus.vote(np.full((3, 2), -1)).tokens.tolist() == []


class _Fixed(PointDrafter):
    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.name, self.calls = tokens, f"fixed-{tokens}", 0

    def propose(self, history: np.ndarray, k: int) -> Proposal:
        self.calls += 1
        t = np.asarray(self.tokens[:k], np.int64)
        return Proposal(t, np.ones(len(t)))


def test_the_table_votes_from_the_members_rows_and_drafts_them_when_left_out():
    a, b, c = _Fixed([4, 5, 6]), _Fixed([4, 5, 9]), _Fixed([3])
    pool = [a, b, c]
    pool.append(Consensus(pool))
    h = np.arange(5)
    tokens, confidence, _s = propose_all(pool, h, 3)
    assert tokens[3].tolist() == [4, 5, 6]  # 4 by 2 of 3; 5 by 2 of 2; 6 and 9 tie: a's
    np.testing.assert_allclose(confidence[3], [2 / 3, 1, 1 / 2])
    assert tokens[3].tolist() == Consensus(pool[:3]).propose(h, 3).tokens.tolist()
    assert [d.calls for d in (a, b, c)] == [2, 2, 2]  # once for the table, once standalone
    # the consensus alone: its members are drafted for it, rows and seconds filled
    tokens, _c, seconds = propose_all(pool, h, 3, rows=[3])
    assert tokens[3].tolist() == [4, 5, 6] and not np.isnan(seconds).any()
    assert solo_seconds(pool, seconds)[3] == pytest.approx(seconds.sum())
    assert solo_seconds(pool, seconds)[:3].tolist() == seconds[:3].tolist()
    # a drafter left out stays empty
    tokens, _c, seconds = propose_all(pool, h, 3, rows=[0])
    assert (tokens[1:] == -1).all() and np.isnan(seconds[1:]).all()
    with pytest.raises(ValueError, match="not in the pool"):
        propose_all([a, Consensus([a, b])], h, 3)
    with pytest.raises(ValueError, match="at least one member"):
        Consensus([])
