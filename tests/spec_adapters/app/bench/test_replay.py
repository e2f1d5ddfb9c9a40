"""The fixed-drafter replay (spec_adapters.app.bench.replay) against real decoding runs: same
rounds, same accepted tokens per round, for drafters that abstain, learn along the stream, or draft
from a model."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.app.bench.replay import replay_fixed
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters.hf import HFDrafter
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.suffix import SuffixDrafter
from tests.spec_adapters.single_helpers import pool


def _drafters(target, others):
    corpus = torch.randint(0, 96, (400,), generator=torch.Generator().manual_seed(3))
    return {"lookup": lambda: PromptLookupDrafter(96),
            "ngram": lambda: NGramDrafter.from_corpus([corpus.tolist()], 96, order=3,
                                                      abstain=True),
            "model": lambda: HFDrafter(others[1], name="noisy")}


@pytest.mark.parametrize("kind", ["lookup", "ngram", "model", "suffix"])
@pytest.mark.parametrize("k", [1, 4])
def test_replay_equals_a_fixed_decoding_run(kind, k):
    torch.set_num_threads(1)
    target, others = pool(vocab_size=96)
    make = _drafters(target, others).get(kind, lambda: SuffixDrafter(96))
    live, replayed = make(), make()
    dec = HedgeSpecDecoder(target, [live], draft_length=k, policy="fixed:0")
    prompts = [torch.tensor([5, 17, 40, 9, 33, 5, 17]), torch.tensor([8, 8, 21, 8, 8, 21, 3])]
    for prompt in [*prompts, prompts[0]]:  # the repeat: the suffix drafter has learnt it
        out = dec.generate(prompt.view(1, -1), max_new_tokens=24, seed=0)
        cont = out.sequences[0, len(prompt):].tolist()
        rec = replay_fixed(replayed, prompt, cont, k)
        assert rec["new_tokens"] == out.stats["new_tokens"] == 24
        assert rec["target_calls"] == out.stats["target_calls"]
        # the last round may be cut at the length limit: the decoder counts the drafts it
        # verified past it, the replay knows the continuation only up to it
        assert rec["accepted"][:-1] == out.stats["accepted"][:-1]
        assert rec["accepted"][-1] <= out.stats["accepted"][-1]


def test_replay_names_a_bad_draft_length():
    with pytest.raises(ValueError, match=r"k must be an integer >= 1, got 0"):
        replay_fixed(PromptLookupDrafter(8), torch.tensor([1, 2]), [3], 0)
