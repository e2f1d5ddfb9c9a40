"""Another weight type for a GGUF (llama.cpp's quantizer, written whole or not at all), the
perplexity it costs (the equation, by hand), and the choice of the type HedgeSpec is fastest
on (the prediction by hand, the quality budget)."""

from __future__ import annotations

import numpy as np
import pytest

from spec_adapters.llamacpp.quantize import perplexity, quantize, source_of, weight_type_of
from spec_adapters.llamacpp.target import GGUFTarget
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from spec_adapters.llamacpp.weight_choice import (
    Candidate,
    choose,
    row_prices_together,
    seconds_per_token,
)

pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")


@pytest.fixture(scope="module")
def f32_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf"
    write_tiny_gguf(path, hidden=64, heads=1, kv_heads=1, ff=128, seed=7)
    return path


@pytest.mark.parametrize("weight_type", ["Q8_0", "Q4_0"])
def test_a_quantized_file_loads_and_decodes_close_to_its_source(f32_path, tmp_path,
                                                                weight_type, capfd):
    capfd.readouterr()
    dest = quantize(f32_path, tmp_path / f"tiny.{weight_type}.gguf", weight_type, threads=1)
    assert dest.stat().st_size < f32_path.stat().st_size
    # no temporary left; the sidecar names the source (its tokenizer, its drafter pool)
    assert sorted(p.name for p in tmp_path.iterdir()) == [dest.name, dest.name + ".json"]
    assert source_of(dest) == f32_path.resolve() and source_of(f32_path) is None
    assert weight_type_of(dest) == weight_type and weight_type_of(f32_path) is None  # F32
    rows = {}
    for path in (f32_path, dest):
        t = GGUFTarget(path, n_ctx=64, n_threads=1)
        rows[path] = t.prefill([5, 70, 71, 72])
        t.close()
    a, b = rows[f32_path], rows[dest]
    assert not np.array_equal(a, b)  # another model ...
    assert np.corrcoef(a, b)[0, 1] > 0.9  # ... close to its source
    # llama.cpp's per-tensor lines (quantizing, repacking Q4_0 at load) stay off stderr
    assert "repack" not in capfd.readouterr().err


def test_a_failed_quantization_names_the_problem_and_leaves_nothing(tmp_path, f32_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but nothing else")
    with pytest.raises(ValueError, match="could not quantize"):
        quantize(junk, tmp_path / "out.gguf", "Q8_0", threads=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.gguf"]
    with pytest.raises(ValueError, match="unknown weight type 'Q3'"):
        quantize(f32_path, tmp_path / "out.gguf", "Q3")
    with pytest.raises(ValueError, match="does not exist"):
        quantize(tmp_path / "none.gguf", tmp_path / "out.gguf", "Q8_0")


def test_perplexity_is_the_exp_of_the_mean_next_token_loss(f32_path):
    t = GGUFTarget(f32_path, n_ctx=64, n_threads=1)
    texts = [[5, 70, 71, 72, 5, 70, 71], [100, 101, 102]]
    nll = []
    for text in texts:
        t.reset()
        logits = t.step(text).astype(np.float64)
        logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1,
                                      keepdims=True)) - logits.max(1, keepdims=True)
        nll += [-logp[j, text[j + 1]] for j in range(len(text) - 1)]
    assert perplexity(t, texts, window=16) == pytest.approx(np.exp(np.mean(nll)), rel=1e-9)
    with pytest.raises(ValueError, match="two tokens or more"):
        perplexity(t, [[3]])
    t.close()


def test_the_predicted_seconds_per_token_by_hand():
    # alpha 0.5: k tokens drafted yield 1, 1.5, 1.75 tokens a round
    s, k = seconds_per_token([0.010, 0.013, 0.020], 0.5)
    assert k == 1 and s == pytest.approx(0.013 / 1.5)
    assert seconds_per_token([0.010, 0.020, 0.030], 0.5) == (0.010, 0)  # rows too dear
    assert seconds_per_token([0.010, 0.020], 0.0) == (0.010, 0)
    for bad in ([], [0.01, float("nan")], [0.0]):
        with pytest.raises(ValueError, match="row_seconds"):
            seconds_per_token(bad, 0.5)
    with pytest.raises(ValueError, match="alpha"):
        seconds_per_token([0.01], 1.0)


def test_the_choice_is_the_fastest_type_within_the_quality_budget():
    source = Candidate("source", (0.010, 0.016, 0.022), 20.0)
    cheap_rows = Candidate("Q4_K_M", (0.011, 0.013, 0.016), 20.8)   # +4 %: a candidate
    fastest = Candidate("Q4_0", (0.008, 0.010, 0.012), 24.0)        # +20 %: not one
    chosen, scored = choose([source, cheap_rows, fastest], 20.0, alpha=0.5, budget=0.05)
    assert chosen.name == "Q4_K_M" and chosen.best_k == 1  # 13 ms / 1.5 < 16 ms / 1.75
    assert [c.within_budget for c in scored] == [True, True, False]
    assert choose([source, cheap_rows, fastest], 20.0, 0.5, budget=0.25)[0].name == "Q4_0"
    assert choose([source, cheap_rows], 20.0, alpha=0.0)[0].name == "source"  # nothing pays
    with pytest.raises(ValueError, match="no weight type within"):
        choose([fastest], 20.0)
    # within the timing's noise of the source: the source itself, not another model
    near = Candidate("Q8_0", (0.0098, 0.016, 0.022), 20.0)
    assert choose([source, near], 20.0, alpha=0.5)[0].name == "source"
    assert choose([source, near], 20.0, alpha=0.5, margin=0.0)[0].name == "Q8_0"


class _DriftingTimer:
    """A file whose decodes take ``base`` seconds times the machine's slowdown, which grows by
    ``drift`` with every timing of any file (a shared ``clock``), and by ``spike`` in the
    timings listed in ``disturbed``."""

    def __init__(self, base: float, clock: list, drift: float, disturbed=(), spike=3.0):
        self.base, self.clock, self.drift = base, clock, drift
        self.disturbed, self.spike = set(disturbed), spike

    def row_prices(self, rows, context=300, repeats=3):
        call = len(self.clock)
        self.clock.append(self)
        slow = (1 + self.drift * call) * (self.spike if call in self.disturbed else 1.0)
        return self.base * slow * np.arange(1, rows + 1)


def test_types_timed_together_keep_their_order_while_the_machine_drifts():
    """Timed in turn, round after round, a type 5% faster stays faster under a drift of 2% a
    timing; timed one type after the other (five timings each) it would come out slower. One
    disturbed timing is outvoted by the median."""
    clock = []
    slow, fast = _DriftingTimer(0.010, clock, 0.02), _DriftingTimer(0.0095, clock, 0.02)
    rounds = row_prices_together([slow, fast], rows=3, rounds=5)
    prices = np.median(rounds, axis=0)
    assert rounds.shape == (5, 2, 3) and prices[1, 0] < prices[0, 0]
    assert (rounds[:, 1, 0] < rounds[:, 0, 0]).sum() >= 3  # faster in most rounds too
    # forward, backward, forward ...: neither always first
    assert clock == [slow, fast, fast, slow, slow, fast, fast, slow, slow, fast]
    in_series = [np.median([t.base * (1 + 0.02 * (5 * j + c)) for c in range(5)])
                 for j, t in enumerate((slow, fast))]
    assert in_series[1] > in_series[0]  # what the earlier timing would have chosen
    clock = []
    steady = [_DriftingTimer(0.010, clock, 0.0, disturbed={3}), _DriftingTimer(0.012, clock, 0.0)]
    np.testing.assert_allclose(np.median(row_prices_together(steady, rows=2, rounds=5), 0),
                               [[0.010, 0.020], [0.012, 0.024]])
    with pytest.raises(ValueError, match="rounds"):
        row_prices_together(steady, rows=2, rounds=0)
    with pytest.raises(ValueError, match="targets"):
        row_prices_together([], rows=2)


def test_a_type_replaces_the_source_only_where_it_is_faster_in_every_round():
    """A near tie (6% faster by the medians, slower in one round) keeps the source; a type
    faster by the margin in every round is chosen, whatever one round's spread."""
    src = [(0.010, 0.020), (0.011, 0.022), (0.010, 0.020), (0.012, 0.024), (0.010, 0.020)]
    tie = [(0.0094, 0.02), (0.0117, 0.02), (0.0094, 0.02), (0.0112, 0.02), (0.0094, 0.02)]
    fast = [(0.008, 0.02), (0.009, 0.02), (0.008, 0.02), (0.010, 0.02), (0.009, 0.02)]

    def cand(name, rounds):
        return Candidate(name, tuple(np.median(rounds, 0)), 20.0, rounds=tuple(rounds))

    chosen, scored = choose([cand("source", src), cand("Q4_K_M", tie)], 20.0, alpha=0.0)
    assert chosen.name == "source"
    assert scored[1].seconds_per_token < 0.95 * scored[0].seconds_per_token  # by the medians
    assert max(scored[1].vs_source) > 1.0 and len(scored[1].vs_source) == 5
    chosen, scored = choose([cand("source", src), cand("Q4_K_M", tie), cand("Q4_0", fast)],
                            20.0, alpha=0.0)
    assert chosen.name == "Q4_0" and max(chosen.vs_source) < 0.95


def test_a_type_whose_rows_depend_on_their_batch_is_not_a_candidate():
    source = Candidate("source", (0.010, 0.016, 0.022), 20.0)
    floats = Candidate("F16", (0.009, 0.010, 0.011), 19.0, lossless=False)
    chosen, scored = choose([source, floats], 20.0, alpha=0.5)
    assert chosen.name == "source" and not scored[1].lossless
    with pytest.raises(ValueError, match="do not depend on their batch"):
        choose([floats], 20.0)


def test_rows_alone_and_batched_are_checked_at_load(f32_path, tmp_path):
    """A quantized file's rows agree alone and in a batch of up to round_rows; float32 weights
    take llamafile's tiled matmul for a batch (another summation order) and do not."""
    q4 = quantize(f32_path, tmp_path / "tiny.Q4_0.gguf", "Q4_0", threads=1)
    for path, invariant in ((q4, True), (f32_path, False)):
        t = GGUFTarget(path, n_ctx=64, n_threads=1, round_rows=5)
        assert t.rows_invariant is invariant and t.n_cached == 0
        t.close()
    t = GGUFTarget(q4, n_ctx=64, n_threads=1, batch_invariant=False)
    assert not t.rows_invariant  # not checked without the invariant cache
    t.close()
