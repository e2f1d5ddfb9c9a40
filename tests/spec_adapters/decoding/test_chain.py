"""HedgeSpecDecoder, greedy: identical to the target's own greedy decoding; bad inputs; stats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import onlinelearn as ol
from spec_adapters.decoding.chain import GenerateOutput, HedgeSpecDecoder
from tests.spec_adapters.single_helpers import RecordingStreamer, UnigramDrafter, pool

POLICIES = ["normalhedge", "hedge", "adahedge", "exp3spec", "ucbspec", "fixed:0", "fixed:2",
            "oracle"]


@pytest.fixture(scope="module")
def models():
    return pool(vocab_size=96)


def _prompts(n, seed=0, vocab=96):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (1, int(torch.randint(1, 9, (1,), generator=g))), generator=g)
            for _ in range(n)]


def _reference(target, ids, max_new_tokens, eos=None):
    return target.generate(ids, do_sample=False, max_new_tokens=max_new_tokens,
                           eos_token_id=eos, pad_token_id=0)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_output_equals_target_generate(models, policy, k):
    target, drafters = models
    # the unigram drafter (not an HF model) is never right: rejection at position 1 every time
    pool_ = [*drafters, UnigramDrafter(torch.linspace(0, 3, 96))]
    dec = HedgeSpecDecoder(target, pool_, draft_length=k, policy=policy)
    for i, ids in enumerate(_prompts(3, seed=k)):
        n = 11 + 7 * i  # lengths that end mid-chunk for every K > 1
        out = dec.generate(ids, max_new_tokens=n, seed=i)
        ref = _reference(target, ids, n)
        assert isinstance(out, GenerateOutput)
        assert out.sequences.dtype == torch.long and out.sequences.shape == ref.shape
        assert out.sequences.tolist() == ref.tolist(), (policy, k, i)
        s = out.stats
        assert s["new_tokens"] == n and s["target_calls"] == len(s["chosen"]) == len(s["accepted"])
        assert s["mean_accepted_tokens"] == pytest.approx(n / s["target_calls"])
        assert all(0 <= a <= k for a in s["accepted"])


def test_defaults_are_the_documented_ones(models):
    """K = 5, EAL loss, NormalHedge wrapped in OnArrival (docs/decoding.md)."""
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters)
    assert (dec.draft_length, dec.loss, dec.carry_state) == (5, "eal", False)
    assert isinstance(dec.policy, ol.OnArrival) and isinstance(dec.policy.learner, ol.NormalHedge)


@pytest.mark.parametrize("make", [ol.AdaNormalHedge, ol.Exp3IX], ids=["full-info", "bandit"])
def test_an_onlinelearn_learner_instance_is_a_policy(models, make):
    target, drafters = models
    learner = make(len(drafters))
    dec = HedgeSpecDecoder(target, drafters, draft_length=3, policy=learner)
    ids = torch.tensor([[1, 8, 9]])
    out = dec.generate(ids, max_new_tokens=20, seed=0)
    assert out.sequences.tolist() == _reference(target, ids, 20).tolist()
    assert dec.policy.learner is learner  # used as given, inside a delayed-feedback reduction
    assert learner.state_dict() != make(len(drafters)).state_dict()  # and it learnt
    assert out.stats["policy"] == make.__name__


def test_copy_of_target_accepts_everything_and_stops_mid_chunk(models):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=8, policy="fixed:2")
    ids = torch.tensor([[1, 40, 41]])
    out = dec.generate(ids, max_new_tokens=13)  # 9 tokens per call: the 2nd chunk is cut at 4
    assert out.sequences.tolist() == _reference(target, ids, 13).tolist()
    assert out.stats["accepted"] == [8, 8] and out.stats["target_calls"] == 2


@pytest.mark.parametrize("policy", ["normalhedge", "exp3spec", "fixed:2"])
def test_eos_inside_a_chunk_stops_generation(models, policy):
    target, drafters = models
    ids = torch.tensor([[1, 17, 23, 5]])
    free = _reference(target, ids, 30)[0, 4:].tolist()
    # the first token that did not occur before position 5: EOS inside the first 9-token chunk
    j = next(j for j in range(5, 30) if free[j] not in free[:j])
    eos = free[j]
    dec = HedgeSpecDecoder(target, drafters, draft_length=8, policy=policy)
    out = dec.generate(ids, max_new_tokens=30, eos_token_id=eos)
    ref = _reference(target, ids, 30, eos=eos)
    assert out.sequences.tolist() == ref.tolist()
    assert out.sequences[0, -1].item() == eos and out.sequences.shape[1] == 4 + j + 1
    # a list of EOS ids works too
    out2 = dec.generate(ids, max_new_tokens=30, eos_token_id=[95, eos])
    assert out2.sequences.tolist() == ref.tolist()


def test_zero_new_tokens_returns_the_prompt(models):
    target, drafters = models
    ids = torch.tensor([[1, 2, 3]])
    out = HedgeSpecDecoder(target, drafters).generate(ids, max_new_tokens=0)
    assert out.sequences.tolist() == ids.tolist() and out.stats["target_calls"] == 0


def test_generation_stops_at_the_context_length(tiny_llama):
    target = tiny_llama(vocab_size=64, seed=0, max_position_embeddings=20)
    target.generation_config.eos_token_id = None
    dec = HedgeSpecDecoder(target, [target], draft_length=8, policy="fixed:0")
    out = dec.generate(torch.arange(3, 15).view(1, -1), max_new_tokens=50)
    assert out.sequences.shape == (1, 20)
    ref = target.generate(torch.arange(3, 15).view(1, -1), do_sample=False, max_new_tokens=8)
    assert out.sequences.tolist() == ref.tolist()


def test_streamer_receives_prompt_then_every_new_token(models):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3)
    ids = torch.tensor([[1, 8, 9]])
    streamer = RecordingStreamer()
    out = dec.generate(ids, max_new_tokens=12, streamer=streamer)
    assert streamer.values[0].tolist() == ids.tolist() and streamer.ended == 1
    streamed = torch.cat([v.view(-1) for v in streamer.values[1:]]).tolist()
    assert streamed == out.sequences[0, 3:].tolist()
    assert len(streamer.values) - 1 == out.stats["target_calls"]


class _SpacedIds:
    """The one tokenizer method transformers' TextStreamer calls."""

    def decode(self, ids, **kwargs):
        # symbols: TextStreamer holds the last word back until the next space or end()
        return " ".join(f"<{int(i)}>" for i in ids)


@pytest.mark.parametrize("policy", ["normalhedge", "oracle"])
def test_transformers_text_streamer_gets_exactly_the_new_tokens(models, policy):
    from transformers import TextStreamer

    class Collecting(TextStreamer):
        def __init__(self):
            super().__init__(_SpacedIds(), skip_prompt=True)
            self.text: list[str] = []

        def on_finalized_text(self, text, stream_end=False):
            self.text.append(text)

    target, drafters = models
    ids = torch.tensor([[1, 8, 9]])
    streamer = Collecting()
    out = HedgeSpecDecoder(target, drafters, draft_length=3, policy=policy).generate(
        ids, max_new_tokens=12, streamer=streamer)
    assert "".join(streamer.text) == _SpacedIds().decode(out.sequences[0, 3:].tolist())


def test_sampling_is_reproducible_with_a_seed(models):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3)
    ids = torch.tensor([[1, 8, 9]])
    runs = [dec.generate(ids, max_new_tokens=20, temperature=1.0, seed=s).sequences.tolist()
            for s in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def _plain_sample(target, ids, n, seed, temperature, top_p, top_k):
    torch.manual_seed(seed)
    out = target.generate(ids, do_sample=True, max_new_tokens=n, temperature=temperature,
                          top_p=top_p, top_k=top_k or 0, pad_token_id=0)
    return out, torch.rand(4)  # what the generator draws next, after the run


@pytest.mark.parametrize(("policy", "warp"), [
    ("normalhedge", {"temperature": 1.0, "top_p": 1.0, "top_k": None}),
    ("normalhedge", {"temperature": 0.7, "top_p": 0.9, "top_k": 20}),
    ("exp3spec", {"temperature": 0.7, "top_p": 1.0, "top_k": None}),
])
def test_a_generator_run_is_plain_generates_sample_token_for_token(policy, warp):
    """generate(generator=g): the coupled rule's draws are generate(do_sample=True)'s, so the
    tokens equal plain generate's after torch.manual_seed, and g ends where generate leaves
    torch's generator; drafts are accepted (speculation happens)."""
    target, drafters = pool(vocab_size=96, peak=30.0)  # peaked: the copies' argmax often kept
    pool_ = [*drafters, UnigramDrafter(torch.linspace(0, 3, 96))]  # it draws even when greedy
    dec = HedgeSpecDecoder(target, pool_, draft_length=3, policy=policy)
    accepted = 0
    for i, ids in enumerate(_prompts(4, seed=21)):
        n = 17 + 5 * i
        plain, after = _plain_sample(target, ids, n, seed=100 + i, **warp)
        gen = torch.Generator().manual_seed(100 + i)
        out = dec.generate(ids, max_new_tokens=n, generator=gen, **warp)
        assert out.sequences.tolist() == plain.tolist(), (policy, warp, i)
        assert torch.equal(torch.rand(4, generator=gen), after)
        accepted += sum(out.stats["accepted"])
    assert accepted > 10


def test_a_generator_run_stops_at_eos_where_plain_generate_does():
    """An EOS drawn mid-round ends the output and the draws exactly where plain's end (a
    draft is cut before an EOS; no round draws past the length limit)."""
    target, drafters = pool(vocab_size=96, peak=30.0)
    dec = HedgeSpecDecoder(target, drafters, draft_length=4, policy="fixed:2")
    warp = {"temperature": 0.8, "top_p": 1.0, "top_k": None}
    for i, ids in enumerate(_prompts(3, seed=4)):
        free, _ = _plain_sample(target, ids, 30, seed=i, **warp)
        new = free[0, ids.shape[1]:].tolist()
        eos = next(t for j, t in enumerate(new) if j >= 6 and t not in new[:j])
        torch.manual_seed(i)
        plain = target.generate(ids, do_sample=True, max_new_tokens=30, eos_token_id=eos,
                                pad_token_id=0, **{**warp, "top_k": 0})
        after = torch.rand(4)
        gen = torch.Generator().manual_seed(i)
        out = dec.generate(ids, max_new_tokens=30, eos_token_id=eos, generator=gen, **warp)
        assert out.sequences.tolist() == plain.tolist() and out.sequences[0, -1] == eos
        assert torch.equal(torch.rand(4, generator=gen), after)
        assert max(out.stats["accepted"]) > 0


def test_a_seeded_run_is_not_plain_generates_sample(models):
    """The control: seed= runs speculative sampling with its own draws (the law is plain's,
    the tokens are not), so the comparison above can fail."""
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3)
    ids = torch.tensor([[1, 8, 9]])
    plain, _ = _plain_sample(target, ids, 30, seed=5, temperature=1.0, top_p=1.0, top_k=None)
    out = dec.generate(ids, max_new_tokens=30, temperature=1.0, seed=5)
    assert out.sequences.tolist() != plain.tolist()


def test_bad_generators_are_refused_by_name(models):
    target, drafters = models
    ids = torch.tensor([[1, 8, 9]])
    dec = HedgeSpecDecoder(target, drafters, draft_length=3)
    with pytest.raises(ValueError, match=r"generator must be a torch\.Generator"):
        dec.generate(ids, max_new_tokens=4, temperature=1.0, generator=7)
    with pytest.raises(ValueError, match="seed or generator, not both"):
        dec.generate(ids, max_new_tokens=4, temperature=1.0, seed=1,
                     generator=torch.Generator())
    oracle = HedgeSpecDecoder(target, drafters, draft_length=3, policy="oracle")
    with pytest.raises(ValueError, match="oracle"):
        oracle.generate(ids, max_new_tokens=4, temperature=1.0, generator=torch.Generator())


def test_stats_account_for_every_round(models):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=4, policy="normalhedge")
    out = dec.generate(torch.tensor([[1, 8, 9]]), max_new_tokens=25, temperature=0.7, seed=3)
    s = out.stats
    rounds = s["target_calls"]
    fed = [rid for rid, _ in s["losses"]]
    # every round is fed exactly once or censored
    assert len(set(fed)) == len(fed) and len(fed) + s["censored"] == rounds
    assert s["gamma"].shape == s["rho"].shape == (3, 25)
    for w in s["weights"]:
        assert len(w) == 3 and np.isclose(sum(w), 1.0)
    steps = [s[f"{k}_seconds"] for k in ("prefill", "select", "draft", "verify", "eval",
                                         "update")]
    assert all(t > 0 for t in steps)  # every step ran (the loop clocks each, every round)
    assert sum(steps) <= s["total_seconds"]  # and none is counted twice


def test_learner_resets_per_query_unless_carried(models):
    target, drafters = models
    ids = torch.tensor([[1, 8, 9]])
    fresh = HedgeSpecDecoder(target, drafters, draft_length=3)
    carry = HedgeSpecDecoder(target, drafters, draft_length=3, carry_state=True)
    for dec in (fresh, carry):
        dec.generate(ids, max_new_tokens=30, seed=0)
    w_fresh = fresh.generate(ids, max_new_tokens=3, seed=0).stats["weights"][0]
    w_carry = carry.generate(ids, max_new_tokens=3, seed=0).stats["weights"][0]
    assert np.allclose(w_fresh, 1 / 3)
    assert max(w_carry) > 0.9 and np.argmax(w_carry) == 2


# ------------------------------------------------------------------------------------------
# bad input: ValueError naming it, nothing half-updated
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "match"), [
    ({"drafters": []}, "empty drafter pool"),
    ({"draft_length": 0}, "draft_length"),
    ({"draft_length": 2.5}, "draft_length"),
    ({"policy": "thompson"}, "unknown policy"),
    ({"policy": "fixed:7"}, "out of range"),
    ({"loss": "l2"}, "unknown loss"),
])
def test_bad_constructor_arguments(models, kwargs, match):
    target, drafters = models
    args = {"drafters": drafters, **kwargs}
    with pytest.raises(ValueError, match=match):
        HedgeSpecDecoder(target, **args)


def test_vocab_mismatch_is_rejected(models, tiny_llama):
    target, drafters = models
    with pytest.raises(ValueError, match="vocabulary size mismatch"):
        HedgeSpecDecoder(target, [drafters[0], tiny_llama(vocab_size=128)])


@pytest.mark.parametrize(("ids", "kwargs", "match"), [
    (torch.tensor([1, 2, 3]), {}, "2-D"),
    (torch.tensor([[[1, 2]]]), {}, "2-D"),
    (torch.tensor([[1, 2], [3, 4]]), {}, "not supported yet"),
    (torch.zeros(1, 0, dtype=torch.long), {}, "empty"),
    (torch.tensor([[1.0, 2.0]]), {}, "integer"),
    (torch.tensor([[1, 500]]), {}, "outside"),
    ([[1, 2]], {}, "torch.LongTensor"),
    (torch.arange(300).view(1, -1) % 90, {}, "longer than the target's context"),
    (torch.tensor([[1, 2]]), {"temperature": -0.5}, "temperature"),
    (torch.tensor([[1, 2]]), {"top_p": 0.0}, "top_p"),
    (torch.tensor([[1, 2]]), {"top_k": 0}, "top_k"),
    (torch.tensor([[1, 2]]), {"max_new_tokens": -1}, "max_new_tokens"),
])
def test_bad_generate_input_changes_nothing(models, ids, kwargs, match):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3, carry_state=True)
    good = torch.tensor([[1, 8, 9]])
    dec.generate(good, max_new_tokens=10, seed=0)
    state = dec.policy.state_dict()
    with pytest.raises(ValueError, match=match):
        dec.generate(ids, **{"max_new_tokens": 10, **kwargs})
    assert dec.policy.state_dict() == state
    # the decoder still works and is still exact
    out = dec.generate(good, max_new_tokens=10, seed=1)
    assert out.sequences.tolist() == _reference(target, good, 10).tolist()


@pytest.mark.parametrize("policy", ["normalhedge", "ucbspec"])
def test_stacked_drafters_give_the_same_generation(models, policy):
    from spec_adapters.drafters import StackedHFDrafters

    target, drafters = models
    ids = torch.tensor([[1, 8, 9, 10]])
    kw = {"max_new_tokens": 20, "temperature": 1.0, "seed": 4}
    a = HedgeSpecDecoder(target, drafters, draft_length=3, policy=policy).generate(ids, **kw)
    b = HedgeSpecDecoder(target, [StackedHFDrafters(drafters)], draft_length=3,
                         policy=policy).generate(ids, **kw)
    assert a.sequences.tolist() == b.sequences.tolist()
    assert a.stats["chosen"] == b.stats["chosen"]


@pytest.mark.parametrize("delay", ["qpmd", "bold"])
def test_other_delay_reductions_are_exact_too(models, delay):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3, delay=delay)
    for ids in _prompts(2, seed=9):
        out = dec.generate(ids, max_new_tokens=17, seed=0)
        assert out.sequences.tolist() == _reference(target, ids, 17).tolist()
        assert len(out.stats["losses"]) + out.stats["censored"] == out.stats["target_calls"]


def test_oracle_returns_the_best_fixed_run(models):
    target, drafters = models
    ids = torch.tensor([[1, 8, 9, 10]])
    dec = HedgeSpecDecoder(target, drafters, draft_length=4, policy="oracle")
    out = dec.generate(ids, max_new_tokens=20)
    mats = [HedgeSpecDecoder(target, drafters, draft_length=4, policy=f"fixed:{i}")
            .generate(ids, max_new_tokens=20).stats["mean_accepted_tokens"] for i in range(3)]
    assert out.stats["oracle_mat"] == pytest.approx(mats)
    assert out.stats["oracle_choice"] == int(np.argmax(mats)) == 2  # the copy of the target
    # the oracle's MAT recomputed from its own round lists, not read from its stats
    s = out.stats
    assert len(s["accepted"]) == s["target_calls"]
    assert (out.sequences.shape[1] - ids.shape[1]) / len(s["accepted"]) == pytest.approx(max(mats))
    assert s["chosen"] == [2] * s["target_calls"]


def test_no_round_is_left_outstanding_after_a_query(models):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=5, carry_state=True)
    for n in (7, 13):
        out = dec.generate(torch.tensor([[1, 8, 9]]), max_new_tokens=n, temperature=1.0, seed=n)
        assert dec.policy.outstanding == {}
        # exactly the rounds whose window of K = 5 positions runs past the end are censored
        starts = 3 + np.cumsum([0, *[a + 1 for a in out.stats["accepted"]]])[:-1]
        assert out.stats["censored"] == int(np.sum(starts + 5 > 3 + n)) >= 1
