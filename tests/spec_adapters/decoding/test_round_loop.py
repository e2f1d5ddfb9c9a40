"""The one round loop: the on_round callback, and what the loop refuses or survives (bad
eos_token_id / seed, a drafter object in two slots, malformed proposals, a drafter raising)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from spec_adapters.decoding import RoundInfo
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters import HFDrafter
from spec_adapters.hf.target import TargetModel
from tests.spec_adapters.single_helpers import UnigramDrafter, pool

V = 96
IDS = torch.tensor([[1, 8, 9]])


@pytest.fixture(scope="module")
def models():
    return pool(vocab_size=V)


def _reference(target, ids, n, eos=None):
    return target.generate(ids, do_sample=False, max_new_tokens=n, eos_token_id=eos,
                           pad_token_id=0)


# ------------------------------------------------------------------------------------------
# on_round
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("policy", "temperature"), [("normalhedge", 0.0), ("normalhedge", 1.0),
                                                     ("exp3spec", 1.0), ("fixed:1", 0.0),
                                                     ("oracle", 0.0)])
def test_on_round_sees_every_round_and_its_tokens(models, policy, temperature):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3, policy=policy)
    seen: list[RoundInfo] = []
    out = dec.generate(IDS, max_new_tokens=23, temperature=temperature, seed=5,
                       on_round=seen.append)
    s = out.stats
    assert [r.index for r in seen] == list(range(s["target_calls"]))
    assert [r.drafter for r in seen] == s["chosen"]
    assert [r.drafter_name for r in seen] == [s["drafters"][i] for i in s["chosen"]]
    assert [r.accepted for r in seen] == s["accepted"]
    assert [list(r.weights) for r in seen] == s["weights"]
    tokens = [t for r in seen for t in r.tokens]
    assert tokens == out.sequences[0, IDS.shape[1]:].tolist() and len(tokens) == 23
    assert all(len(r.tokens) == r.accepted + 1 for r in seen[:-1])  # only the last is cut
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].accepted = 0


def test_on_round_is_called_during_generation(models):
    """Each call comes before the next round drafts (a live display, not a replay)."""
    target, _ = models
    events = []

    class Logging(UnigramDrafter):
        def propose(self, k, sampling, generator=None):
            events.append("propose")
            return super().propose(k, sampling, generator)

    dec = HedgeSpecDecoder(target, [Logging(torch.linspace(0, 3, V))], draft_length=2)
    dec.generate(IDS, max_new_tokens=6, on_round=lambda info: events.append("round"))
    assert events[:4] == ["propose", "round", "propose", "round"]
    assert events.count("round") == events.count("propose")


def test_on_round_must_be_callable(models):
    target, drafters = models
    with pytest.raises(ValueError, match="on_round must be callable"):
        HedgeSpecDecoder(target, drafters).generate(IDS, on_round=[])


# ------------------------------------------------------------------------------------------
# the same object in two slots
# ------------------------------------------------------------------------------------------
def test_the_same_drafter_object_in_two_slots_is_refused(models):
    target, drafters = models
    d = HFDrafter(copy.deepcopy(target))
    with pytest.raises(ValueError, match="same drafter object fills slots 0, 2"):
        HedgeSpecDecoder(target, [d, drafters[0], d])
    with pytest.raises(ValueError, match="slots 1, 2"):
        HedgeSpecDecoder(target, [drafters[0], drafters[1], drafters[1]])


def test_two_copies_of_the_target_each_have_gamma_one(models):
    """What the refusal protects: two distinct objects do not share their context."""
    target, _ = models
    dec = HedgeSpecDecoder(target, [HFDrafter(copy.deepcopy(target)) for _ in range(2)],
                           draft_length=3)
    out = dec.generate(IDS, max_new_tokens=15)
    assert torch.all(out.stats["gamma"] == 1.0)


# ------------------------------------------------------------------------------------------
# eos_token_id and seed
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", [int, np.int64, lambda e: [e], lambda e: (95, e),
                                  lambda e: torch.tensor([e]), lambda e: torch.tensor(e),
                                  lambda e: np.array([e])])
def test_eos_token_id_forms(models, form):
    target, drafters = models
    free = _reference(target, IDS, 20)[0, 3:].tolist()
    j = next(j for j in range(3, 20) if free[j] not in free[:j])
    out = HedgeSpecDecoder(target, drafters, draft_length=4).generate(
        IDS, max_new_tokens=20, eos_token_id=form(free[j]))
    assert out.sequences.tolist() == _reference(target, IDS, 20, eos=free[j]).tolist()
    assert out.sequences.shape[1] == 3 + j + 1


def test_an_empty_eos_list_means_no_eos(models):
    target, drafters = models
    target.generation_config.eos_token_id = int(_reference(target, IDS, 4)[0, 4])
    try:
        out = HedgeSpecDecoder(target, drafters).generate(IDS, max_new_tokens=12,
                                                          eos_token_id=[])
        stopped = HedgeSpecDecoder(target, drafters).generate(IDS, max_new_tokens=12)
    finally:
        target.generation_config.eos_token_id = None
    assert out.sequences.shape[1] == 15 and stopped.sequences.shape[1] == 5


@pytest.mark.parametrize("eos", ["94", -1, 1.7, True, [None], [5, V], (3, 2.0),
                                 torch.tensor([1.5]), torch.tensor([True]), {4}])
def test_bad_eos_token_id_is_a_value_error(models, eos):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, carry_state=True)
    state = dec.policy.state_dict()
    with pytest.raises(ValueError, match="eos_token_id"):
        dec.generate(IDS, max_new_tokens=5, eos_token_id=eos)
    assert dec.policy.state_dict() == state


@pytest.mark.parametrize("seed", [-1, 2**63, 2**70, 1.5, True, "3"])
def test_bad_seed_is_a_value_error(models, seed):
    target, drafters = models
    with pytest.raises(ValueError, match="seed must be None or an integer"):
        HedgeSpecDecoder(target, drafters).generate(IDS, max_new_tokens=5, seed=seed)


@pytest.mark.parametrize("seed", [0, 2**63 - 1, np.int64(7)])
def test_seed_range_is_accepted_and_reproducible(models, seed):
    target, drafters = models
    dec = HedgeSpecDecoder(target, drafters, draft_length=3)
    a = dec.generate(IDS, max_new_tokens=10, temperature=1.0, seed=seed).sequences
    b = dec.generate(IDS, max_new_tokens=10, temperature=1.0, seed=seed).sequences
    assert a.tolist() == b.tolist()


# ------------------------------------------------------------------------------------------
# malformed drafters
# ------------------------------------------------------------------------------------------
class Malformed(UnigramDrafter):
    """A unigram drafter whose proposal is broken by ``mangle(tokens, q)``."""

    def __init__(self, mangle, name="broken"):
        super().__init__(torch.linspace(0, 3, V), name=name)
        self.mangle = mangle

    def propose(self, k, sampling, generator=None):
        return self.mangle(*super().propose(k, sampling, generator))


@pytest.mark.parametrize(("mangle", "match"), [
    (lambda t, q: (torch.cat([t, t[:1]]), q), r"tokens must have shape \(3,\)"),
    (lambda t, q: (t[:2], q), r"q must have shape \(2, 96\)"),  # fewer tokens: fine
    (lambda t, q: (torch.full_like(t, V), q), r"token ids must be in \[0, 96\)"),
    (lambda t, q: (t - 100, q), r"token ids must be in \[0, 96\)"),
    (lambda t, q: (t.float(), q), "tokens must be an integer tensor"),
    (lambda t, q: (t.tolist(), q), "tokens must be an integer tensor, got list"),
    (lambda t, q: (t, q[:, :-1]), r"q must have shape \(3, 96\)"),
    (lambda t, q: (t, q[0]), r"q must have shape \(3, 96\)"),
    (lambda t, q: (t, q.long()), "q must be a floating tensor"),
])
def test_a_malformed_proposal_names_the_drafter(models, mangle, match):
    target, drafters = models
    dec = HedgeSpecDecoder(target, [drafters[0], Malformed(mangle, name="weird")],
                           draft_length=3, policy="fixed:1")
    with pytest.raises(ValueError, match=rf"drafter 'weird' \(slot 1\).*{match}"):
        dec.generate(IDS, max_new_tokens=8)


def test_a_malformed_extend_names_the_drafter(models):
    target, drafters = models
    bad = UnigramDrafter(torch.linspace(0, 3, V), name="short")
    bad.extend = lambda tokens: torch.zeros(tokens.numel(), V - 1)
    dec = HedgeSpecDecoder(target, [drafters[0], bad], draft_length=3)
    with pytest.raises(ValueError, match=r"drafter 'short' \(slot 1\): extend .* shape"):
        dec.generate(IDS, max_new_tokens=8)


# ------------------------------------------------------------------------------------------
# a drafter that raises mid-generation
# ------------------------------------------------------------------------------------------
class Flaky:
    """Wraps a drafter; raises from ``verb`` on its ``after``-th call and later ones while
    ``armed``."""

    def __init__(self, inner, verb: str, after: int) -> None:
        self.inner, self.verb, self.after, self.armed, self.calls = inner, verb, after, True, 0
        self.name, self.vocab_size = "flaky", inner.vocab_size

    def start(self, prompt_ids):
        self.calls = 0
        self.inner.start(prompt_ids)

    def _maybe_fail(self, verb):
        if verb == self.verb and self.armed:
            self.calls += 1
            if self.calls >= self.after:
                raise RuntimeError(f"flaky {verb} failed")

    def propose(self, k, sampling, generator=None):
        self._maybe_fail("propose")
        return self.inner.propose(k, sampling, generator)

    def extend(self, tokens):
        self._maybe_fail("extend")
        return self.inner.extend(tokens)


@pytest.mark.parametrize(("policy", "delay", "verb"), [
    ("normalhedge", "onarrival", "extend"), ("normalhedge", "bold", "extend"),
    ("hedge", "qpmd", "extend"), ("exp3spec", "onarrival", "propose"),
    ("fixed:1", "onarrival", "propose"),
])
def test_a_raising_drafter_leaves_no_open_round_and_the_decoder_usable(models, policy, delay,
                                                                      verb):
    target, drafters = models
    flaky = Flaky(HFDrafter(copy.deepcopy(target)), verb, after=4)
    dec = HedgeSpecDecoder(target, [HFDrafter(drafters[0]), flaky], draft_length=3,
                           policy=policy, delay=delay, carry_state=True)
    for _ in range(10):
        with pytest.raises(RuntimeError, match=f"flaky {verb} failed"):
            dec.generate(IDS, max_new_tokens=40, seed=0)
        assert dec.policy.outstanding == {}
    assert len(dec.policy.censored) >= 10  # at least the failed round of every call
    if delay == "bold":
        assert len(dec.policy.pool) <= 3  # copies for at most K rounds in flight, not 10 calls'
    flaky.armed = False
    out = dec.generate(IDS, max_new_tokens=20, seed=1)
    assert out.sequences.tolist() == _reference(target, IDS, 20).tolist()
    assert dec.policy.outstanding == {}


def test_target_prefill_returns_the_prompt_features(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=2)
    seq = torch.tensor([3, 9, 14, 5, 7])
    with torch.no_grad():
        hidden = model(input_ids=seq[:-1].view(1, -1), output_hidden_states=True).hidden_states
    feats = TargetModel(model, feature_layers=(0, 2)).prefill(seq)
    torch.testing.assert_close(feats, torch.cat([hidden[0][0], hidden[2][0]], -1))
    assert TargetModel(model).prefill(seq) is None
    assert TargetModel(model, feature_layers=(1,)).prefill(seq[:1]) is None
