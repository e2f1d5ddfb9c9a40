"""``extend_argmax``, the greedy evaluation verb of the model-free drafters, equals the argmax of
what ``extend`` returns (``warp(extend(tokens), greedy)``), abstentions (-1) included; the
decoder falls back to ``extend`` for a drafter without it and refuses a malformed answer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from spec_adapters.core.proposal import warp
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.suffix import SuffixDrafter
from tests.spec_adapters.single_helpers import UnigramDrafter, pool

V = 23
GREEDY = SamplingConfig(0.0)


def _drafters(rng):
    docs = [rng.integers(0, V // 2, size=40).tolist() for _ in range(6)]  # ids >= V/2 unseen
    suffix = SuffixDrafter(V, min_prob=0.0)
    for doc in docs[:3]:
        suffix.index.commit(doc)
    return {
        "ngram": NGramDrafter.from_corpus(docs, V, order=3),
        "ngram-abstain-own": NGramDrafter.from_corpus(docs, V, order=2, abstain=True,
                                                      context_weight=2.0),
        "prompt-lookup": PromptLookupDrafter(V, max_ngram=3),
        "suffix": suffix,
    }


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["ngram", "ngram-abstain-own", "prompt-lookup", "suffix"])
def test_extend_argmax_equals_the_argmax_of_extend(kind, seed):
    rng = np.random.default_rng(seed)
    drafter = _drafters(rng)[kind]
    twin = copy.deepcopy(drafter)
    prompt = torch.tensor(rng.integers(0, V, size=6))
    drafter.start(prompt)
    twin.start(prompt)
    abstained = 0
    for _ in range(12):
        m = int(rng.integers(1, 5))
        # mostly corpus-like ids (matches), sometimes unseen ones (abstentions)
        chunk = rng.integers(0, V // 2 if rng.random() < 0.7 else V, size=m)
        got = drafter.extend_argmax(chunk)
        want = warp(twin.extend(torch.tensor(chunk)), GREEDY).tokens.numpy()
        assert got.dtype == np.int64 and got.tolist() == want.tolist()
        abstained += int((got < 0).sum())
    if kind in ("ngram-abstain-own", "prompt-lookup", "suffix"):
        assert abstained > 0, "no abstention seen: the -1 case went untested"
    with pytest.raises(ValueError, match="outside"):
        drafter.extend_argmax(np.array([V]))
    with pytest.raises(ValueError, match="integer token ids"):
        drafter.extend_argmax(np.array([1.5]))
    assert drafter.extend_argmax(np.array([], np.int64)).tolist() == []


class _BadArgmax(UnigramDrafter):
    def extend_argmax(self, tokens):
        return np.zeros(len(tokens) + 1, np.int64)


def test_greedy_decoding_equals_the_target_with_and_without_the_verb():
    target, drafters = pool(vocab_size=96)
    lookup = PromptLookupDrafter(96, max_ngram=2)
    ids = torch.tensor([[1, 8, 9, 1, 8]])
    want = target.generate(ids, do_sample=False, max_new_tokens=30, pad_token_id=0)
    dec = HedgeSpecDecoder(target, [*drafters, lookup], draft_length=3, cost_aware=True)
    out = dec.generate(ids, max_new_tokens=30, seed=0)
    assert torch.equal(out.sequences, want)
    # the verb's answer and extend's agree: gamma of prompt lookup is 1{its argmax = x}
    assert out.stats["gamma"].shape == (len(drafters) + 1, 30)
    bad = HedgeSpecDecoder(target, [_BadArgmax(torch.zeros(96))], draft_length=3)
    with pytest.raises(ValueError, match=r"extend_argmax of \d+ tokens must return"):
        bad.generate(ids, max_new_tokens=10)
    assert bad.policy.outstanding == {}  # the failed call's rounds were censored
