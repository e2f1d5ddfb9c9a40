"""benchmarks/llamacpp_types.py: a decode of 1..9 rows timed per weight type and layout, and
the plot of the records as JSON holds them (row counts as strings)."""

from __future__ import annotations

import json

import pytest

from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from tests.benchmarks.scripts import load_script

pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")


def test_every_row_count_is_timed_and_plotted(tmp_path):
    types = load_script("llamacpp_types")
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, hidden=32, layers=2, heads=1, kv_heads=1, seed=3)
    records = []
    for repack in (True, False):
        ms = types.time_rows(path, context=40, repeats=2, threads=1, repack=repack)
        assert sorted(ms) == list(types.ROWS) and all(v > 0 for v in ms.values())
        records.append(json.loads(json.dumps(  # as records.jsonl gives them back
            {"kind": "rows", "type": "F32", "threads": 1, "repack": repack, "context": 40,
             "ms": {str(n): v for n, v in ms.items()}})))
    types.plot(records, threads=1, context=40, path=tmp_path / "rows.png")
    assert (tmp_path / "rows.png").stat().st_size > 1000
