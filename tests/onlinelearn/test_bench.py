"""Smoke test of ``python -m onlinelearn.bench``: it runs every learner and prints a table, and
NormalHedge on each loss family."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from onlinelearn import bench


def test_bench_reports_the_timer_in_microseconds_for_every_learner_and_size():
    calls = []

    def timer(factory, n, steps, repeats):
        calls.append((factory, n, steps, repeats))
        return n * 1e-6  # seconds per update

    results = bench.run(sizes=(2, 8), steps=3, repeats=2, timer=timer)
    assert results == {name: {2: pytest.approx(2.0), 8: pytest.approx(8.0)}
                       for name in bench.LEARNERS}
    assert sorted((n, s, r) for _, n, s, r in calls) == sorted(
        [(2, 3, 2), (8, 3, 2)] * len(bench.LEARNERS))
    table = bench.format_table(results)
    assert table.splitlines()[0] == "| learner | n=2 | n=8 |"
    assert len(table.splitlines()) == 2 + len(bench.LEARNERS)
    assert table.splitlines()[2].endswith("| 2.0 | 8.0 |")


@pytest.mark.parametrize("name", ["hedge", "exp3"])
def test_time_updates_is_the_median_block_time_per_update(monkeypatch, name):
    clock = iter(np.arange(0.0, 100.0, 0.5))  # each process_time() call advances 0.5 s
    monkeypatch.setattr(bench.time, "process_time", lambda: float(next(clock)))
    factory = next(f for k, f in bench.LEARNERS.items() if k.lower().startswith(name))
    assert bench.time_updates(factory, 4, steps=5, repeats=3) == pytest.approx(0.5 / 5)


def test_bench_main_prints_json(capsys):
    assert bench.main(["--json", "--quick", "--sizes", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["update"]) == set(bench.LEARNERS) and out["statistic"] == "median"
    families = out["normalhedge_families"]
    assert list(families) == list(bench.FAMILIES)
    assert all(set(row) == {"2"} and set(row["2"]) == {"us", "iterations"}
               for row in families.values())


def test_bench_main_prints_normalhedge_per_chosen_family(capsys):
    assert bench.main(["--quick", "--sizes", "8", "--families", "iid", "alternating"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = lines.index("| family | n=8 |")
    assert "NormalHedge update by loss family" in lines[head - 1]
    rows = lines[head + 2:]
    assert [row.split(" | ")[0] for row in rows] == ["| iid", "| alternating"]
    assert all(re.fullmatch(r"\| \w+ \| \d+\.\d \(\d\.\d\d\) \|", row) for row in rows), rows


def test_bench_rejects_an_unknown_family_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--quick", "--families", "gaussian"])
    assert exit_.value.code == 2
    assert "--families: invalid choice: 'gaussian'" in capsys.readouterr().err


@pytest.mark.parametrize("family", sorted(bench.FAMILIES))
def test_loss_families_are_loss_matrices_of_their_kind(family):
    losses = bench.FAMILIES[family](np.random.default_rng(0), 1_000, 5)
    assert losses.shape == (1_000, 5) and losses.min() >= 0.0 and losses.max() <= 1.0
    kind = {
        "one_better": losses.mean(axis=0).argmin() == 0 and losses[:, 0].max() <= 0.8,
        "iid": np.ptp(losses.mean(axis=0)) < 0.1 and len(np.unique(losses)) == losses.size,
        "all_equal": np.all(losses == losses[:, :1]) and len(np.unique(losses)) == 1_000,
        "alternating": np.all(losses[1:, 0] + losses[1:, 1] == 1.0)
                       and np.all(np.diff(losses[1:, 0]) != 0) and np.all(losses[:, 2:] == 1),
        "heavy_tailed": 0.5 < np.mean(losses < 0.1) < 0.8 and 0 < np.mean(losses == 1.0) < 0.05,
    }
    assert kind[family]


def test_bench_rejects_sizes_below_one_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--quick", "--sizes", "8", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "python -m onlinelearn.bench" in err and "--sizes must all be >= 1" in err
