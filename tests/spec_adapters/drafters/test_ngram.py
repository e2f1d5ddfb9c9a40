"""NGramDrafter and PromptLookupDrafter against a naive Witten-Bell reference."""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from spec_adapters.core.proposal import PointMass, Sparse, warp
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.ngram_kernel import context_keys
from tests.spec_adapters.drafter_contract import check_drafter_contract

torch.set_num_threads(1)
GREEDY = SamplingConfig(temperature=0.0)
WARM = SamplingConfig(temperature=0.8)


def naive_witten_bell(docs, context, V, order, base, context_weight=0.0, keep=None):
    """Reference: explicit n-gram counts per document, the recursion written out; with
    ``context_weight > 0`` the context's own n-grams count too, each ``context_weight`` times;
    with ``keep``, only each context's ``keep`` most frequent continuations (lowest id first
    on ties) are counted."""
    weighted = [(d, 1.0) for d in docs] + ([(context, context_weight)] if context_weight else [])
    p = list(base)
    for n in range(1, min(order, len(context)) + 1):
        h = tuple(context[-n:])
        follow = Counter()
        for d, weight in weighted:
            for i in range(len(d) - n):
                if tuple(d[i:i + n]) == h:
                    follow[d[i + n]] += weight
        if not follow:
            break
        if keep is not None:
            follow = Counter(dict(sorted(follow.items(), key=lambda kv: (-kv[1], kv[0]))[:keep]))
        C, T = sum(follow.values()), len(follow)
        p = [(follow[x] + T * p[x]) / (C + T) for x in range(V)]
    return p


def unigram_base(docs, V, alpha):
    c = Counter(t for d in docs for t in d)
    tot = sum(c.values()) + alpha * V
    return [(c[x] + alpha) / tot for x in range(V)]


@pytest.fixture
def corpus():
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 11, size=int(rng.integers(5, 60))).tolist() for _ in range(8)]
    docs.append([12, 13, 14, 15, 11] * 3)  # a repeated phrase of ids the random docs never use
    return docs


def test_ngram_matches_naive_witten_bell(corpus):
    V, order, alpha = 16, 3, 0.5
    d = NGramDrafter.from_corpus(corpus, V, order=order, alpha=alpha)
    base = unigram_base(corpus, V, alpha)
    rng = np.random.default_rng(1)
    contexts = [c[: int(rng.integers(1, len(c)))] for c in corpus] + [[15, 15], [3, 4], [7]]
    for ctx in contexts:
        got = d.log_probs(ctx).exp().double().numpy()
        want = naive_witten_bell(corpus, ctx, V, order, base)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("keep", [1, 3])
def test_ngram_keeping_the_top_continuations_matches_naive_witten_bell(corpus, keep):
    V, order, alpha = 16, 3, 0.5
    d = NGramDrafter.from_corpus(corpus, V, order=order, alpha=alpha, max_continuations=keep)
    assert max(np.diff(o).max() for _k, o, _t, _c in d.tables) == keep  # some context pruned
    base = unigram_base(corpus, V, alpha)
    for ctx in ([3], [7], [3, 4], [15, 11], corpus[0][:9]):
        got = d.log_probs(ctx).exp().double().numpy()
        np.testing.assert_allclose(got, naive_witten_bell(corpus, ctx, V, order, base, keep=keep),
                                   rtol=1e-5, atol=1e-7)


def test_ngram_distribution_is_proper_with_full_support(corpus):
    d = NGramDrafter.from_corpus(corpus, 16, order=4)
    for ctx in ([3, 4, 5], [0], [11, 2, 9, 9]):
        p = d.log_probs(ctx).exp()
        assert math.isclose(float(p.sum()), 1.0, rel_tol=1e-5)
        assert bool((p > 0).all())


def test_ngrams_never_cross_documents():
    V = 8
    d = NGramDrafter.from_corpus([[1, 2], [3, 4]], V, order=2)
    # "2 -> 3" only exists across the boundary: context [2] must be unseen (back off to unigram)
    torch.testing.assert_close(d.log_probs([2]), d.log_probs([5]))
    assert int(d.log_probs([1]).argmax()) == 2


def test_context_keys_are_collision_free_when_exact():
    rng = np.random.default_rng(2)
    t = rng.integers(0, 50, size=2000)
    keys = context_keys(t, 3, 51)
    windows = {tuple(t[i:i + 3]) for i in range(len(t) - 2)}
    assert len(set(keys.tolist())) == len(windows)


def test_extend_rows_equal_prefix_log_probs(corpus):
    d = NGramDrafter.from_corpus(corpus, 16, order=3)
    prompt = torch.tensor([3, 4])
    chunk = torch.tensor([5, 6, 7, 3])
    d.start(prompt)
    rows = d.extend(chunk)
    assert isinstance(rows, Sparse) and len(rows) == 4
    ctx = prompt.tolist()
    for j, t in enumerate(chunk.tolist()):
        torch.testing.assert_close(rows.dense()[j].log(), d.log_probs(ctx))
        ctx.append(t)


def test_greedy_propose_follows_the_corpus_and_commits_nothing(corpus):
    d = NGramDrafter.from_corpus(corpus, 16, order=4)
    d.start(torch.tensor([12, 13]))
    tokens, q = d.propose(5, GREEDY, None)
    assert tokens.tolist() == [14, 15, 11, 12, 13]
    assert isinstance(q, PointMass) and torch.equal(q.tokens, tokens)
    again, _ = d.propose(5, GREEDY, None)
    assert torch.equal(tokens, again)  # propose did not move the context
    rows = d.extend(torch.tensor([14]))
    torch.testing.assert_close(rows.dense()[0].log(), d.log_probs([12, 13]))


def test_sampled_propose_uses_the_warped_q_and_is_seeded(corpus):
    d = NGramDrafter.from_corpus(corpus, 16, order=3)
    d.start(torch.tensor([3, 4]))
    a, qa = d.propose(6, WARM, torch.Generator().manual_seed(5))
    b, qb = d.propose(6, WARM, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and torch.equal(qa.dense(), qb.dense())
    assert isinstance(qa, Sparse)  # temperature alone keeps the mixture sparse
    ctx = [3, 4]
    for j, t in enumerate(a.tolist()):
        torch.testing.assert_close(qa.dense()[j], WARM.probs(d.log_probs(ctx)))
        ctx.append(t)


def test_save_load_roundtrip(tmp_path, corpus):
    d = NGramDrafter.from_corpus(corpus, 16, order=3, alpha=0.3, name="toy")
    path = d.save(tmp_path / "toy.npz")
    e = NGramDrafter.load(path)
    assert (e.name, e.order, e.vocab_size, e.n_tokens) == ("toy", 3, 16, d.n_tokens)
    for ctx in ([3, 4], [1], [9, 9, 9]):
        torch.testing.assert_close(e.log_probs(ctx), d.log_probs(ctx))
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="not a saved NGramDrafter"):
        NGramDrafter.load(tmp_path / "bad.npz")


def test_build_from_texts_with_a_tokenizer():
    class CharTok:  # a stand-in with the transformers call signature
        def __len__(self):
            return 128

        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[ord(c) for c in t] for t in texts]}

    d = NGramDrafter.from_texts(["SELECT * FROM t;", "SELECT a FROM b;"], CharTok(), order=4)
    d.start(torch.tensor([ord(c) for c in "SELE"]))
    tokens, _ = d.propose(3, GREEDY, None)
    assert "".join(map(chr, tokens.tolist())) == "CT "


def test_bad_input_raises(corpus):
    d = NGramDrafter.from_corpus(corpus, 16)
    with pytest.raises(RuntimeError, match="before start"):
        d.propose(2, GREEDY, None)
    with pytest.raises(ValueError, match="outside"):
        d.start(torch.tensor([3, 99]))
    d.start(torch.tensor([3]))
    with pytest.raises(ValueError, match=r"k \(number of draft tokens\) must be an integer >= 1"):
        d.propose(0, GREEDY, None)
    with pytest.raises(ValueError, match="outside"):
        NGramDrafter.from_corpus([[1, 2, 16]], 16)
    with pytest.raises(ValueError, match="order"):
        NGramDrafter.from_corpus([[1, 2]], 16, order=0)
    with pytest.raises(ValueError, match="max_continuations must be >= 1"):
        NGramDrafter.from_corpus([[1, 2]], 16, max_continuations=0)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_both_drafters_reject_a_bad_draft_length_and_stay_usable(corpus, k):
    for d in (NGramDrafter.from_corpus(corpus, 16), PromptLookupDrafter(16)):
        d.start(torch.tensor([3, 4, 3]))
        with pytest.raises(ValueError, match=r"k \(number of draft tokens\) must be"):
            d.propose(k, GREEDY, None)
        tokens, q = d.propose(2, GREEDY, None)
        assert tokens.shape == (2,) and len(q) == 2


def naive_prompt_lookup(context, V, max_ngram):
    """Reference: count continuations of each trailing n-gram's earlier occurrences."""
    docs = [context]
    return naive_witten_bell(docs, context, V, max_ngram, [1.0 / V] * V)


def test_prompt_lookup_matches_naive_reference():
    V = 10
    rng = np.random.default_rng(3)
    for _ in range(5):
        ctx = rng.integers(0, 4, size=30).tolist()
        d = PromptLookupDrafter(V, max_ngram=3, abstain=False)
        d.start(torch.tensor(ctx[:10]))
        rows = d.extend(torch.tensor(ctx[10:])).dense()
        for j in range(len(ctx) - 10):
            want = naive_prompt_lookup(ctx[: 10 + j], V, 3)
            np.testing.assert_allclose(rows[j].double().numpy(), want, rtol=1e-5)


def test_prompt_lookup_copies_from_the_prompt_and_from_its_own_drafts():
    V = 50
    prompt = [10, 11, 12, 13, 14, 15, 20, 21, 10, 11]
    d = PromptLookupDrafter(V, max_ngram=2)
    d.start(torch.tensor(prompt))
    tokens, q = d.propose(6, GREEDY, None)
    # copies 12..15 from the prompt, then 20, 21 (which followed 15 once)
    assert tokens.tolist() == [12, 13, 14, 15, 20, 21]
    assert torch.allclose(q.dense().sum(-1), torch.ones(6))
    # no match at all: uniform without abstention
    d = PromptLookupDrafter(V, max_ngram=2, abstain=False)
    d.start(torch.tensor([1, 2, 3]))
    p = d.extend(torch.tensor([4])).dense()[0]
    torch.testing.assert_close(p, torch.full((V,), 1.0 / V))


def test_both_drafters_keep_the_protocol(corpus):
    check_drafter_contract(NGramDrafter.from_corpus(corpus, 16), [12, 13, 3], 16)
    check_drafter_contract(NGramDrafter.from_corpus(corpus, 16, context_weight=2.0),
                           [3, 4, 3, 4, 3], 16)
    check_drafter_contract(PromptLookupDrafter(16), [12, 13, 14, 12, 13], 16)


def test_context_weight_adds_the_querys_own_ngrams(corpus):
    V, order, alpha, w = 16, 3, 0.5, 2.0
    d = NGramDrafter.from_corpus(corpus, V, order=order, alpha=alpha, context_weight=w)
    base = unigram_base(corpus, V, alpha)
    ctx = [9, 10, 9, 10, 12, 13, 14, 9, 10, 9, 10, 12]
    d.start(torch.tensor(ctx[:4]))
    rows = d.extend(torch.tensor(ctx[4:])).dense()
    for j in range(len(ctx) - 4):
        want = naive_witten_bell(corpus, ctx[:4 + j], V, order, base, w)
        np.testing.assert_allclose(rows[j].double().numpy(), want, rtol=1e-5, atol=1e-7)
    # pure corpus drafter: the query's repeats do not count
    plain = NGramDrafter.from_corpus(corpus, V, order=order, alpha=alpha)
    plain.start(torch.tensor(ctx[:4]))
    np.testing.assert_allclose(plain.extend(torch.tensor(ctx[4:])).dense()[-1].double().numpy(),
                               naive_witten_bell(corpus, ctx[:-1], V, order, base), rtol=1e-5)
    # round trip keeps the weight
    assert NGramDrafter.load(d.save(Path(tempfile.mkdtemp()) / "d.npz")).context_weight == w


def test_context_weight_lets_greedy_drafts_copy_the_prompt():
    V = 40
    d = NGramDrafter.from_corpus([[1, 2, 3, 4]], V, order=2, context_weight=5.0)
    d.start(torch.tensor([30, 31, 32, 33, 20, 30, 31]))
    tokens, _ = d.propose(3, GREEDY, None)
    assert tokens.tolist() == [32, 33, 20]


def test_document_weights_equal_repeating_the_document(corpus):
    weighted = NGramDrafter.from_corpus(corpus[:3], 16, order=3, weights=[3.0, 1.0, 2.0])
    repeated = NGramDrafter.from_corpus([corpus[0]] * 3 + [corpus[1]] + [corpus[2]] * 2, 16,
                                        order=3)
    for ctx in ([1], [2, 3], corpus[0][:5], corpus[2][-3:]):
        torch.testing.assert_close(weighted.log_probs(ctx), repeated.log_probs(ctx))
    with pytest.raises(ValueError, match="one positive number per document"):
        NGramDrafter.from_corpus(corpus[:2], 16, weights=[1.0, 0.0])


def test_prompt_lookup_abstains_where_nothing_matches_and_stops_its_draft():
    V = 30
    d = PromptLookupDrafter(V, max_ngram=2)  # abstain is the default
    d.start(torch.tensor([1, 2, 3]))
    for sampling in (GREEDY, WARM):
        tokens, q = d.propose(4, sampling, torch.Generator().manual_seed(0))
        assert tokens.shape == (0,) and len(q) == 0  # no earlier occurrence of 3
    d.start(torch.tensor([5, 6, 7, 5]))
    tokens, q = d.propose(4, GREEDY, None)
    assert tokens.tolist() == [6, 7, 5, 6]  # copies, the draft's own repeats included
    d.start(torch.tensor([5, 6, 9, 5]))
    tokens, _ = d.propose(4, GREEDY, None)
    assert tokens.tolist() == [6, 9, 5, 6]
    # extend: the zero measure where it would have abstained, the mixture elsewhere
    d.start(torch.tensor([1, 2]))
    rows = d.extend(torch.tensor([1, 8]))  # after [1, 2]: no match; after [1, 2, 1]: 2 follows 1
    dense = rows.dense()
    assert float(dense[0].sum()) == 0.0 and abs(float(dense[1].sum()) - 1) < 1e-6
    assert warp(rows, GREEDY).tokens.tolist() == [-1, 2]
    warm = warp(rows, WARM).dense()
    assert float(warm[0].sum()) == 0.0
    torch.testing.assert_close(warm[1], WARM.probs(dense[1].log()))


def test_ngram_abstains_only_when_asked_and_nothing_matches(corpus):
    quiet = NGramDrafter.from_corpus(corpus, 20, order=3, abstain=True)
    loud = NGramDrafter.from_corpus(corpus, 20, order=3)
    for d in (quiet, loud):
        d.start(torch.tensor([3, 19]))  # 19 never occurs in the corpus
    assert quiet.propose(3, GREEDY, None).tokens.shape == (0,)
    tokens, _ = loud.propose(3, GREEDY, None)
    assert tokens.shape == (3,)
    assert int(tokens[0]) == int(loud.log_probs([3, 19]).argmax())  # the unigram base's argmax


def test_greedy_ngram_work_builds_nothing_of_the_vocabulary_size(corpus, monkeypatch):
    """Under greedy decoding an n-gram drafter's propose, extend and warp never allocate a
    tensor with V entries (V chosen larger than any support here)."""
    V = 5000
    d = NGramDrafter.from_corpus(corpus, V, order=3, context_weight=1.0)
    d._base.order, d._base.numpy, d._base.top  # noqa: B018 - computed once per drafter, not per round
    big = []

    class Watch(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, tuple | list) else [out]):
                if isinstance(t, torch.Tensor) and t.numel() >= V:
                    big.append(getattr(func, "__name__", str(func)))
            return out

    d.start(torch.tensor([3, 4, 12, 13]))
    with Watch():
        tokens, q = d.propose(5, GREEDY, None)
        rows = warp(d.extend(tokens), GREEDY)
    assert big == []
    assert isinstance(q, PointMass) and isinstance(rows, PointMass)
    assert tokens.tolist()[:3] == [14, 15, 11]
    # the watch does see V-sized work: a dense warp is caught
    with Watch():
        warp(d.extend(torch.tensor([1])), SamplingConfig(temperature=0.7, top_k=3))
    assert big
