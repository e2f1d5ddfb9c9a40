"""The llama.cpp engine on a tiny random Llama written as GGUF by the test: greedy output equal
to llama.cpp's own greedy decoding (with drafts rejected, cut, or absent; at the context's
end), the sampled law (chi-square against the exact law of llama.cpp's sampling chain), and
one clear error per bad input."""

from __future__ import annotations

import itertools

import gguf
import numpy as np
import pytest
from scipy import stats

from spec_adapters.drafters.point import PointDrafter, PromptLookup, Proposal, SuffixDraft
from spec_adapters.llamacpp.decoder import LlamaCppDecoder, plain_generate
from spec_adapters.llamacpp.sampling_chain import warp_llama
from spec_adapters.llamacpp.target import GGUFTarget
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf

# llama.cpp decodes in a child first: a crash fails these tests, not their worker
pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")

PROMPTS = [[5, 70, 71, 72, 5, 70, 71], [100, 101, 102, 103], list(range(40, 60)), [3]]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path, hidden=32, layers=2, heads=1, kv_heads=1, seed=3)
    t = GGUFTarget(path, n_ctx=96, n_threads=1)
    assert t.batch_invariant
    yield t
    t.close()


class Known(PointDrafter):
    """A drafter that knows the greedy continuation and corrupts the draft from ``wrong_at``
    on (the cache must drop the rejected rows); sure of every token."""

    def __init__(self, answer: dict, wrong_at: int, name: str) -> None:
        self.answer, self.wrong_at, self.name = answer, wrong_at, name

    def propose(self, history, k):
        seq = tuple(int(t) for t in history)
        for prompt, out in self.answer.items():
            full = prompt + tuple(out)
            if full[:len(seq)] == seq:
                d = np.array([t if j < self.wrong_at else (t + 1) % 200
                              for j, t in enumerate(full[len(seq):len(seq) + k])], np.int64)
                return Proposal(d, np.ones(len(d)))
        return Proposal(np.zeros(0, np.int64), np.zeros(0))


class Alternating(Known):
    """Right for two tokens after a sequence of even length, wrong from the first after an odd
    one: drafts that pay on average, and are rejected in some rounds whatever length the
    learner keeps."""

    def propose(self, history, k):
        self.wrong_at = 2 if len(history) % 2 == 0 else 0
        return super().propose(history, k)


class Never(PointDrafter):
    name = "never"

    def propose(self, history, k):
        return Proposal(np.zeros(0, np.int64), np.zeros(0))


def _greedy(target, n=30):
    return {tuple(p): plain_generate(target, p, n, stop_at_eog=False) for p in PROMPTS}


@pytest.mark.parametrize("k", [1, 3, 4])
def test_greedy_output_equals_llama_cpp_greedy_with_rejections_and_cuts(target, k):
    truth = _greedy(target)
    pool = [Known(truth, 2, "right-then-wrong"), Known(truth, 0, "always-wrong"),
            Known(truth, 99, "right"), PromptLookup(1), SuffixDraft(max_tokens=1000)]
    dec = LlamaCppDecoder(target, pool, draft_length=k)
    accepted = 0
    for p in PROMPTS:
        out = dec.generate(p, 30, stop_at_eog=False)
        assert out.tokens == truth[tuple(p)]
        accepted += sum(out.stats["accepted"])
        assert out.stats["new_tokens"] == 30 and len(out.stats["chosen"]) == \
            out.stats["target_calls"]
    assert accepted > 0  # drafts were accepted, and (always-wrong) rejected and cut


@pytest.fixture(scope="module")
def q41_path(tmp_path_factory):
    """Weights in Q4_1, as the default target's, head size 64: llama.cpp's CPU kernels then
    compute a row alike whatever else its batch holds (float32 matrices take another matmul
    path for a batch, and differ in the last bits)."""
    path = tmp_path_factory.mktemp("gguf") / "tiny-q4_1.gguf"
    write_tiny_gguf(path, hidden=64, heads=1, kv_heads=1, ff=128, seed=3,
                    qtype=gguf.GGMLQuantizationType.Q4_1)
    return path


@pytest.fixture(scope="module")
def q41_target(q41_path):
    t = GGUFTarget(q41_path, n_ctx=96, n_threads=1)
    yield t
    t.close()


def test_a_rounds_rows_are_bit_for_bit_one_token_decodes_after_rollbacks(q41_target):
    """Rounds of 1-5 rows, some of whose drafts are rejected and dropped from the cache: every
    kept row's logits equal, bit for bit, those of llama.cpp decoding one token at a time (the
    positions, the cache and the rollback are right; stronger than an equal argmax)."""
    target = q41_target
    prompt, n = PROMPTS[2], 40
    seq, rows = list(prompt), [target.prefill(prompt)]
    for _ in range(n):
        seq.append(int(rows[-1].argmax()))
        rows.append(target.step([seq[-1]])[0])
    rng = np.random.default_rng(0)
    target.prefill(prompt)
    pos = len(prompt)  # seq[:pos] verified; seq[pos - 1] not cached after the first round
    while pos < len(seq) - 5:
        k = int(rng.integers(0, 5))
        draft = seq[pos:pos + k]
        if k and rng.random() < 0.5:
            draft[-1] = (draft[-1] + 1) % target.vocab_size  # rejected, and its row dropped
        got = target.step([seq[pos - 1], *draft]) if pos > len(prompt) else \
            np.vstack([rows[0][None], *([target.step(draft)] if draft else [])])
        n_ok = next((j for j, t in enumerate(draft) if t != seq[pos + j]), len(draft))
        want = np.array(rows[pos - len(prompt):pos - len(prompt) + n_ok + 1])
        assert np.array_equal(got[:n_ok + 1], want), pos
        target.keep(pos + n_ok)
        pos += n_ok + 1


def test_the_prompt_cache_keeps_the_shared_prefix_and_changes_no_logit(q41_path):
    """A prompt that shares a prefix with what the cache holds decodes only the rest, and its
    logits are the bits a fresh prefill gives (Q4_1: a row does not depend on its batch); the
    last token is decoded even when the whole prompt is cached; off: nothing is reused."""
    fresh = GGUFTarget(q41_path, n_ctx=96, n_threads=1)
    cached = GGUFTarget(q41_path, n_ctx=96, n_threads=1, prompt_cache=True)
    a = list(range(40, 60))
    b = [*a[:12], 7, 8, 9]
    plain_generate(cached, a, 10, stop_at_eog=False)  # the cache: a and its answer
    for prompt, reused in ((b, 12), (b, 14), ([3, *b], 0), (b[:5], 0), (b[:5], 4)):
        got = cached.prefill(prompt)
        assert cached.prompt_reused == reused and cached.n_cached == len(prompt)
        assert np.array_equal(got, fresh.prefill(prompt)) and fresh.prompt_reused == 0
        assert np.array_equal(cached.step([5]), fresh.step([5]))  # the cache's rows agree
        cached.keep(len(prompt))
    # one history, one output: HedgeSpec on a prompt-cached target = plain on another
    dec = LlamaCppDecoder(cached, [PromptLookup(1), SuffixDraft()], draft_length=3)
    fresh.prompt_cache = True
    for t in (cached, fresh):
        plain_generate(t, a, 10, stop_at_eog=False)
    assert dec.generate(b, 20, stop_at_eog=False).tokens == \
        plain_generate(fresh, b, 20, stop_at_eog=False)
    assert dec.generate(b, 5).stats["prompt_reused"] == len(b) - 1
    with pytest.raises(ValueError, match="at least one token"):
        cached.prefill([])
    fresh.close()
    cached.close()


def test_a_cache_that_lost_its_first_cells_is_not_reused(q41_path, monkeypatch):
    """A sliding-window cache drops its oldest cells past the window (llama.cpp reports the
    first position it still holds): the prompt cache then prefills from empty."""
    t = GGUFTarget(q41_path, n_ctx=96, n_threads=1, prompt_cache=True)
    t.prefill(list(range(40, 60)))
    want = t.prefill(list(range(40, 60)))
    assert t.prompt_reused == 19
    monkeypatch.setattr(t._lc, "llama_memory_seq_pos_min", lambda _mem, _seq: 7)
    assert np.array_equal(t.prefill(list(range(40, 60))), want) and t.prompt_reused == 0
    t.close()


@pytest.mark.parametrize("cached", [200, 300, 600, 1000])
def test_a_rows_logits_do_not_depend_on_its_batch_at_any_cache_length(q41_path, cached):
    """Two threads, past 256 and 512 cache cells: five tokens decoded one llama_decode each
    and the same five in one decode give the same bits under the target's cache (flash
    attention on, keys in Q8_0); with llama.cpp's default cache they differ from 257 cells on
    (a lone row's attention split over the threads: GGUFTarget's docstring)."""
    diffs = {}
    for invariant in (True, False):
        t = GGUFTarget(q41_path, n_ctx=1100, n_threads=2, batch_invariant=invariant)
        toks = np.random.default_rng(cached).integers(0, t.vocab_size, cached + 5).tolist()
        t.prefill(toks[:cached])
        lone = np.vstack([t.step([x]) for x in toks[cached:]])
        t.keep(cached)
        diffs[invariant] = np.abs(lone - t.step(toks[cached:])).max()
        t.close()
    assert diffs[True] == 0
    assert (diffs[False] > 0) == (cached > 256), diffs


def test_a_head_size_q8_0_cannot_hold_gets_llama_cpps_default_cache(tmp_path):
    path = tmp_path / "heads-of-8.gguf"
    write_tiny_gguf(path, hidden=32, layers=1, heads=4, kv_heads=4, seed=3)
    t = GGUFTarget(path, n_ctx=64, n_threads=1)
    assert not t.batch_invariant and t.prefill([1, 2, 3]).shape == (t.vocab_size,)
    t.close()


def test_rounds_without_a_draft_are_plain_steps(target):
    truth = _greedy(target, 12)
    dec = LlamaCppDecoder(target, [Never()], draft_length=4)
    out = dec.generate(PROMPTS[1], 12, stop_at_eog=False)
    assert out.tokens == truth[tuple(PROMPTS[1])]
    assert out.stats["target_calls"] == 12 and set(out.stats["lengths"]) == {0}


def test_drafts_that_cannot_pay_are_never_played(target):
    """A drafter that is always wrong: its rows are never decoded, not even while the learner
    knows nothing (the first round is a plain step); its counterfactuals are still scored
    in the first rounds and then on a probe share (the old learner, starting uniform over
    (drafter, k), drafted in most of its first rounds)."""
    truth = _greedy(target)
    dec = LlamaCppDecoder(target, [Known(truth, 0, "always-wrong")], draft_length=4,
                          probe=0.25)
    rounds = evaluated = 0
    for p in PROMPTS:
        out = dec.generate(p, 30, stop_at_eog=False)
        assert out.tokens == truth[tuple(p)]
        assert set(out.stats["lengths"]) == {0} and out.stats["target_calls"] == 30
        rounds, evaluated = rounds + 30, evaluated + out.stats["evaluated_rounds"]
    assert 0 < evaluated < rounds / 2, (evaluated, rounds)


def test_a_drafter_that_pays_is_played_once_a_round_is_scored(target):
    """A drafter that knows the answer: until the first round's K tokens are verified the
    learner knows nothing and the rounds are plain steps; from then on the learner's draft
    is played wherever it picks that drafter."""
    truth = _greedy(target)
    dec = LlamaCppDecoder(target, [Known(truth, 99, "right"), Never()], draft_length=4)
    out = dec.generate(PROMPTS[2], 30, stop_at_eog=False)
    assert out.tokens == truth[tuple(PROMPTS[2])]
    lengths = out.stats["lengths"]
    assert lengths[:4] == [0] * 4 and np.mean(np.array(lengths[4:]) > 0) > 0.5, lengths
    assert out.stats["mean_accepted_tokens"] > 2


def test_rows_are_priced_at_load_and_a_given_price_is_checked(target):
    """The target's own decode of 1 .. K + 1 rows, timed at load, seeds the round costs; a
    price given instead must be K + 1 seconds."""
    prices = target.row_prices(3, context=8, repeats=2)
    assert prices.shape == (3,) and (prices > 0).all() and target.n_cached == 0
    assert target.row_prices([1, 5], context=8, repeats=1).shape == (2,)
    with pytest.raises(ValueError, match="need row counts"):
        target.row_prices([0, 2])
    dec = LlamaCppDecoder(target, [PromptLookup(1)], draft_length=2)
    assert dec.row_seconds.shape == (3,) and (dec.row_seconds > 0).all()
    np.testing.assert_allclose(dec.costs.target_curve(), dec.row_seconds)
    out = LlamaCppDecoder(target, [PromptLookup(1)], draft_length=2,
                          row_seconds=[0.01, 0.02, 0.03]).generate(PROMPTS[0], 4)
    assert out.stats["row_ms"] == [10.0, 20.0, 30.0]
    for bad in ([0.01, 0.02], [0.01, float("nan"), 0.03], [0.01, -1.0, 0.03]):
        with pytest.raises(ValueError, match="row_seconds must be 3 finite seconds"):
            LlamaCppDecoder(target, [PromptLookup(1)], draft_length=2, row_seconds=bad)
    with pytest.raises(ValueError, match="probe must be in"):
        LlamaCppDecoder(target, [PromptLookup(1)], row_seconds=[0.0] * 5, probe=2)
    with pytest.raises(ValueError, match="prior_rounds must be"):
        LlamaCppDecoder(target, [PromptLookup(1)], row_seconds=[0.0] * 5, prior_rounds=-1)


def test_the_context_limit_ends_generation_exactly_where_plain_does(target):
    prompt = [10 + j % 200 for j in range(target.n_ctx - 16)]  # 16 positions left
    seen: list[int] = []
    want = plain_generate(target, prompt, 50, stop_at_eog=False, on_token=seen.append)
    assert len(prompt) + len(want) == target.n_ctx and seen == want  # each token told
    got = LlamaCppDecoder(target, [PromptLookup(1), PromptLookup(2)]).generate(
        prompt, 50, stop_at_eog=False)
    assert got.tokens == want


def _exact_law(target, prompt, temperature, top_k, top_p):
    """The law of the first two tokens under llama.cpp's chain, by enumeration."""
    p1 = warp_llama(target.prefill(prompt)[None], temperature, top_k, top_p)[0]
    law = {}
    for a in np.flatnonzero(p1):
        target.prefill(prompt)
        p2 = warp_llama(target.step([int(a)]), temperature, top_k, top_p)[0]
        for b in np.flatnonzero(p2):
            law[(int(a), int(b))] = p1[a] * p2[b]
    return law


def _chi2_pvalue(samples, law):
    keys = sorted(law)
    counts = np.array([sum(s == key for s in samples) for key in keys])
    expected = np.array([law[key] for key in keys]) * len(samples)
    assert counts.sum() == len(samples)  # nothing outside the law's support
    return stats.chisquare(counts, expected).pvalue


def test_sampled_output_follows_llama_cpps_sampling_law(target):
    """1200 two-token continuations (temperature 1.5, top-k 4, top-p 0.9) through drafters that
    are often right and often wrong: chi-square against the exact law; the same samples
    reject the law of another temperature (the test has power)."""
    prompt = PROMPTS[0]
    law = _exact_law(target, prompt, 1.5, 4, 0.9)
    greedy = _greedy(target, 3)
    dec = LlamaCppDecoder(target, [Known(greedy, 1, "half"), PromptLookup(1)], draft_length=2)
    samples = [tuple(dec.generate(prompt, 2, temperature=1.5, top_k=4, top_p=0.9, seed=s,
                                  stop_at_eog=False).tokens) for s in range(1200)]
    assert _chi2_pvalue(samples, law) > 1e-3
    other = _exact_law(target, prompt, 0.5, 4, 0.9)
    assert set(samples) <= set(other) and _chi2_pvalue(samples, other) < 1e-6


def test_a_seed_gives_plain_decodings_tokens_whatever_was_drafted(target):
    """Sampled (T = 0.8, top-p 0.95): for each seed, HedgeSpec's output equals plain_generate's
    with that seed token for token, through a drafter that knows that output for two tokens
    in some rounds and drafts wrong ones in others, beside prompt lookup: drafts are accepted
    and rejected on the way (the coupled rule draws each position's token as plain decoding
    does)."""
    accepted = rejected = 0
    for seed in range(8):
        plain = {tuple(p): plain_generate(target, p, 24, stop_at_eog=False, temperature=0.8,
                                          top_p=0.95, seed=seed) for p in PROMPTS[:2]}
        dec = LlamaCppDecoder(target, [Alternating(plain, 2, "alternating"), PromptLookup(1)],
                              draft_length=3)
        for p in PROMPTS[:2]:
            out = dec.generate(p, 24, temperature=0.8, top_p=0.95, seed=seed, stop_at_eog=False)
            assert out.tokens == plain[tuple(p)], (seed, p)
            accepted += sum(out.stats["accepted"])
            rejected += sum(k > n for k, n in zip(out.stats["lengths"], out.stats["accepted"],
                                                  strict=True))
    assert accepted > 0 and rejected > 0
    # different seeds, different outputs: the seed is used
    assert len({tuple(plain_generate(target, PROMPTS[0], 24, stop_at_eog=False,
                                     temperature=0.8, seed=s)) for s in range(5)}) > 1


def test_bad_inputs_name_the_problem(target, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        GGUFTarget(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="is not a GGUF file"):
        GGUFTarget(junk)

    class OtherVocab(PromptLookup):
        vocab_size = 49152

    with pytest.raises(ValueError, match="vocabulary of 49152 tokens, the GGUF target"):
        LlamaCppDecoder(target, [OtherVocab(2)])
    with pytest.raises(ValueError, match="empty drafter pool"):
        LlamaCppDecoder(target, [])
    with pytest.raises(ValueError, match="bandit"):
        LlamaCppDecoder(target, [PromptLookup(1)], policy="exp3spec")
    dec = LlamaCppDecoder(target, [PromptLookup(1)])
    with pytest.raises(ValueError, match="at least one token"):
        dec.generate([])
    with pytest.raises(ValueError, match=r"must lie in \[0, "):
        dec.generate([target.vocab_size])
    with pytest.raises(ValueError, match=f"the context holds {target.n_ctx}"):
        dec.generate(list(itertools.islice(itertools.cycle(range(50)), target.n_ctx)))


def test_a_finished_request_teaches_the_suffix_drafter(target):
    """The suffix drafter's memory holds finished requests: the same prompt again is drafted
    from the first answer (its counterfactual acceptance, scored every round whatever draft
    length the cost-aware learner plays, rises to nearly all K; the same output). Not the
    target calls: under a loaded machine the learner may measure drafting as not paying."""
    dec = LlamaCppDecoder(target, [SuffixDraft(max_tokens=1000)], draft_length=4)
    first = dec.generate(PROMPTS[2], 24, stop_at_eog=False)
    again = dec.generate(PROMPTS[2], 24, stop_at_eog=False)
    assert again.tokens == first.tokens
    (before,), (after,) = first.stats["counterfactual_accepted"], again.stats[
        "counterfactual_accepted"]
    assert after > before and after >= 3.0, (before, after)


def test_each_drafters_counterfactual_acceptance_is_reported_whether_chosen_or_not(target):
    """A drafter that knows the answer would have had all K tokens accepted, one wrong from
    its second token on one, one that never drafts none: whichever the learner played."""
    truth = _greedy(target)
    pool = [Known(truth, 4, "right"), Known(truth, 1, "one"), Never()]
    out = LlamaCppDecoder(target, pool, draft_length=4).generate(PROMPTS[0], 30,
                                                                 stop_at_eog=False)
    assert out.tokens == truth[tuple(PROMPTS[0])]
    assert out.stats["evaluated_rounds"] >= 3
    assert out.stats["counterfactual_accepted"] == pytest.approx([4.0, 1.0, 0.0])
