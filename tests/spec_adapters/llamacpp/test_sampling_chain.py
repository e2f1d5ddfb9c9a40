"""llama.cpp's sampling chain (top-k, top-p on the raw softmax, then the temperature) as the
llama.cpp engine warps a row: the order of the chain, the same probabilities as sorting whole
rows, and a draw from the kept tokens equal to a draw from the full row."""

from __future__ import annotations

import numpy as np
import pytest

from spec_adapters.llamacpp.sampling_chain import draw_token, warp_llama


def test_warp_keeps_top_k_then_top_p_of_the_raw_softmax_then_tempers():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    p = warp_llama(logits, 2.0, None, 0.7)  # raw softmax: {0, 1} reach 0.8 >= 0.7
    kept = np.array([0.5, 0.3]) ** 0.5
    np.testing.assert_allclose(p[0], [*(kept / kept.sum()), 0, 0])
    np.testing.assert_allclose(warp_llama(logits, 1.0, 1, 1.0)[0], [1, 0, 0, 0])


def _warp_by_full_sort(x, temperature, top_k, top_p):
    """llama.cpp's chain the slow way: every row sorted whole (ties by token id)."""
    x = x.astype(np.float64)
    keep = np.ones_like(x, bool)
    if top_k is not None:
        keep &= x >= -np.sort(-x, axis=1)[:, top_k - 1:top_k]
    z = np.where(keep, x, -np.inf)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    order = np.argsort(-p, axis=1, kind="stable")
    sp = np.take_along_axis(p, order, 1)
    kept = np.zeros_like(keep)
    np.put_along_axis(kept, order, np.cumsum(sp, 1) - sp < top_p, 1)
    keep &= kept
    z = np.where(keep, x / temperature, -np.inf)
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


@pytest.mark.parametrize("scale", [0.2, 3.0, 30.0])  # flat (the whole row sorted) .. peaked
@pytest.mark.parametrize("top_k,top_p", [(None, 0.9), (None, 0.5), (4000, 0.99), (7, 0.9)])
def test_warp_of_a_large_vocabulary_equals_sorting_every_row(scale, top_k, top_p):
    """49,152 tokens (the default target's): warp_llama sorts only its largest logits; the
    same probabilities as sorting whole rows, ties at the edge of the kept set included."""
    rng = np.random.default_rng(int(scale * 10))
    x = (scale * rng.standard_normal((3, 49152))).astype(np.float32)
    x[1] = np.round(x[1])  # many ties
    x[2, :3000] = x[2].max() - 0.01  # a plateau wider than the candidates
    got = warp_llama(x, 0.7, top_k, top_p)
    np.testing.assert_allclose(got, _warp_by_full_sort(x, 0.7, top_k, top_p), rtol=1e-12,
                               atol=0)


@pytest.mark.parametrize("top_p", [0.9, 1.0])
def test_a_draw_from_the_kept_tokens_is_the_full_rows_draw(top_p):
    """draw_token reads the inverse CDF over the kept tokens in id order: for every seed the
    token the same uniform selects on the full warped row (zeros included)."""
    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal(49152)).astype(np.float32)
    cdf = np.cumsum(warp_llama(x[None], 0.7, None, top_p)[0])
    drawn = set()
    for seed in range(40):
        u = np.random.default_rng(seed).random()
        want = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        assert draw_token(x, 0.7, None, top_p, np.random.default_rng(seed)) == want
        drawn.add(want)
    assert len(drawn) > 5  # the seeds reach several tokens
