"""Benchmark end to end on a tiny target, tiny domains and a tiny pool: every section runs,
results are lossless (greedy outputs equal the target's), the oracle dominates the fixed
drafters, resuming skips finished runs, and the figures and tables are written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spec_adapters.app.bench import (
    BenchConfig,
    Records,
    aggregate,
    markdown_tables,
    mixed_stream,
    regret_curves,
    run_bench,
)
from spec_adapters.app.domains import load_domains
from spec_adapters.app.pool import PoolConfig, load_pool
from spec_adapters.app.router import Router
from spec_adapters.hf.models import load_target

from .bench_fixtures import make_target_folder, write_domains
from .test_router import _KeywordEmbedder

DOMS = ("code", "math", "news")
CFG = BenchConfig(queries_per_domain=1, sampled_queries_per_domain=1, max_new_tokens=6,
                  draft_length=3, policies=("normalhedge", "exp3spec", "ucbspec"),
                  hf_lookup=True, variant_queries_per_domain=1, router_accuracy_prompts=2,
                  pool_sizes=(1, 3, 8), poolsize_queries_per_domain=1, overhead=True,
                  poolsize_policies=("normalhedge", "exp3spec", "ucbspec"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bench")
    model, tok = load_target(make_target_folder(root), root / "cache")
    write_domains(root / "cache", DOMS)
    domains = load_domains(root / "cache", DOMS)
    pool = load_pool(model, tok, root / "cache",
                     PoolConfig(domains=DOMS, max_train_tokens=2000, extra_shards=1,
                                answers_per_domain=2, answer_tokens=4),
                     progress=False)
    emb = _KeywordEmbedder(["def", "apples", "mayor"], seed=3)
    texts = [t for d in DOMS for t in domains[d].train[:10]]
    labels = [d for d in DOMS for _ in range(10)]
    pool.router = Router(list(DOMS), embedder=emb).fit(texts, labels)
    out = root / "out"
    summary = run_bench(model, tok, pool, domains, CFG, out, progress=False)
    return model, tok, pool, domains, out, summary


def test_every_section_and_output_is_written(run):
    _, _, pool, _, out, summary = run
    for f in ("records.jsonl", "results.json", "summary.json", "tables.md", "settings.json",
              "fig5a_regret.png", "fig5b_poolsize.png", "table1_heatmap.png", "overhead.json",
              "router.json", "routes.json"):
        assert (out / f).is_file(), f
    res = json.loads((out / "results.json").read_text())
    sections = {r["section"] for r in res["records"]}
    assert sections == {"main", "variant", "poolsize"}
    mix = summary["main"]["0.0"]
    for m in ("target", "generalist", "specialist", "router", "oracle", "normalhedge",
              "exp3spec", "ucbspec", "hf-prompt-lookup"):
        assert m in mix and mix[m]["mixed"]["mat"] >= 1.0, m
    assert "0.7" in summary["main"]
    assert set(summary["table1"]) == set(pool.names)
    assert set(summary["poolsize"]["normalhedge"]) == {"1", "3", "8"}
    md = (out / "tables.md").read_text()
    assert "HedgeSpec (NormalHedge)" in md and "Table 1" in md
    ov = summary["overhead"]
    assert ov["target_step_ms"] > 0 and ov["learner_update_ms"] > 0


def test_greedy_runs_are_lossless(run):
    """Every greedy method produced the target's own greedy continuation."""
    _, _, _, _, out, _ = run
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    by_q = {}
    for r in rows:
        if r["section"] == "main" and r["temperature"] == 0.0:
            by_q.setdefault(r["qid"], {})[r["method"]] = r["tokens"]
    assert by_q
    for methods in by_q.values():
        ref = methods["target"]
        for m, toks in methods.items():
            assert toks == ref, m


def test_oracle_dominates_every_fixed_drafter_per_query(run):
    _, _, pool, _, out, _summary = run
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for qid in {r["qid"] for r in rows if r["section"] == "main"}:
        fixed = [r["new_tokens"] / r["target_calls"] for r in rows
                 if r["qid"] == qid and r["method"].startswith("fixed:")
                 and r["temperature"] == 0.0]
        one = aggregate([r for r in rows if r["qid"] == qid and r["section"] == "main"],
                        pool, CFG)
        assert one["main"]["0.0"]["oracle"]["mixed"]["mat"] == pytest.approx(max(fixed))


def test_resume_skips_finished_runs_and_rejects_other_settings(run):
    model, tok, pool, domains, out, summary = run
    n = len((out / "records.jsonl").read_text().splitlines())
    # an interrupted append leaves a cut line: it is ignored, not fatal
    with open(out / "records.jsonl", "a") as fh:
        fh.write('{"section": "main", "qid": ')
    again = run_bench(model, tok, pool, domains, CFG, out, progress=False)
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == n + 1
    assert again["main"]["0.0"]["normalhedge"] == summary["main"]["0.0"]["normalhedge"]
    other = BenchConfig(**{**CFG.__dict__, "max_new_tokens": 7})
    with pytest.raises(ValueError, match="other settings"):
        run_bench(model, tok, pool, domains, other, out, progress=False)


def test_mixed_stream_is_a_shuffle_of_each_domains_first_prompts(run):
    _, _, _, domains, _, _ = run
    s = mixed_stream(domains, 2, seed=0)
    assert sorted(q.qid for q in s) == sorted(f"{d}/{i}" for d in DOMS for i in range(2))
    assert [q.qid for q in s] == [q.qid for q in mixed_stream(domains, 2, seed=0)]
    assert all(q.prompt == domains[q.domain].prompts[int(q.qid.split("/")[1])] for q in s)


def test_regret_curve_matches_hand_computation():
    """Two queries; best fixed MATs 2.0 and 3.0; the policy's rounds accept 0,1 then 2,2."""
    recs = [
        {"section": "main", "qid": "a", "temperature": 0.0, "method": "fixed:x",
         "new_tokens": 4, "target_calls": 2},
        {"section": "main", "qid": "a", "temperature": 0.0, "method": "normalhedge",
         "accepted": [0, 1]},
        {"section": "main", "qid": "b", "temperature": 0.0, "method": "fixed:x",
         "new_tokens": 6, "target_calls": 2},
        {"section": "main", "qid": "b", "temperature": 0.0, "method": "normalhedge",
         "accepted": [2, 2]},
    ]
    c = regret_curves(recs, None, CFG, methods=("normalhedge",))["normalhedge"]
    np.testing.assert_allclose(c, [1.0, 1.0, 1.0, 1.0])


def test_records_ignore_cut_lines(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"section": "main", "qid": "q", "temperature": 0.0, "method": "m", "n": 0}\n'
                 '{"section": ')
    r = Records(p)
    assert r.has("main", "q", 0.0, "m", 0) and len(r.rows) == 1


def test_markdown_marks_the_best_drafter_per_domain():
    s = {"main": {}, "table1": {"a": {"code": 1.5, "news": 1.0},
                                "b": {"code": 1.2, "news": 1.4}}}
    md = markdown_tables(s)
    assert "| a | **1.50** | 1.00 |" in md and "| b | 1.20 | **1.40** |" in md


def test_median_ms_times_only_fn_after_the_warmup(monkeypatch):
    from spec_adapters.app import measure

    clock = iter([0.0,  # the warm-up call's start: never subtracted
                  10.0, 10.002, 20.0, 20.009, 30.0, 30.004])  # 2, 9 and 4 ms
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(clock))
    calls = []
    ms = measure.median_ms(lambda: calls.append("fn"), 3, warmup=1,
                           after=lambda: calls.append("after"),
                           sync=lambda: calls.append("sync"))
    assert ms == pytest.approx(4.0)
    assert calls == ["sync", "fn", "sync", "after"] * 4
    clock = iter([0.0, 0.5, 1.0, 1.25])
    assert measure.time_calls(lambda: None, 2) == pytest.approx([500.0, 250.0])
    with pytest.raises(ValueError, match="repeats >= 1"):
        measure.median_ms(lambda: None, 0)


def test_run_decoder_keeps_what_the_tables_need():
    from types import SimpleNamespace

    from spec_adapters.app.measure import PHASES, run_decoder

    stats = {"new_tokens": 5, "target_calls": 2, "total_seconds": 0.5, "chosen": [1, 0],
             "accepted": [2, 1], "weights": [[0.5, 0.5], [0.123456, 0.876544]],
             **{f"{p}_seconds": i / 10 for i, p in enumerate(PHASES)}}
    seen = {}

    class Fake:
        def generate(self, ids, **kw):
            seen.update(kw)
            return SimpleNamespace(sequences=torch.tensor([[7, 8, 1, 2, 3, 4, 5]]), stats=stats)

    r = run_decoder(Fake(), torch.tensor([[7, 8]]), 5, 0.7, seed=3, eos_token_id=[])
    assert seen == {"max_new_tokens": 5, "temperature": 0.7, "seed": 3, "eos_token_id": []}
    assert r["tokens"] == [1, 2, 3, 4, 5] and r["seconds"] == 0.5
    assert (r["new_tokens"], r["target_calls"], r["chosen"], r["accepted"]) == (5, 2, [1, 0],
                                                                             [2, 1])
    assert r["timing"] == {"prefill": 0.0, "select": 0.1, "draft": 0.2, "verify": 0.3,
                           "eval": 0.4, "update": 0.5}
    assert r["final_weights"] == [0.1235, 0.8765]
