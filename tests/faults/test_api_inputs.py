"""Public API inputs: numpy numbers are accepted wherever Python numbers are (SamplingConfig's
temperature / top_p / top_k, the decoder's K and max_new_tokens), bools, NaN and out-of-range
values are a ValueError naming the parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.ngram import PromptLookupDrafter
from tests.spec_adapters.single_helpers import pool

NUMPY_FLOATS = [np.float16, np.float32, np.float64]
NUMPY_INTS = [np.int8, np.int32, np.int64, np.uint16]


@pytest.mark.parametrize("kind", NUMPY_FLOATS)
def test_numpy_floats_give_the_same_config_as_python_floats(kind):
    got = SamplingConfig(temperature=kind(0.5), top_p=kind(0.75))
    assert got == SamplingConfig(temperature=0.5, top_p=0.75)
    assert hash(got) == hash(SamplingConfig(temperature=0.5, top_p=0.75))
    assert type(got.temperature) is float and type(got.top_p) is float


@pytest.mark.parametrize("kind", NUMPY_INTS)
def test_numpy_ints_are_accepted_for_top_k_and_temperature(kind):
    got = SamplingConfig(temperature=kind(1), top_k=kind(3))
    assert got == SamplingConfig(temperature=1.0, top_k=3)
    assert type(got.top_k) is int


def test_numpy_config_warps_like_the_python_one():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    a = SamplingConfig(np.float32(0.7), np.float64(0.9), np.int64(3)).probs(logits)
    b = SamplingConfig(0.7, 0.9, 3).probs(logits)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"temperature": True}, "temperature"),
        ({"temperature": np.True_}, "temperature"),
        ({"temperature": np.float32("nan")}, "temperature"),
        ({"temperature": np.float64("inf")}, "temperature"),
        ({"temperature": np.float32(-0.5)}, "temperature"),
        ({"temperature": "0.7"}, "temperature"),
        ({"top_p": True}, "top_p"),
        ({"top_p": math.nan}, "top_p"),
        ({"top_p": np.float32("nan")}, "top_p"),
        ({"top_p": np.float64(0.0)}, "top_p"),
        ({"top_p": np.float32(1.5)}, "top_p"),
        ({"top_p": "0.9"}, "top_p"),
        ({"top_k": np.int64(0)}, "top_k"),
        ({"top_k": np.float64(3.0)}, "top_k"),
        ({"top_k": np.True_}, "top_k"),
        ({"top_k": False}, "top_k"),
    ],
)
def test_bad_sampling_values_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        SamplingConfig(**kwargs)


@pytest.mark.parametrize("t", [1e-30, 5e-324, np.float32(1e-6), 9.99e-6])
def test_a_temperature_that_underflows_is_greedy(t):
    assert SamplingConfig(temperature=t) == SamplingConfig(temperature=0.0)
    assert SamplingConfig(temperature=1e-5).temperature == 1e-5


def test_a_tiny_temperature_decodes_as_greedy_with_prompt_lookup():
    target, _drafters = pool()
    dec = HedgeSpecDecoder(target, [PromptLookupDrafter(target.config.vocab_size)],
                           draft_length=3)
    ids = torch.tensor([[3, 5, 7, 3, 5, 9, 3, 5]])  # two continuations of "3 5", tied
    tiny = dec.generate(ids, max_new_tokens=12, temperature=1e-30, seed=1)
    greedy = dec.generate(ids, max_new_tokens=12, temperature=0.0)
    assert torch.equal(tiny.sequences, greedy.sequences)


@pytest.fixture(scope="module")
def decoder():
    target, drafters = pool()
    return HedgeSpecDecoder(target, drafters[1:], draft_length=np.int64(2), policy="fixed:1")


def test_decoder_accepts_numpy_numbers_like_python_ones(decoder):
    ids = torch.tensor([[3, 5, 7]])  # 0.75 and 0.875 are exact in float32: same warping
    a = decoder.generate(ids, max_new_tokens=np.int32(5), temperature=np.float32(0.75),
                         top_p=np.float32(0.875), top_k=np.int16(20), seed=np.int64(4))
    b = decoder.generate(ids, max_new_tokens=5, temperature=0.75, top_p=0.875, top_k=20, seed=4)
    assert torch.equal(a.sequences, b.sequences) and a.sequences.shape[1] == 3 + 5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": True}, "max_new_tokens"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": np.float64(3.0)}, "max_new_tokens"),
        ({"temperature": np.float32("nan")}, "temperature"),
        ({"top_p": np.float32(0.0)}, "top_p"),
        ({"top_k": np.int64(-2)}, "top_k"),
    ],
)
def test_decoder_rejects_bad_numbers_by_name(decoder, kwargs, match):
    with pytest.raises(ValueError, match=match):
        decoder.generate(torch.tensor([[3, 5, 7]]), **{"max_new_tokens": 2, **kwargs})


@pytest.mark.parametrize("k", [0, True, np.int64(-1), 2.0])
def test_decoder_rejects_bad_draft_length(k):
    target, drafters = pool()
    with pytest.raises(ValueError, match="draft_length"):
        HedgeSpecDecoder(target, drafters[1:], draft_length=k)
