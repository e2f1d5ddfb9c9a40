"""Benchmark end to end on a tiny target, tiny domains and a tiny pool: every section runs,
results are lossless (greedy outputs equal the target's), the oracle dominates the fixed
drafters, resuming skips finished runs, and the figures and tables are written."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from spec_adapters.app.bench.aggregate import aggregate, regret_curves
from spec_adapters.app.bench.config import POLICIES
from spec_adapters.app.bench.records import Records
from spec_adapters.app.bench.run import (
    PRESETS,
    BenchConfig,
    _decoder,
    _plan,
    mixed_stream,
    run_bench,
    with_overrides,
)
from spec_adapters.app.bench.tables import markdown_tables, speed_tables
from spec_adapters.app.domains import chat_ids, load_domains
from spec_adapters.app.pool.cache import load_pool
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.app.router import Router
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters import HFDrafter
from spec_adapters.drafters.ngram import NGramDrafter
from spec_adapters.hf.models import load_target
from spec_adapters.store.pool_settings import NGramPoolSettings
from tests.spec_adapters.app.test_router import _KeywordEmbedder
from tests.spec_adapters.bench_fixtures import distill_answers, make_target_folder, write_domains

DOMS = ("code", "math", "news")
SPEED = ("normalhedge-cost", "normalhedge", "exp3spec", "ucbspec", "metasd-ucb")
CFG = BenchConfig(queries_per_domain=1, sampled_queries_per_domain=1, max_new_tokens=6,
                  draft_length=3, policies=SPEED, sampled_policies=SPEED,
                  hf_lookup=True, rows_first_target=True, variant_queries_per_domain=1,
                  router_accuracy_prompts=2,
                  pool_sizes=(1, 3, 8), poolsize_queries_per_domain=1, overhead=True,
                  poolsize_policies=("normalhedge", "exp3spec", "ucbspec"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bench")
    model, tok = load_target(make_target_folder(root), root / "cache")
    write_domains(root / "cache", DOMS)
    distill_answers(model, tok, root / "cache", DOMS)
    domains = load_domains(root / "cache", DOMS)
    pool = load_pool(model, tok, root / "cache",
                     PoolConfig(NGramPoolSettings(DOMS, max_train_tokens=2000,
                                                  distilled_tokens=6), extra_shards=1),
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
              "speed.png", "fig5a_regret.png", "fig5b_poolsize.png", "table1_heatmap.png",
              "overhead.json",
              "router.json", "routes.json"):
        assert (out / f).is_file(), f
    res = json.loads((out / "results.json").read_text())
    sections = {r["section"] for r in res["records"]}
    assert sections == {"main", "variant", "poolsize"}
    mix = summary["main"]["0.0"]
    for m in ("target", "generalist", "specialist", "router", "oracle", "normalhedge",
              "exp3spec", "ucbspec", "hf-prompt-lookup", "target-rows-first"):
        assert m in mix, m
    same = summary["greedy_identical"]
    assert same["target-rows-first"] == [len(DOMS), len(DOMS)]  # greedy: model.generate's
    assert all(a == n == len(DOMS) for a, n in same.values()), same
    assert "0.7" in summary["main"]
    assert set(summary["table1"]) == {*pool.names, "ngram-union", "suffix-no-memory"}
    assert set(summary["poolsize"]["normalhedge"]) == {"1", "3", "8"}
    md = (out / "tables.md").read_text()
    assert "HedgeSpec (NormalHedge)" in md and "Table 1" in md
    ov = summary["overhead"]
    assert (ov["draft_length"], ov["eval_pool_n"], ov["eval_pool32_n"], ov["threads"]) == (
        CFG.draft_length, len(pool.drafters), min(32, len(pool.drafters) + len(pool.extras)), 1)


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


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def _greedy(model, drafters, ids, max_new_tokens):
    """One greedy run of ``drafters`` (fixed drafter 0) outside the benchmark."""
    dec = HedgeSpecDecoder(model, drafters, draft_length=CFG.draft_length, policy="fixed:0")
    out = dec.generate(ids, max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
    return out.sequences[0, ids.shape[1]:].tolist(), out.stats["accepted"]


def test_mat_is_new_tokens_per_target_call_from_the_round_lists(run):
    """Every decoder record: one target call per round, 0..K drafts accepted per round, each
    round adds its accepted drafts + 1 token (the last one cut by the length limit); the target
    alone makes one call per token. The mixed-stream MAT of every decoded method equals
    sum(tokens) / sum(rounds) of its records, so at most K + 1."""
    _, _, _, _, out, summary = run
    K = CFG.draft_length
    rows = _records(out)
    decoded = [r for r in rows if "accepted" in r]
    assert decoded
    for r in rows:
        assert r["new_tokens"] == len(r["tokens"]) <= CFG.max_new_tokens, r["method"]
    for r in decoded:
        acc = r["accepted"]
        assert r["target_calls"] == len(acc) == len(r["chosen"]), r["method"]
        assert all(0 <= a <= K for a in acc)
        assert sum(a + 1 for a in acc[:-1]) < r["new_tokens"] <= sum(a + 1 for a in acc)
    for temp, table in summary["main"].items():
        assert table["target"]["mixed"]["mat"] == 1.0
        for m, v in table.items():
            mine = [r for r in decoded if r["section"] == "main" and r["method"] == m
                    and str(r["temperature"]) == temp]
            if not mine:
                continue  # derived from the fixed runs (generalist, specialist, oracle, ...)
            want = sum(len(r["tokens"]) for r in mine) / sum(len(r["accepted"]) for r in mine)
            assert v["mixed"]["mat"] == pytest.approx(want, rel=1e-12), (temp, m)
            assert v["mixed"]["mat"] <= K + 1


def test_mat_is_k_plus_one_for_a_target_copy_and_one_for_a_never_accepted_drafter(run):
    """Greedy, 2 (K+1) tokens: a copy of the target gets every draft accepted (MAT = K + 1
    exactly); an n-gram drafter that only ever drafts a token the target never emits gets none
    accepted (MAT = 1 exactly)."""
    model, tok, _, domains, _, _ = run
    K = CFG.draft_length
    ids = chat_ids(tok, domains["code"].prompts[0]).view(1, -1)
    tokens, accepted = _greedy(model, [HFDrafter(model)], ids, 2 * (K + 1))
    assert accepted == [K, K] and len(tokens) / len(accepted) == K + 1
    V = model.config.vocab_size
    never = min(set(range(7, V)) - set(tokens))  # a word token, not a special one
    stuck = NGramDrafter.from_corpus([[never] * 20], V, order=1)
    again, accepted = _greedy(model, [stuck], ids, 2 * (K + 1))
    assert again == tokens and accepted == [0] * len(tokens)
    assert len(again) / len(accepted) == 1.0


def test_step_timings_add_up_to_at_most_the_total(run):
    """Every decoder record times each of its six steps (each ran once per round) and their
    sum never exceeds the run's total."""
    _, _, _, _, out, _ = run
    for r in _records(out):
        if "timing" not in r:
            assert r["method"] in ("target", "hf-prompt-lookup", "target-rows-first")
            continue
        t = r["timing"]
        assert set(t) == {"prefill", "select", "draft", "verify", "eval", "update"}
        assert all(v > 0 for v in t.values()), t
        assert sum(t.values()) <= r["seconds"], (r["method"], t, r["seconds"])


def test_every_main_record_times_each_new_token(run):
    """Each new token's arrival is timed: as many times as tokens, non-decreasing, within the
    run's seconds; a decoder's tokens of one round share a time (at most one time per target
    call); and every method of the mixed stream gets a loop-free-prefix speed-up."""
    _, _, _, _, out, summary = run
    for r in _records(out):
        if r["section"] != "main" or r.get("replayed"):
            continue
        times = r["token_seconds"]
        assert len(times) == r["new_tokens"] == len(r["tokens"]), r["method"]
        # a decoder's seconds start inside generate, after its argument checks: the clock
        # started before the call may run a little past them (18 ms seen on a loaded CI
        # machine, so the margin is 0.1 s: what it guards is a clock of another run)
        assert times == sorted(times) and times[0] > 0 and times[-1] <= r["seconds"] + 0.1
        if "timing" in r:
            assert len(set(times)) <= r["target_calls"]
    for t in summary["main"].values():
        for m, v in t.items():
            assert v["mixed"]["prefix_speedup_target"] is not None, m
            assert 0 < v["mixed"]["prefix_share"] <= 1


def test_the_static_cache_baselines_run_every_prompt_with_prompt_lookup(run, tmp_path,
                                                                        monkeypatch):
    """transformers' static cache (compiled: here the identity) and its prompt lookup run on
    every prompt of the stream, greedy and sampled, one cache for all; greedy output equal to
    ``generate``'s."""
    import spec_adapters.app.bench.run as bench_run
    from spec_adapters.app.bench.static_compiled import StaticCompiledTarget

    model, tok, pool, domains, _, _ = run
    monkeypatch.setattr(bench_run, "StaticCompiledTarget", lambda m, n, lookup=None:
                        StaticCompiledTarget(m, n, compiler=lambda f: f, lookup=lookup))
    cfg = BenchConfig(queries_per_domain=2, sampled_queries_per_domain=1, max_new_tokens=12,
                      draft_length=4, policies=(), sampled_policies=(), hf_lookup=True,
                      hf_static_compiled=True, fixed=False, variant_queries_per_domain=0,
                      router_accuracy_prompts=0, pool_sizes=(), overhead=False)
    summary = run_bench(model, tok, pool, domains, cfg, tmp_path, progress=False)
    n = 2 * len(DOMS)
    same = summary["greedy_identical"]
    assert same["hf-static-compiled"] == same["hf-static-compiled-lookup"] == [n, n]
    assert summary["main"]["0.7"]["hf-static-compiled-lookup"]["mixed"]["queries"] == len(DOMS)


def test_oracle_is_the_best_drafter_run_alone_per_query(run):
    """Independent brute force: run every pool drafter fixed, alone, outside the benchmark;
    the per-query oracle's MAT is the best of those MATs (tokens / rounds)."""
    model, tok, pool, domains, out, _ = run
    rows = _records(out)
    for q in mixed_stream(domains, CFG.queries_per_domain, CFG.seed):
        ids = chat_ids(tok, q.prompt).view(1, -1)
        mats = []
        for d in pool.drafters:
            tokens, accepted = _greedy(model, [d], ids, CFG.max_new_tokens)
            mats.append(len(tokens) / len(accepted))
        one = aggregate([r for r in rows if r["qid"] == q.qid and r["section"] == "main"],
                        pool, CFG)
        assert one["main"]["0.0"]["oracle"]["mixed"]["mat"] == pytest.approx(max(mats)), q.qid


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
    pool = SimpleNamespace(names=["x"])
    c = regret_curves(recs, pool, CFG, methods=("normalhedge",))["normalhedge"]
    np.testing.assert_allclose(c, [1.0, 1.0, 1.0, 1.0])
    # a baseline outside the pool (here better on query b) is not what regret is against
    recs.append({"section": "main", "qid": "b", "temperature": 0.0, "method": "fixed:union",
                 "new_tokens": 6, "target_calls": 1})
    c = regret_curves(recs, pool, CFG, methods=("normalhedge",))["normalhedge"]
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
    from spec_adapters.app.bench import measure

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

    from spec_adapters.app.bench.measure import PHASES, TokenClock, run_decoder

    stats = {"new_tokens": 5, "target_calls": 2, "total_seconds": 0.5, "chosen": [1, 0],
             "accepted": [2, 1], "drafted": [4, 2], "lengths": [4, 3],
             "weights": [[0.5, 0.5], [0.123456, 0.876544]],
             **{f"{p}_seconds": i / 10 for i, p in enumerate(PHASES)}}
    seen = {}

    class Fake:
        def generate(self, ids, **kw):
            seen.update(kw)
            return SimpleNamespace(sequences=torch.tensor([[7, 8, 1, 2, 3, 4, 5]]), stats=stats)

    r = run_decoder(Fake(), torch.tensor([[7, 8]]), 5, 0.7, seed=3, eos_token_id=[])
    assert isinstance(seen.pop("streamer"), TokenClock)  # never put to: no token_seconds
    assert seen == {"max_new_tokens": 5, "temperature": 0.7, "seed": 3, "eos_token_id": []}
    assert "token_seconds" not in r
    assert r["tokens"] == [1, 2, 3, 4, 5] and r["seconds"] == 0.5
    assert (r["new_tokens"], r["target_calls"], r["chosen"], r["accepted"]) == (5, 2, [1, 0],
                                                                             [2, 1])
    assert (r["drafted"], r["lengths"]) == ([4, 2], [4, 3])
    assert r["timing"] == {"prefill": 0.0, "select": 0.1, "draft": 0.2, "verify": 0.3,
                           "eval": 0.4, "update": 0.5}
    assert r["final_weights"] == [0.1235, 0.8765]


def _by_hand(rows: list[dict]) -> dict:
    """tok/s, MAT and non-target time per round of ``rows``, pooled (the docstring's rules)."""
    tok = sum(r["new_tokens"] for r in rows)
    out = {"tok_s": tok / sum(r["seconds"] for r in rows),
           "mat": tok / sum(r["target_calls"] for r in rows)}
    if all("timing" in r for r in rows):
        other = sum(r["timing"][s] for r in rows for s in ("select", "draft", "eval", "update"))
        out["ms"] = 1e3 * other / sum(r["target_calls"] for r in rows)
        out["share"] = other / sum(r["timing"]["verify"] for r in rows)
    return out


def test_every_method_runs_on_the_same_prompts_and_aggregates_from_its_records(run):
    """target, HF prompt lookup and every learner (cost-aware HedgeSpec and MetaSD-UCB
    included) run greedy and sampled on the same prompts; per method and scope (mixed, each
    domain) tok/s, MAT, the speed-ups (ratios of tok/s to target's and HF lookup's) and the
    non-target time per round (non-verify step seconds / rounds) and its share of the verify
    time equal those recomputed from the raw records."""
    _, _, _, _, out, summary = run
    rows = [r for r in Records(out / "records.jsonl").rows.values() if r["section"] == "main"]
    for temp in ("0.0", "0.7"):
        mine = [r for r in rows if str(r["temperature"]) == temp]
        qids = {m: sorted(r["qid"] for r in mine if r["method"] == m)
                for m in ("target", "hf-prompt-lookup", *SPEED)}
        assert len(set(map(tuple, qids.values()))) == 1 and qids["target"], (temp, qids)
        table = summary["main"][temp]
        for m in qids:
            for scope in ("mixed", *DOMS):
                rs = [r for r in mine if r["method"] == m and scope in ("mixed", r["domain"])]
                want, ref = _by_hand(rs), {k: _by_hand([r for r in mine if r["method"] == k
                                                        and scope in ("mixed", r["domain"])])
                                           for k in ("target", "hf-prompt-lookup")}
                got = table[m][scope]
                assert got["tok_s"] == pytest.approx(want["tok_s"], rel=1e-12)
                assert got["mat"] == pytest.approx(want["mat"], rel=1e-12)
                assert got["speedup_target"] == pytest.approx(
                    want["tok_s"] / ref["target"]["tok_s"], rel=1e-12)
                assert got["speedup_hf_lookup"] == pytest.approx(
                    want["tok_s"] / ref["hf-prompt-lookup"]["tok_s"], rel=1e-12)
                if m in ("target", "hf-prompt-lookup"):
                    assert got["non_target_ms_per_round"] is None
                    assert got["non_target_per_verify"] is None
                else:
                    assert got["non_target_ms_per_round"] == pytest.approx(want["ms"],
                                                                           rel=1e-12)
                    assert got["non_target_per_verify"] == pytest.approx(want["share"],
                                                                         rel=1e-12)
    md = (out / "tables.md").read_text()
    for label in ("HedgeSpec cost-aware", "MetaSD-UCB", "HF prompt lookup"):
        assert md.count(f"| {label}") >= 2 * (1 + len(DOMS)), label


def test_speed_table_numbers_by_hand():
    """Two domains; target 10 + 20 tokens in 2 s + 2 s; HF lookup 30 tokens in 2 s + 1 s;
    MetaSD-UCB 10 tokens in 4 rounds / 1 s and 20 tokens in 6 rounds / 1 s with non-verify
    steps of 0.1 + 0.1 + 0 + 0.04 s and 0.2 + 0.1 + 0.05 + 0.05 s, verify 0.5 s and 0.4 s.
    The target's output loops on a/0 (3 of 10 tokens in repeated 5-grams), not on b/0."""
    def rec(qid, dom, method, tok, calls, sec, timing=None):
        r = {"section": "main", "qid": qid, "domain": dom, "temperature": 0.0,
             "method": method, "n": 0, "new_tokens": tok, "target_calls": calls,
             "seconds": sec}
        if method == "target":
            r["tokens"] = [1, 2, 3] * 3 + [1] if qid == "a/0" else list(range(tok))
        return r | ({"timing": timing} if timing else {})

    t1 = {"prefill": 1.0, "select": 0.1, "draft": 0.1, "verify": 0.5, "eval": 0.0,
          "update": 0.04}
    t2 = {"prefill": 1.0, "select": 0.2, "draft": 0.1, "verify": 0.4, "eval": 0.05,
          "update": 0.05}
    recs = [rec("a/0", "a", "target", 10, 10, 2.0), rec("b/0", "b", "target", 20, 20, 2.0),
            rec("a/0", "a", "hf-prompt-lookup", 10, 5, 2.0),
            rec("b/0", "b", "hf-prompt-lookup", 20, 8, 1.0),
            rec("a/0", "a", "metasd-ucb", 10, 4, 1.0, t1),
            rec("b/0", "b", "metasd-ucb", 20, 6, 1.0, t2)]
    t = aggregate(recs, SimpleNamespace(names=[]), CFG)["main"]["0.0"]
    m = t["metasd-ucb"]
    assert m["mixed"]["tok_s"] == pytest.approx(15.0)  # 30 tokens / 2 s
    assert m["mixed"]["speedup_target"] == pytest.approx(15.0 / 7.5)
    assert m["mixed"]["speedup_hf_lookup"] == pytest.approx(15.0 / 10.0)
    assert m["a"]["speedup_target"] == pytest.approx(10.0 / 5.0)
    assert m["b"]["speedup_hf_lookup"] == pytest.approx(20.0 / 20.0)
    assert m["mixed"]["mat"] == pytest.approx(3.0)
    assert m["mixed"]["non_target_ms_per_round"] == pytest.approx(1e3 * 0.64 / 10)
    assert m["mixed"]["non_target_per_verify"] == pytest.approx(0.64 / 0.9)
    assert m["a"]["non_target_ms_per_round"] == pytest.approx(1e3 * 0.24 / 4)
    assert t["target"]["mixed"]["speedup_target"] == 1.0
    assert t["target"]["mixed"]["non_target_ms_per_round"] is None
    assert m["looping"]["queries"] == m["not looping"]["queries"] == 1
    assert m["looping"]["speedup_hf_lookup"] == pytest.approx(10.0 / 5.0)  # a/0's
    assert m["not looping"]["speedup_hf_lookup"] == pytest.approx(20.0 / 20.0)  # b/0's
    assert t["target"]["mixed"]["repeated_share"] == pytest.approx(0.3 / 2)
    assert t["target"]["mixed"]["cap_share"] == 1.0 and m["mixed"]["repeated_share"] is None
    md = "\n".join(speed_tables({"main": {"0.0": t}}))
    assert "| MetaSD-UCB | 15.0 | 2.00 | 1.50 | 3.00 | 64.0 | 0.71 | – | 100% | – |" in md
    assert "| target alone | 7.5 | 1.00 | 0.75 | 1.00 | – | – | 15% | 100% | – |" in md
    assert "### Speed, temperature 0.0, b prompts (1)" in md
    assert "### Speed, temperature 0.0, looping prompts (1)" in md
    assert md.index("looping prompts") < md.index("a prompts")


def _methods_of(cfg: BenchConfig, names=("ngram-general", "ngram-code")) -> dict:
    """temperature -> {qid: methods} of the main section planned for ``cfg``, 7 domains."""
    doms = {d: SimpleNamespace(prompts=[f"{d} prompt {i}" for i in range(8)])
            for d in ("biology", "chemistry", "code", "math", "medicine", "news", "sql")}
    plan = _plan(cfg, SimpleNamespace(names=list(names), drafters=[], extras=[], baselines=[]),
                 mixed_stream(doms, cfg.queries_per_domain, cfg.seed))
    out: dict = {}
    for section, q, temp, m, _ in plan:
        if section == "main":
            out.setdefault(temp, {}).setdefault(q.qid, set()).add(m)
    return out


def test_speed_preset_runs_every_learner_greedy_and_fixed_drafters_only_on_request():
    speed = PRESETS["speed"]
    assert (speed.queries_per_domain, speed.max_new_tokens, speed.draft_length) == (2, 128, 4)
    want = {"target", "hf-prompt-lookup", "normalhedge-cost", "normalhedge", "exp3spec",
            "ucbspec", "metasd-ucb"}
    plan = _methods_of(speed)
    assert set(plan) == {0.0} and len(plan[0.0]) == 14
    assert all(ms == want for ms in plan[0.0].values())
    with_fixed = _methods_of(with_overrides(speed, fixed=True))[0.0]
    assert all(ms == want | {"fixed:ngram-general", "fixed:ngram-code"}
               for ms in with_fixed.values())


def test_full_preset_compares_every_method_greedy_and_sampled_on_the_same_prompts():
    full = PRESETS["full"]
    assert full.queries_per_domain >= 5 and full.max_new_tokens == 256
    plan = _methods_of(full)
    assert set(plan) == {0.0, 0.7} and plan[0.0] == plan[0.7] and len(plan[0.0]) == 35
    want = {"target", "hf-prompt-lookup", "fixed:ngram-general", "fixed:ngram-code",
            *POLICIES}
    assert all(ms == want for ms in plan[0.0].values())


def test_cost_aware_method_builds_the_cost_aware_decoder(run):
    model, _, pool, _, _, _ = run
    dec = _decoder(model, pool.drafters, 3, "normalhedge-cost")
    assert dec.cost_aware and dec.policy_name == "normalhedge"
    assert dec.policy.n == len(pool.drafters) * 4  # (drafter, k), k = 0..3
    plain = _decoder(model, pool.drafters, 3, "normalhedge")
    assert not plain.cost_aware and plain.policy.n == len(pool.drafters)
    assert _decoder(model, pool.drafters, 3, "metasd-ucb").block_gamma


def test_seeded_sampled_runs_equal_the_targets_sample(run, tmp_path):
    """``seeded``: the sampled HedgeSpec runs draw as ``model.generate`` did with the prompt's
    seed, so their tokens are the target's, counted and printed as the greedy equality is."""
    model, tok, pool, domains, _, _ = run
    cfg = BenchConfig(queries_per_domain=1, sampled_queries_per_domain=1, max_new_tokens=12,
                      draft_length=3, policies=(), temperature=0.9,
                      sampled_policies=("normalhedge-cost", "normalhedge", "exp3spec"),
                      hf_lookup=False, fixed=False, variant_queries_per_domain=0,
                      router_accuracy_prompts=0, pool_sizes=(), overhead=False, seeded=True)
    summary = run_bench(model, tok, pool, domains, cfg, tmp_path, progress=False)
    same = summary["sampled_identical"]
    assert set(same) == {"normalhedge-cost", "normalhedge", "exp3spec"}
    assert all(a == n == len(DOMS) for a, n in same.values()), same
    assert "Sampled output (seeded, the same draws) identical" in markdown_tables(summary)
    assert "sampled_identical" not in run[5]  # the module's run: unseeded


def test_a_top_p_stream_samples_every_method_with_it(run, tmp_path):
    """``top_p``: the target (``generate``), our step alone and HedgeSpec, with and without the
    consensus, all sample the nucleus: seeded, every one of them draws the target's tokens."""
    model, tok, pool, domains, _, _ = run
    cfg = BenchConfig(queries_per_domain=1, sampled_queries_per_domain=1, max_new_tokens=12,
                      draft_length=3, policies=(), temperature=0.9, top_p=0.6,
                      sampled_policies=("normalhedge-cost", "normalhedge-cost-consensus"),
                      hf_lookup=False, rows_first_target=True, fixed=False,
                      variant_queries_per_domain=0, router_accuracy_prompts=0, pool_sizes=(),
                      overhead=False, seeded=True)
    summary = run_bench(model, tok, pool, domains, cfg, tmp_path, progress=False)
    assert all(a == n == len(DOMS) for a, n in summary["sampled_identical"].values())
    rows = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    hot = {(r["qid"], r["method"]): r["tokens"] for r in rows if r["temperature"] > 0}
    assert all(hot[(q, "target-rows-first")] == hot[(q, "target")] for q, _ in hot)
    free = run_bench(model, tok, pool, domains, replace(cfg, top_p=1.0), tmp_path / "free",
                     progress=False)
    assert free["sampled_identical"]  # the control: the nucleus changes what is drawn
    loose = [json.loads(line) for line in (tmp_path / "free" / "records.jsonl").read_text()
             .splitlines()]
    assert any(r["tokens"] != hot[(r["qid"], r["method"])] for r in loose
               if r["temperature"] > 0)
    assert "### Speed, temperature 0.9, top-p 0.6, mixed stream" in markdown_tables(summary)
    with pytest.raises(ValueError, match="top_p"):
        replace(cfg, top_p=0.0)
