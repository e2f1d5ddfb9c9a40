"""transformers' static cache + torch.compile baseline: one cache of a fixed length reused
across prompts gives ``model.generate``'s greedy output on each (the compilation itself is
replaced by the identity: its numerics are torch's)."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.app.bench.run import run_target
from spec_adapters.app.bench.static_compiled import StaticCompiledTarget


def test_the_static_cache_reused_across_prompts_gives_generates_greedy_output(tiny_llama):
    torch.set_num_threads(1)
    model = tiny_llama(vocab_size=96, seed=3)
    compiled = []
    static = StaticCompiledTarget(model, max_cache_len=64,
                                  compiler=lambda f: compiled.append(f) or f)
    assert static.model is not model  # the other baselines keep the eager target
    # what is compiled has a code object of its own: its graphs and recompile limit are not
    # shared with other compiled uses of the model class (HedgeSpec's compiled step)
    assert compiled == [static.model.forward]
    assert compiled[0].__code__ is not type(model).forward.__code__
    assert compiled[0].__code__ is not model.forward.__code__
    for prompt in ([5, 9, 14, 3, 7, 7, 21], [40, 2, 3], list(range(10, 40))):  # long, short, long
        ids = torch.tensor([prompt])
        want = run_target(model, ids, 20, 0.0, seed=0)
        got = run_target(static.model, ids, 20, 0.0, seed=0, cache=static.cache)
        assert got["tokens"] == want["tokens"]
        assert got["new_tokens"] == want["new_tokens"] == 20


def test_prompt_lookup_on_the_static_cache_gives_generates_greedy_output(tiny_llama):
    """transformers' prompt lookup composes with the static cache (warmed up for it): greedy
    output equal to plain ``generate``'s, each new token timed."""
    torch.set_num_threads(1)
    model = tiny_llama(vocab_size=96, seed=3)
    static = StaticCompiledTarget(model, max_cache_len=64, compiler=lambda f: f, lookup=3)
    for prompt in ([5, 9, 14, 5, 9, 14, 5, 9], list(range(10, 30)) * 2):
        ids = torch.tensor([prompt])
        want = run_target(model, ids, 16, 0.0, seed=0)
        got = run_target(static.model, ids, 16, 0.0, seed=0, cache=static.cache,
                         prompt_lookup=3)
        assert got["tokens"] == want["tokens"] and len(got["token_seconds"]) == 16


def test_a_cache_too_short_for_the_warm_up_is_refused(tiny_llama):
    with pytest.raises(ValueError, match="max_cache_len"):
        StaticCompiledTarget(tiny_llama(vocab_size=96), max_cache_len=3, compiler=lambda f: f)
    with pytest.raises(ValueError, match="max_cache_len must be >= 17"):
        StaticCompiledTarget(tiny_llama(vocab_size=96), max_cache_len=16, compiler=lambda f: f,
                             lookup=3)
