"""The transformers benchmark's speed-up-against-repetition panels, computed by hand."""

from __future__ import annotations

import math

import pytest

from spec_adapters.app.bench.plots import plot_speedup_vs_repetition, repetition_panels


def _rec(qid, method, tokens, seconds, temperature=0.0, section="main"):
    return {"section": section, "qid": qid, "temperature": temperature, "method": method,
            "tokens": tokens, "new_tokens": len(tokens), "seconds": seconds}


def test_each_query_pairs_its_speed_up_over_the_target_with_the_targets_repetition(tmp_path):
    loop = [1, 2, 3, 4, 5] * 2  # the last token's 5-gram was seen before: 1 of 10 repeated
    recs = [_rec("a/0", "target", list(range(10)), 2.0), _rec("b/0", "target", loop, 1.0),
            _rec("a/0", "normalhedge-cost", list(range(10)), 1.0),
            _rec("b/0", "normalhedge-cost", loop, 0.25),
            _rec("a/0", "fixed:suffix", list(range(10)), math.nan),  # replayed: not timed
            _rec("b/0", "fixed:suffix", loop, math.nan),
            _rec("a/0", "hf-prompt-lookup", list(range(10)), 1.0),  # one query only: left out
            _rec("a/0", "target", [7] * 3, 1.0, temperature=0.7),  # no method beside target
            _rec("a/0", "normalhedge", list(range(10)), 0.1, section="poolsize")]
    (panel,) = repetition_panels(recs)
    title, repeated, speedups = panel
    assert title == "temperature 0" and repeated == [0.0, 0.1]
    assert speedups == {"HedgeSpec cost-aware (NormalHedge, (drafter, k))":
                        pytest.approx([2.0, 4.0])}
    png = plot_speedup_vs_repetition([panel], tmp_path / "r.png", 0.2)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
