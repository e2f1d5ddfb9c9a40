"""The compiled decoding step: warmed up before use, the same logits (and hidden states, for
EAGLE heads), lossless decoding.

One compilation of a tiny model (~25 s on one core), shared by the module's tests.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.hf.target import TargetModel
from tests.spec_adapters.single_helpers import pool

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def compiled():
    target, drafters = pool(vocab_size=96, peak=4.0)
    tm = TargetModel(target, rows_first=False, compiled=True)
    return target, drafters, tm


def _compiles() -> int:
    """Frames dynamo was asked to compile: a recompile counts even when it builds no graph (past
    torch.compile's recompile limit it falls back to eager, and ``unique_graphs`` stays put)."""
    return counters["frames"]["total"]


def test_steps_of_every_length_equal_eager_and_compile_nothing_after_the_warm_up(compiled):
    target, _, tm = compiled
    eager = TargetModel(target, rows_first=False)
    assert tm.step_net is not tm.net and eager.step_net is eager.net
    before = _compiles()
    prompt = torch.randint(3, 96, (57,), generator=torch.Generator().manual_seed(0))
    tm.prefill(prompt)
    eager.prefill(prompt)
    gen = torch.Generator().manual_seed(1)
    for k in (0, 4, 1, 3, 2, 6, 0, 8, 4):  # contexts 57 .. 90, contiguous and cropped caches
        drafts = torch.randint(3, 96, (k,), generator=gen)
        got, want = tm.verify(torch.tensor(5), drafts), eager.verify(torch.tensor(5), drafts)
        assert got.shape == (k + 1, 96)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        keep = tm.cached_length - k + k // 2  # reject half the drafts: a cropped cache
        tm.crop(keep)
        eager.crop(keep)
    assert _compiles() == before  # every graph was built by the warm-up, none while decoding
    again = TargetModel(target, rows_first=False, compiled=True)
    assert again.step_net is tm.step_net and _compiles() == before  # once per net and process


def test_verify_features_runs_compiled_equal_to_eager_and_compiles_only_at_its_warm_up(
        compiled):
    target, _, tm = compiled
    layers = (1, 2, 2)
    before = _compiles()
    reader = tm.reading(layers)  # the hidden-state graphs are built here, once
    built = _compiles()
    assert built > before and reader.features_net is tm.step_net
    assert tm.reading((2, 1)).features_net is tm.step_net and _compiles() == built
    eager = TargetModel(target, feature_layers=layers, rows_first=False)
    assert eager.features_net is eager.net
    prompt = torch.randint(3, 96, (41,), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(reader.prefill(prompt), eager.prefill(prompt))
    gen = torch.Generator().manual_seed(3)
    for k in (3, 0, 4, 1):
        drafts = torch.randint(3, 96, (k,), generator=gen)
        got = reader.verify_features(torch.tensor(7), drafts)
        want = eager.verify_features(torch.tensor(7), drafts)
        assert got[1].shape == (k + 1, 3 * target.config.hidden_size)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        reader.crop(reader.cached_length - k)
        eager.crop(eager.cached_length - k)
    assert _compiles() == built  # no graph built while decoding


def test_greedy_decoding_through_the_compiled_step_equals_generate(compiled):
    target, drafters, tm = compiled
    dec = HedgeSpecDecoder(tm, drafters, draft_length=4, policy="normalhedge", cost_aware=True)
    for i in range(3):
        ids = torch.randint(3, 96, (1, 4 + 3 * i), generator=torch.Generator().manual_seed(i))
        out = dec.generate(ids, max_new_tokens=20 + 5 * i)
        ref = target.generate(ids, do_sample=False, max_new_tokens=20 + 5 * i, pad_token_id=0)
        assert out.sequences.tolist() == ref.tolist(), i
        assert out.stats["target_calls"] < 20 + 5 * i  # the exact copy drafted and was kept


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_compiled_must_be_a_bool(tiny_llama, bad):
    with pytest.raises(ValueError, match="compiled must be True or False"):
        TargetModel(tiny_llama(), rows_first=False, compiled=bad)
