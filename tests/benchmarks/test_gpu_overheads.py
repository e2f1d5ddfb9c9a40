"""benchmarks/gpu_overheads.py: the small config runs from the source tree (as on the GPU
machine: PYTHONPATH=., no matplotlib, no module-level tqdm import of ours) in seconds, and
its JSON is complete and consistent."""

from __future__ import annotations

import ast
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_overheads.py"


def _imports_tqdm_at_top_level(path: Path) -> bool:
    """A module-level ``import tqdm`` / ``from tqdm ...`` (a progress bar the GPU host's bare
    environment need not have; lazy imports inside functions are fine)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tqdm"
                                                 for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tqdm":
            return True
    return False


def test_small_config_json_has_every_row_and_consistent_rows(tmp_path):
    out = tmp_path / "res" / "gpu.json"
    argv = [str(SCRIPT), "--config", "small", "--device", "cpu", "--repeats", "3",
            "--out", str(out)]
    code = ("import json, runpy, sys\n"
            "sys.modules['matplotlib'] = None  # absent on the GPU host\n"
            f"sys.argv = {argv!r}\n"
            "try:\n"
            f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
            "finally:\n"
            "    ours = [m.__file__ for n, m in list(sys.modules.items())\n"
            "            if n.split('.')[0] in ('spec_adapters', 'onlinelearn')]\n"
            "    print('MODULES=' + json.dumps(ours))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.split("MODULES=")[1])
    assert loaded and not [f for f in loaded if _imports_tqdm_at_top_level(Path(f))]
    res = json.loads(out.read_text())
    rows = res["rows"]
    assert list(rows) == list(load_script("gpu_overheads").ROWS)
    for name, row in rows.items():
        times = row["times_ms"]
        assert len(times) == res["repeats"] == 3, name
        assert all(math.isfinite(x) and x > 0 for x in times), name
        assert row["median_ms"] == statistics.median(times), name
        assert name in proc.stdout
    N = res["n_heads"]
    assert N == 8
    assert rows["eval_1_head"]["heads"] == 1
    assert rows["eval_n_heads_batched"]["heads"] == N and rows["eval_n_heads_batched"][
        "groups"] == 1  # all N heads in one stacked call
    assert rows["eval_n_heads_loop"]["heads"] == N and rows["eval_n_heads_loop"]["groups"] == N
    assert rows["target_forward_tree"]["tokens"] == 60  # root + 59 drafted nodes
    assert rows["head_draft_tree"]["nodes"] == 59
    assert rows["learner_update"]["experts"] == N
    ratio = res["ratios"]["eval_n_heads_batched / eval_1_head"]
    assert ratio == rows["eval_n_heads_batched"]["median_ms"] / rows["eval_1_head"]["median_ms"]
    assert res["paper_a100_ms"] == {"target_forward": 75.7, "eagle_drafter": 2.5,
                                    "normalhedge_update": 0.41}


def test_bad_repeats_is_a_usage_error():
    with pytest.raises(SystemExit, match="2"):
        load_script("gpu_overheads").main(["--repeats", "0"])
