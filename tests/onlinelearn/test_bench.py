"""Smoke test of ``python -m onlinelearn.bench``: it runs every learner and prints a table."""

from __future__ import annotations

import json

import pytest

from onlinelearn import bench


def test_bench_reports_a_positive_time_for_every_learner_and_size():
    results = bench.run(sizes=(2, 8), steps=3, repeats=2)
    assert set(results) == set(bench.LEARNERS)
    assert all(set(row) == {2, 8} and all(us > 0 for us in row.values())
               for row in results.values())
    table = bench.format_table(results)
    assert table.splitlines()[0] == "| learner | n=2 | n=8 |"
    assert len(table.splitlines()) == 2 + len(bench.LEARNERS)


def test_bench_main_prints_json(capsys):
    assert bench.main(["--json", "--quick", "--sizes", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["update"]) == set(bench.LEARNERS) and out["statistic"] == "median"


def test_bench_rejects_sizes_below_one_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--quick", "--sizes", "8", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "python -m onlinelearn.bench" in err and "--sizes must all be >= 1" in err
