"""transformers' fastest documented single-request setting, a benchmark baseline: a static KV
cache and the model's forward compiled with ``torch.compile``.

The recipe is transformers' own ("Optimizing inference", static cache and ``torch.compile``)::

    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    model.generate(ids, cache=StaticCache(config=model.config, max_cache_len=L), ...)

applied to a copy of the target, so that the benchmark's other transformers baselines keep the
eager model. One cache of a fixed length serves every prompt (emptied before each), so the
one-token decoding step has a single shape and compiles once; the prefill's length varies and
``torch.compile`` makes it dynamic after its first recompilation. Compilation happens here,
in two untimed warm-up generations of different prompt lengths, never inside a measured run.

transformers' prompt lookup composes with it (``generate(prompt_lookup_num_tokens=K,
cache=...)``: the verification of up to ``K + 1`` tokens is one more dynamic shape); given
``lookup``, two more warm-ups run it on a prompt that repeats itself, so that drafts are found
and those shapes compiled too.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from spec_adapters.app.log import log

__all__ = ["StaticCompiledTarget"]

WARMUP_TOKENS = 4


def _own_code(forward: Callable) -> Callable:
    """``forward`` behind a function of its own code object.

    ``torch.compile`` keeps its graphs, and its limit of 8 recompilations, per code object of
    the outermost function it compiles. transformers' ``forward`` is wrapped by a decorator
    whose inner function's code every decorated forward shares, so the twin's graphs (every
    prefill and prompt-lookup shape) would count against any other compiled use of the model
    in the process: in the benchmark, HedgeSpec's compiled step hit the limit and fell back to
    eager for multi-token verification (2026-12-03, docs/benchmark-history.md)."""

    def forward_of_the_static_twin(*args, **kwargs):
        return forward(*args, **kwargs)

    return forward_of_the_static_twin


class StaticCompiledTarget:
    """A compiled twin of ``model`` and the static cache it generates into.

    Parameters
    ----------
    model : transformers causal LM
        The target (left as it is).
    max_cache_len : int
        The longest prompt plus new tokens any run will need.
    compiler : callable, optional
        ``compiler(forward) -> forward``; default transformers' recipe, ``torch.compile(forward,
        mode="reduce-overhead", fullgraph=True)`` (tests pass the identity: the static cache
        and its reuse across prompts are then checked without minutes of compilation).
    lookup : int, optional
        Also warm up transformers' prompt lookup with ``lookup`` draft tokens.

    Attributes
    ----------
    model : the twin, ``forward`` compiled (``mode="reduce-overhead", fullgraph=True``)
    cache : transformers.StaticCache of ``max_cache_len`` positions
    compile_s : float
        Seconds the warm-up (compilation) took.
    """

    def __init__(self, model, max_cache_len: int,
                 compiler: Callable[[Callable], Callable] | None = None,
                 lookup: int | None = None) -> None:
        import torch
        from transformers import StaticCache

        need = (3 if lookup else 2) * WARMUP_TOKENS + WARMUP_TOKENS + 1  # longest warm-up
        if max_cache_len < need:
            raise ValueError(f"max_cache_len must be >= {need}, got {max_cache_len}")
        self.model = copy.deepcopy(model).eval()
        compiler = compiler or (lambda f: torch.compile(f, mode="reduce-overhead",
                                                        fullgraph=True))
        self.model.forward = compiler(_own_code(self.model.forward))
        self.cache = StaticCache(config=self.model.config, max_cache_len=max_cache_len)
        t = time.perf_counter()
        vocab = self.model.config.vocab_size
        warmups = [((torch.arange(n) % vocab).view(1, -1), {})  # two prefill shapes: dynamic
                   for n in (WARMUP_TOKENS, 2 * WARMUP_TOKENS)]
        if lookup:  # a prompt repeating itself: prompt lookup finds drafts to verify
            ids = (torch.arange(3 * WARMUP_TOKENS) % WARMUP_TOKENS % vocab).view(1, -1)
            warmups += [(ids, {"prompt_lookup_num_tokens": lookup})] * 2
        with torch.inference_mode():
            for ids, kw in warmups:
                self.cache.reset()
                self.model.generate(ids, attention_mask=torch.ones_like(ids),
                                    cache=self.cache, do_sample=False,
                                    max_new_tokens=WARMUP_TOKENS, min_new_tokens=WARMUP_TOKENS,
                                    temperature=None, top_p=None, top_k=None, **kw)
        self.compile_s = time.perf_counter() - t
        log(f"transformers static cache + torch.compile: compiled in {self.compile_s:.1f} s")
