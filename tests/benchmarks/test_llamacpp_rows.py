"""benchmarks/llamacpp_rows.py: one decode of 1..9 rows after a cached context, timed (the rows
dropped from the cache after each)."""

from __future__ import annotations

import pytest

from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from tests.benchmarks.scripts import load_script

pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")


def test_every_row_count_is_timed(tmp_path):
    rows = load_script("llamacpp_rows")
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, hidden=32, layers=2, seed=3)
    ms = rows.time_rows(str(path), context=40, repeats=2, threads=1)
    assert sorted(ms) == list(rows.ROWS) and all(v > 0 for v in ms.values())
