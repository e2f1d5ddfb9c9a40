"""benchmarks/llamacpp_draw.py: llama.cpp's C sampler chain draws from the row it is given, as
our numpy chain does (a top-p that keeps one token: both the argmax; else a kept token)."""

from __future__ import annotations

import numpy as np
import pytest

from spec_adapters.llamacpp import GGUFTarget
from spec_adapters.llamacpp.sampling_chain import draw_token, warp_row
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from tests.benchmarks.scripts import load_script

pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")


def test_the_c_chain_draws_a_token_our_chain_keeps(tmp_path):
    draw = load_script("llamacpp_draw")
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, hidden=32, layers=2, seed=3)
    target = GGUFTarget(path, n_ctx=64, n_threads=1)
    try:
        row = target.prefill([1, 2, 3, 4])
        lc = target._lc
        one = draw.CChain(lc, target.vocab_size, 0.7, 1e-6, seed=0)  # top-p keeps one token
        assert one.apply(row) == int(row.argmax()) == one.sample(target._ctx)
        assert draw_token(row, 0.7, None, 1e-6, np.random.default_rng(0)) == int(row.argmax())
        one.close()
        chain = draw.CChain(lc, target.vocab_size, 0.7, 0.9, seed=1)
        # ours at a hair more mass: llama.cpp sums in float32, the boundary may move by ~1e-7
        kept = set(warp_row(row, 0.7, None, 0.9 + 1e-4)[0].tolist())
        assert {chain.apply(row) for _ in range(20)} <= kept
        chain.close()
    finally:
        target.close()
