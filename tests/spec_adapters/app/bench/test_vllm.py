"""hedgespec bench-vllm without vLLM: the aggregation on fake records (checked against sums
written out by hand), the tables and plot, the closed loop of the engine runner against a fake
engine, the methods' settings, and the record store's resumability."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from spec_adapters.app.bench.plots import plot_speedup_vs_repetition
from spec_adapters.app.bench.vllm import (
    PRESETS,
    VllmBenchConfig,
    _check_suffix,
    drafter_names,
    method_specs,
    shared_settings,
)
from spec_adapters.app.bench.vllm_summary import (
    ENGINE_VARIANTS,
    VllmRecords,
    markdown,
    plot_vllm,
    repetition_panel,
    summarize_vllm,
)
from spec_adapters.app.bench.vllm_worker import counter_totals, run_requests


def _req(qid, domain, tokens, seconds, accepted=0):
    return {"qid": qid, "domain": domain, "tokens": tokens, "new_tokens": len(tokens),
            "seconds": seconds, "accepted": accepted}


def _records():
    """Two prompts (code, math) of 8 tokens at concurrency 1 and 4."""
    a, b = list(range(8)), list(range(10, 18))
    recs = []
    for c, wall in ((1, 4.0), (4, 2.0)):
        recs += [
            {"method": "plain", "concurrency": c, "seconds": wall,
             "requests": [_req("code/0", "code", a, wall / 2),
                          _req("math/0", "math", b, wall / 2)]},
            {"method": "ngram", "concurrency": c, "seconds": wall / 2,
             "requests": [_req("code/0", "code", a, wall / 4, 4),
                          _req("math/0", "math", b, wall / 4, 0)]},
            # hedgespec: 6 of math's 8 tokens accepted; code's output differs from plain at c=4
            {"method": "hedgespec", "concurrency": c, "seconds": wall / 4,
             "requests": [_req("code/0", "code", a if c == 1 else [*a[:7], 99], wall / 5, 2),
                          _req("math/0", "math", b, wall / 20, 6)]},
        ]
    return recs


def test_the_loop_free_prefix_speed_up_uses_each_requests_token_times():
    """Plain's looping output (prefix 7 of 12 tokens) takes 0.1 s a token; HedgeSpec's the
    same tokens four at a time, 0.1 s a round: prefix 7 / 0.2 s against 7 / 0.7 s."""
    loop = [1, 2, 3] * 4
    recs = [{"method": m, "concurrency": 1, "seconds": 1.2,
             "requests": [{**_req("code/0", "code", loop, 1.2),
                           "token_seconds": times}]}
            for m, times in (("plain", [0.1 * (i + 1) for i in range(12)]),
                             ("hedgespec", [0.1 * (i // 4 + 1) for i in range(12)]))]
    s = summarize_vllm(recs)
    h = s["methods"]["hedgespec"]["1"]
    assert h["prefix_tok_s"] == pytest.approx(7 / 0.2) and h["prefix_share"] == 7 / 12
    assert h["prefix_x_plain"] == pytest.approx(0.7 / 0.2)
    assert "| 3.50 (58%) |" in markdown(s)
    assert summarize_vllm(_records())["methods"]["hedgespec"]["1"]["prefix_x_plain"] is None


def test_aggregate_pools_tokens_steps_and_time_as_written_out_by_hand():
    s = summarize_vllm(_records())
    assert s["concurrencies"] == [1, 4]
    assert s["domains"] == ["code", "math"]
    h = s["methods"]["hedgespec"]["1"]
    # 16 tokens in 1 s of wall time; steps = 16 - (2 + 6) accepted
    assert h["tok_s"] == pytest.approx(16 / 1.0)
    assert h["mat"] == pytest.approx(16 / 8)
    assert h["s_per_request"] == pytest.approx((0.8 + 0.2) / 2)
    assert (h["accepted"], h["steps"]) == (8, 8)
    # against plain (16 tokens / 4 s) and ngram (16 / 2 s) at the same concurrency
    assert h["x_plain"] == pytest.approx(4.0)
    assert h["x_ngram"] == pytest.approx(2.0)
    # per domain: tokens over that domain's time in flight; plain spends 2 s on each
    assert h["domains"]["code"]["tok_s"] == pytest.approx(8 / 0.8)
    assert h["domains"]["code"]["x_plain"] == pytest.approx((8 / 0.8) / (8 / 2.0))
    assert h["domains"]["math"]["mat"] == pytest.approx(8 / 2)
    assert s["methods"]["plain"]["1"]["mat"] == pytest.approx(1.0)
    assert s["methods"]["ngram"]["4"]["mat"] == pytest.approx(16 / 12)


def test_outputs_are_compared_with_plain_at_the_same_concurrency():
    s = summarize_vllm(_records())
    assert s["methods"]["hedgespec"]["1"]["identical"] is True
    assert s["methods"]["hedgespec"]["4"]["identical"] is False
    assert s["methods"]["hedgespec"]["4"]["mismatched"] == ["code/0"]
    assert s["methods"]["ngram"]["4"]["identical"] is True
    no_plain = summarize_vllm([r for r in _records() if r["method"] != "plain"])
    assert no_plain["methods"]["ngram"]["1"]["identical"] is None
    assert no_plain["methods"]["ngram"]["1"]["x_plain"] is None


def test_seeded_sampling_is_a_setting_of_its_own_folder_and_compared_with_plain():
    """--seeded: outputs compared with plain's as greedy ones are; the folder's settings say
    so, and a folder written without the option keeps its settings (it still resumes)."""
    assert "seeded" not in shared_settings(VllmBenchConfig(temperature=0.7))
    assert shared_settings(VllmBenchConfig(temperature=0.7, seeded=True))["seeded"] is True
    s = summarize_vllm(_records(), exact=True)
    assert s["methods"]["hedgespec"]["4"]["identical"] is False


def test_targets_are_the_issue_goals_that_the_records_answer():
    t = {x["name"]: x for x in summarize_vllm(_records())["targets"]}
    # no 16-concurrent record: that goal is left out, the others computed at c = 1; over the
    # sweep (c = 1, 4) the worst ratios, and no proposer telemetry: no overhead goal
    assert set(t) == {"one at a time, x vLLM ngram", "one at a time, x vLLM plain",
                      "one at a time, worst domain x vLLM plain",
                      "every concurrency, worst x vLLM plain",
                      "every concurrency, worst x vLLM ngram"}
    assert t["every concurrency, worst x vLLM plain"]["value"] == pytest.approx(4.0)
    assert t["every concurrency, worst x vLLM ngram"]["value"] == pytest.approx(2.0)
    assert t["one at a time, x vLLM plain"]["value"] == pytest.approx(4.0)
    worst = min((8 / 0.8) / (8 / 2.0), (8 / 0.2) / (8 / 2.0))
    assert t["one at a time, worst domain x vLLM plain"]["value"] == pytest.approx(worst)
    assert all(x["met"] for x in t.values())
    slow = [dict(r, seconds=r["seconds"] * 10) if r["method"] == "hedgespec" else r
            for r in _records()]
    assert not next(x for x in summarize_vllm(slow)["targets"]
                    if x["name"] == "one at a time, x vLLM plain")["met"]


def _with_telemetry(records: list[dict]) -> list[dict]:
    """The records, hedgespec's at c = 4 with vLLM's counters and the proposer's telemetry,
    plus a phase of requests arriving at 0.5/s."""
    out = []
    for r in records:
        if r["method"] == "hedgespec" and r["concurrency"] == 4:
            r = {**r, "counters": {"vllm:generation_tokens": 16,
                                   "vllm:spec_decode_num_accepted_tokens": 6,
                                   "vllm:spec_decode_num_drafts": 4},
                 "proposer": {"steps": 8, "steps_drafted": 2, "propose_s": 0.02, "step_s": 0.5,
                              "drafters": {"suffix": {"chosen": 4}},
                              "step_model": {"step_s": 0.05, "row_s": 0.004, "draft_s": 0.003,
                                             "spec_s": 0.002}}}
        out.append(r)
    return out + [{**r, "rate": 0.5, "seconds": r["seconds"] * 2} for r in records
                  if r["concurrency"] == 4]


def test_drafting_shares_overhead_and_arrival_phases_from_the_records():
    s = summarize_vllm(_with_telemetry(_records()))
    assert s["phases"] == ["1", "4", "0.5/s"] and s["concurrencies"] == [1, 4]
    h = s["methods"]["hedgespec"]["4"]
    assert h["drafted_share"] == pytest.approx(4 / (16 - 6))  # drafts / request-steps
    assert h["steps_drafted_share"] == pytest.approx(2 / 8)
    assert h["overhead"] == pytest.approx(0.02 / 0.5)
    assert h["drafters"] == {"suffix": {"chosen": 4}}
    assert s["methods"]["hedgespec"]["1"]["overhead"] is None  # no telemetry
    assert s["methods"]["hedgespec"]["0.5/s"]["x_plain"] == pytest.approx(4.0)  # same phase
    over = next(t for t in s["targets"] if t["name"].startswith("proposer's share"))
    assert over["value"] == pytest.approx(0.04) and not over["met"]  # a ceiling of 3%
    assert s["methods"]["plain"]["1"]["cap_share"] is None  # no cap given
    assert summarize_vllm(_records(), cap=8)["methods"]["plain"]["1"]["cap_share"] == 1.0
    assert summarize_vllm(_records(), cap=9)["methods"]["plain"]["1"]["cap_share"] == 0.0
    md = markdown(s)
    assert "### vLLM, requests arriving at 0.5/s (Poisson)" in md and "| 4.0% |" in md
    assert ("step model (fitted as it ran): a step 50.00 ms, a row 4.00 ms, a drafted token "
            "3.00 ms, speculating at all 2.00 ms") in md
    sampled = summarize_vllm(_records(), exact=False)
    assert sampled["methods"]["hedgespec"]["4"]["identical"] is None  # not compared


def test_the_speed_up_is_split_by_whether_plains_output_loops():
    """math's output repeats itself (3 of 8 tokens in repeated 5-grams), code's does not."""
    recs = _records()
    for r in recs:
        for q in r["requests"]:
            if q["qid"] == "math/0":
                q["tokens"] = [7] * 8
    s = summarize_vllm(recs)
    h = s["methods"]["hedgespec"]["1"]
    assert h["loops"]["not looping"]["x_plain"] == pytest.approx((8 / 0.8) / (8 / 2.0))
    assert h["loops"]["looping"]["x_plain"] == pytest.approx((8 / 0.2) / (8 / 2.0))
    assert h["repeated_share"] == pytest.approx(3 / 8 / 2)
    assert "| 2.50 (1) / 10.00 (1) |" in markdown(s)
    assert "loops" not in summarize_vllm([r for r in recs if r["method"] != "plain"])[
        "methods"]["hedgespec"]["1"]


def test_arrivals_are_poisson_and_requests_wait_for_theirs():
    from spec_adapters.app.bench.vllm_worker import arrival_times

    assert arrival_times(5, None, 0) is None
    times = arrival_times(4000, 2.0, 0)
    assert times[0] == 0.0 and np.all(np.diff(times) > 0)
    assert np.mean(np.diff(times)) == pytest.approx(0.5, rel=0.05)
    assert times == arrival_times(4000, 2.0, 0) != arrival_times(4000, 2.0, 1)
    with pytest.raises(ValueError, match="arrival rate must be > 0"):
        arrival_times(3, 0.0, 0)
    prompts = [{"qid": f"d/{i}", "domain": "d", "ids": [i]} for i in range(4)]
    now = [0.0]
    added = []

    class Clocked(FakeEngine):
        def add_request(self, rid, prompt, params):
            added.append((rid, now[0]))
            super().add_request(rid, prompt, params)

        def step(self):
            now[0] += 1.0
            return super().step()

    arrivals = [0.0, 0.5, 10.0, 10.5]
    reqs, _ = run_requests(Clocked(), prompts, lambda i: None, 8, "r", arrivals,
                           clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert len(reqs) == 4
    for (_rid, t), due in zip(added, arrivals, strict=True):
        assert due <= t < due + 1.0 + 1e-9  # added at its arrival, never before


def test_markdown_and_plot_show_every_method_and_concurrency(tmp_path):
    s = summarize_vllm(_records())
    md = markdown(s)
    assert "### vLLM, one request at a time" in md and "### vLLM, 4 concurrent requests" in md
    row = next(line for line in md.splitlines()
               if line.startswith("| HedgeSpec proposer") and "no (1)" in line)
    assert "| 2.00 |" in row  # MAT
    assert md.count("| vLLM plain | ") == 4  # speed + per-domain table, two concurrencies
    png = plot_vllm(s, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class FakeEngine:
    """An engine that finishes a request ``len(ids) % 3 + 1`` steps after it is added (its
    output, the prompt reversed, grows by one token a step before the last, which returns the
    rest), and records at each step how many requests were in flight and how many had
    finished before."""

    def __init__(self):
        self.live, self.in_flight, self.finished_before, self.finished = {}, [], [], 0

    def add_request(self, rid, prompt, params):
        self.live[rid] = [len(prompt["prompt_token_ids"]) % 3 + 1, prompt["prompt_token_ids"], 0]

    def step(self):
        self.in_flight.append(len(self.live))
        self.finished_before.append(self.finished)
        out = []
        for rid in list(self.live):
            self.live[rid][0] -= 1
            self.live[rid][2] += 1
            if self.live[rid][0] > 0:
                seq = SimpleNamespace(token_ids=self.live[rid][1][::-1][:self.live[rid][2]])
                out.append(SimpleNamespace(request_id=rid, finished=False, outputs=[seq]))
            else:
                ids = self.live.pop(rid)[1]
                self.finished += 1
                seq = SimpleNamespace(token_ids=ids[::-1])
                out.append(SimpleNamespace(request_id=rid, finished=True, outputs=[seq]))
        return out


def test_run_requests_keeps_c_requests_in_flight_and_returns_them_in_prompt_order():
    prompts = [{"qid": f"d/{i}", "domain": "d", "ids": list(range(i + 1))} for i in range(7)]
    engine = FakeEngine()
    ticks = iter(range(1000))
    reqs, seconds = run_requests(engine, prompts, lambda i: None, 3, "c3",
                                clock=lambda: float(next(ticks)))
    assert [r["qid"] for r in reqs] == [p["qid"] for p in prompts]
    assert [r["tokens"] for r in reqs] == [p["ids"][::-1] for p in prompts]
    for r, p in zip(reqs, prompts, strict=True):  # one token a step, the rest at the last
        steps = len(p["ids"]) % 3 + 1
        times = r["token_seconds"]
        assert len(times) == len(r["tokens"]) and times == sorted(times) and times[0] > 0
        assert len(set(times)) == min(steps, len(r["tokens"]))
    # a step that returns n tokens accepted n - 1 drafts
    assert all(r["steps"] == min(len(p["ids"]) % 3 + 1, len(p["ids"]))
               and r["accepted"] == len(p["ids"]) - r["steps"] for r, p in zip(reqs, prompts,
                                                                              strict=True))
    # a slot is refilled as soon as it frees: min(c, requests not yet finished) in flight
    assert engine.in_flight == [min(3, 7 - f) for f in engine.finished_before]
    assert not engine.live and len(engine.in_flight) > 7 / 3
    assert seconds > max(r["seconds"] for r in reqs)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        run_requests(engine, prompts, lambda i: None, 0, "c0")


def test_counter_totals_sum_labels_and_ignore_other_metrics():
    m = [SimpleNamespace(name="vllm:generation_tokens", value=5),
         SimpleNamespace(name="vllm:generation_tokens", value=7),
         SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=3),
         SimpleNamespace(name="vllm:num_requests_running", value=99)]
    t = counter_totals(m)
    assert t["vllm:generation_tokens"] == 12
    assert t["vllm:spec_decode_num_accepted_tokens"] == 3
    assert t["vllm:spec_decode_num_drafts"] == 0


@pytest.fixture
def pool(tmp_path):
    """A complete pool of train-drafters' default settings over 64 tokens; math's specialist
    alone knows the cycle 10, 11, 12, 13."""
    from spec_adapters.store.pool_settings import NGramPoolSettings
    from tests.vllm.pool_files import write_pool

    docs = {d: [[1, 2, 3, 4, 5]] for d in NGramPoolSettings().domains}
    docs["math"] = [[10, 11, 12, 13] * 6]
    write_pool(tmp_path / "pool", 64, docs)
    return tmp_path / "pool"


def test_a_fixed_method_drafts_with_the_drafter_it_names(pool, tmp_path):
    from spec_adapters.vllm.config import ProposerConfig
    from spec_adapters.vllm.proposer import HedgeSpecProposer

    names = drafter_names(pool, 64)
    assert names[:4] == [f"prompt-lookup-{n}" for n in (1, 2, 3, 4)]
    assert names[-2:] == ["ngram-general", "consensus"] and "ngram-math" in names
    spec, settings = method_specs("fixed:ngram-math", names, pool, tmp_path, 4, 0)
    assert spec == {"method": "custom_class", "model": "spec_adapters.vllm.HedgeSpecProposer",
                    "num_speculative_tokens": 4}
    prop = HedgeSpecProposer.standalone(ProposerConfig(**settings), vocab_size=64, max_k=4,
                                        max_model_len=256)
    buf = np.array([[7, 8, 9, 10, 11]])  # no earlier occurrence: prompt lookup has nothing
    assert prop.propose([[11]], np.array([5]), buf) == [[12, 13, 10, 11]]
    with pytest.raises(ValueError, match="no n-gram pool"):
        drafter_names(pool, 65)


def test_method_specs_of_vllms_methods_and_the_learners(tmp_path):
    names = ["prompt-lookup-1", "ngram-general"]
    assert method_specs("plain", names, tmp_path, tmp_path, 4, 0) == (None, None)
    assert method_specs("ngram", names, tmp_path, tmp_path, 3, 0)[0] == {
        "method": "ngram", "num_speculative_tokens": 3}
    _, hs = method_specs("hedgespec", names, tmp_path, tmp_path, 4, 0)
    assert (hs["policy"], hs["cost_aware"]) == ("normalhedge", True)
    _, ex = method_specs("exp3spec", names, tmp_path, tmp_path, 4, 0)
    assert (ex["policy"], ex["cost_aware"]) == ("exp3spec", False)
    with pytest.raises(ValueError, match="unknown method 'fixed:nope'"):
        method_specs("fixed:nope", names, tmp_path, tmp_path, 4, 0)
    # vLLM's suffix method as its users run it: its own adaptive depth, no K
    assert method_specs("suffix", names, tmp_path, tmp_path, 4, 0) == ({"method": "suffix"}, None)
    assert method_specs("suffix-k", names, tmp_path, tmp_path, 3, 0) == (
        {"method": "suffix", "num_speculative_tokens": 3}, None)
    # the diagnostic: vLLM plain, only its engine arguments differ (no speculation)
    assert method_specs("plain-sync", names, tmp_path, tmp_path, 4, 0) == (None, None)
    assert ENGINE_VARIANTS["plain-sync"] == {"async_scheduling": False}
    assert VllmBenchConfig(methods=("plain", "plain-sync")).methods == ("plain", "plain-sync")


def test_the_repetition_panel_pairs_each_prompts_speed_up_with_its_plain_repetition(tmp_path):
    recs = _records()
    recs[0]["requests"][1] = _req("math/0", "math", [1, 2, 3, 4, 5, 1, 2, 3, 4, 5], 2.0)
    title, repeated, speedups = repetition_panel(recs, "1", k=4)
    assert title == "one request at a time"
    assert repeated == [0.0, 0.1]  # code/0, then math/0: its last 5-gram seen before, 1 of 10
    # per prompt: (tokens / s in flight) over plain's; plain spends 2 s on each
    assert speedups["HedgeSpec proposer (NormalHedge, cost-aware)"] == pytest.approx(
        [(8 / 0.8) / (8 / 2.0), (8 / 0.2) / (10 / 2.0)])
    assert speedups["vLLM ngram (K = 4)"] == pytest.approx([2.0, (8 / 1.0) / (10 / 2.0)])
    assert set(speedups) == {"HedgeSpec proposer (NormalHedge, cost-aware)",
                             "vLLM ngram (K = 4)"}  # not plain itself, not another phase
    png = plot_speedup_vs_repetition([repetition_panel(recs, "4")], tmp_path / "r.png", 0.2)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no plain record in phase '16'"):
        repetition_panel(recs, "16")


def test_the_headline_preset_is_every_peer_one_at_a_time_at_128_tokens():
    from spec_adapters.app.cli.vllm import VLLM_BENCH_PRESETS

    h = PRESETS["headline"]
    assert (h.queries_per_domain, h.max_new_tokens, h.concurrencies, h.temperature) == (
        3, 128, (1,), 0.0)
    assert h.methods == ("plain", "ngram", "suffix", "suffix-k", "hedgespec")
    assert set(VLLM_BENCH_PRESETS) == set(PRESETS)  # the command line offers every preset


def test_the_suffix_method_without_arctic_inference_is_refused_naming_the_make_target():
    with pytest.raises(ValueError, match="make vllm-suffix"):  # this venv has no Arctic Inference
        _check_suffix(Path(sys.executable))


def test_hedgespec_against_vllm_suffix_in_the_same_phase():
    suffix = [dict(r, method="suffix", seconds=r["seconds"] / 2) for r in _records()
              if r["method"] == "ngram"]  # twice as fast as ngram: hedgespec is 1.0x it
    s = summarize_vllm(_records() + suffix)
    assert s["methods"]["hedgespec"]["1"]["x_suffix"] == pytest.approx(1.0)
    assert s["methods"]["suffix"]["4"]["x_ngram"] == pytest.approx(2.0)
    t = next(x for x in s["targets"] if x["name"] == "one at a time, x vLLM suffix")
    assert (t["value"], t["goal"], t["met"]) == (pytest.approx(1.0), 1.0, True)
    assert "vLLM suffix (Arctic Inference, its depth 24)" in markdown(s)
    assert "one at a time, x vLLM suffix" not in {x["name"] for x in
                                                  summarize_vllm(_records())["targets"]}


def test_config_rejects_bad_sizes_and_the_quick_preset_is_the_briefs():
    q = PRESETS["quick"]
    assert (q.queries_per_domain, q.max_new_tokens, q.concurrencies, q.methods) == (
        2, 64, (1, 4), ("plain", "ngram", "hedgespec"))
    assert PRESETS["full"].concurrencies == (1, 4, 16) and PRESETS["full"].methods is None
    with pytest.raises(ValueError, match="concurrencies must be ascending"):
        VllmBenchConfig(concurrencies=(4, 1))
    with pytest.raises(ValueError, match="unknown methods"):
        VllmBenchConfig(methods=("eagle",))
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        VllmBenchConfig(max_new_tokens=0)


def test_records_resume_by_method_concurrency_and_run(tmp_path):
    path = tmp_path / "records.jsonl"
    recs = VllmRecords(path)
    for r in _records()[:3]:
        recs.add(r)
    recs.add({**_records()[0], "run": 1})
    with open(path, "a") as fh:
        fh.write('{"method": "cut')  # a line cut by an interruption
    again = VllmRecords(path)
    assert again.has("plain", "1", 0) and again.has("hedgespec", "1", 0) \
        and not again.has("plain", "4", 0)
    assert again.has("plain", "1", 1) and not again.has("hedgespec", "1", 1)
    assert json.loads(path.read_text().splitlines()[0])["method"] == "plain"


def _two_runs() -> list[dict]:
    """_records at concurrency 1 twice: in run 1 plain is twice as slow, HedgeSpec the same."""
    first = [r for r in _records() if r["concurrency"] == 1]
    second = [{**r, "run": 1, "seconds": 2 * r["seconds"] if r["method"] == "plain"
               else r["seconds"]} for r in first]
    return first + second


def test_repeated_phases_pool_tokens_and_time_and_keep_each_runs_ratio():
    """Plain 16 tokens in 4 s then in 8 s, HedgeSpec in 1 s twice: pooled 32 / 12 against
    32 / 2 tok/s; the runs' own ratios 4 and 8."""
    s = summarize_vllm(_two_runs())
    h, p = s["methods"]["hedgespec"]["1"], s["methods"]["plain"]["1"]
    assert p["tok_s"] == pytest.approx(32 / 12) and p["requests"] == 4
    assert h["tok_s"] == pytest.approx(16.0) and h["x_plain"] == pytest.approx(6.0)
    assert h["x_plain_runs"] == pytest.approx([4.0, 8.0])
    assert h["identical"] is True
    assert "| 6.00 (runs 4.00, 8.00) |" in markdown(s)
    one = summarize_vllm(_two_runs()[:3])  # one run: no per-run column
    assert one["methods"]["hedgespec"]["1"]["x_plain_runs"] == []
    assert "(runs" not in markdown(one)
    changed = _two_runs()
    changed[-1]["requests"] = [{**q, "tokens": [*q["tokens"][:-1], 99]}
                               for q in changed[-1]["requests"]]
    assert summarize_vllm(changed)["methods"]["hedgespec"]["1"]["identical"] is False


def test_repeats_run_every_method_once_per_round_and_resume(tmp_path, monkeypatch, pool):
    """--repeats 2: plain, hedgespec, plain, hedgespec (interleaved); asked again for 3, only
    the third round runs, and the folder's settings still match."""
    from dataclasses import replace

    from transformers import LlamaConfig

    from spec_adapters.app.bench import vllm as bench_vllm

    target = tmp_path / "target"
    LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                num_attention_heads=1).save_pretrained(target)
    tok = type("Tok", (), {"chat_template": None,
                           "__call__": lambda self, text: {"input_ids": [1, 2, 3]}})()
    domains = {"math": SimpleNamespace(prompts=["p"])}
    order = []

    def engine(python, job, proposer, out, threads, run=0):
        order.append((job["method"], run))
        plain = job["method"] == "plain"
        yield {"method": job["method"], "concurrency": 1, "rate": None,
               "seconds": 2.0 if plain else 1.0,
               "requests": [_req("math/0", "math", [5, 6, 7, 8], 1.0, 0 if plain else 2)]}

    monkeypatch.setattr(bench_vllm, "find_vllm_python", lambda: Path("python"))
    monkeypatch.setattr(bench_vllm, "_run_engine", engine)
    cfg = VllmBenchConfig(queries_per_domain=1, max_new_tokens=4, concurrencies=(1,),
                          methods=("plain", "hedgespec"), repeats=2)
    out = tmp_path / "out"
    bench_vllm.run_bench_vllm(target, tok, domains, pool, cfg, out, cache_dir=tmp_path)
    assert order == [("plain", 0), ("hedgespec", 0), ("plain", 1), ("hedgespec", 1)]
    s = bench_vllm.run_bench_vllm(target, tok, domains, pool, replace(cfg, repeats=3), out,
                                  cache_dir=tmp_path)
    assert order[4:] == [("plain", 2), ("hedgespec", 2)]
    assert s["methods"]["hedgespec"]["1"]["x_plain_runs"] == pytest.approx([2.0] * 3)
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        VllmBenchConfig(repeats=0)


def test_an_out_folder_of_other_settings_is_refused(tmp_path):
    from spec_adapters.app.bench.records import check_settings

    check_settings(tmp_path, {"k": 4})
    (tmp_path / "records.jsonl").write_text("")
    check_settings(tmp_path, {"k": 4})  # the same settings: resumed
    with pytest.raises(ValueError, match="holds results of a run with other settings"):
        check_settings(tmp_path, {"k": 3})
    assert json.loads((tmp_path / "settings.json").read_text()) == {"k": 4}
    check_settings(tmp_path / "new" / "run", {"k": 5})  # a fresh folder is created
    assert json.loads((tmp_path / "new" / "run" / "settings.json").read_text()) == {"k": 5}


def test_cli_without_a_pool_is_one_line_naming_it(tmp_path, capsys):
    from spec_adapters.app.cli import main
    from tests.spec_adapters.bench_fixtures import make_target_folder, write_domains

    folder = make_target_folder(tmp_path)
    write_domains(tmp_path / "cache", ["code", "math"])
    rc = main(["bench-vllm", "--target", str(folder), "--cache-dir", str(tmp_path / "cache"),
               "--domains", "code,math", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("hedgespec: error: ") and "no drafter pool" in err[-1]
    assert "hedgespec train-drafters" in err[-1]
    assert not (tmp_path / "out" / "records.jsonl").exists()


@pytest.mark.parametrize(("argv", "problem"), [
    (["--methods", "plain,bogus"], "unknown methods ['bogus']"),
    (["--concurrencies", "4,1"], "concurrencies must be ascending"),
    (["--concurrencies", "0"], "must be an integer >= 1, got 0"),
    (["--arrival-rates", "1,0"], "must be a finite number > 0.0, got 0"),
    (["--temperature", "-1"], "must be a finite number >= 0.0, got -1"),
    (["--proposer-settings", "[1]"], "expected a JSON object"),
    (["--proposer-settings", '{"policy": "hedge"}'], "['policy'] are set by each method"),
    (["--proposer-settings", '{"probe": 2}'], "probe must be a number in [0, 1]"),
])
def test_cli_methods_and_concurrencies_are_checked_before_anything_runs(tmp_path, capsys, argv,
                                                                        problem):
    from spec_adapters.app.cli import main

    try:
        rc = main(["bench-vllm", "--out", str(tmp_path / "out"), *argv])
    except SystemExit as stop:  # argparse: a bad value
        rc = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and problem in err[-1]
    assert not (tmp_path / "out").exists()


def test_cli_k_sets_every_speculating_methods_k_but_suffix_at_its_defaults(tmp_path,
                                                                          monkeypatch):
    import spec_adapters.app.cli.vllm as cli_vllm
    from spec_adapters.app.bench.vllm import method_specs
    from spec_adapters.app.cli import main
    from tests.spec_adapters.bench_fixtures import make_target_folder, write_domains

    seen = []

    def bench(args, target, tok, domains, cfg, out):
        seen.append(cfg)
        raise ValueError("stopped before vLLM")

    monkeypatch.setattr(cli_vllm, "vllm_bench_of", bench)
    folder = make_target_folder(tmp_path)
    write_domains(tmp_path / "cache", ["code", "math"])
    for extra, k in (([], 4), (["--k", "8"], 8)):
        rc = main(["bench-vllm", "--target", str(folder), "--cache-dir", str(tmp_path / "cache"),
                   "--domains", "code,math", "--preset", "headline", *extra])
        assert rc == 2 and seen[-1].k == k
    pool, cache = tmp_path / "pool", tmp_path / "cache"
    assert method_specs("suffix-k", [], pool, cache, 8, 0)[0]["num_speculative_tokens"] == 8
    assert method_specs("hedgespec", [], pool, cache, 8, 0)[1]["k"] == 8
    assert "num_speculative_tokens" not in method_specs("suffix", [], pool, cache, 8, 0)[0]


def test_a_folder_takes_more_methods_and_concurrencies_on_the_same_prompts():
    from dataclasses import replace

    from spec_adapters.app.bench.vllm import PRESETS, shared_settings

    full, targets = PRESETS["full"], PRESETS["targets"]
    assert shared_settings(targets) == shared_settings(full)  # one folder can hold both
    assert shared_settings(replace(full, concurrencies=(1,), methods=("ucbspec",), repeats=3)) \
        == shared_settings(full)
    assert shared_settings(replace(full, queries_per_domain=3)) != shared_settings(full)
    for other in ({"temperature": 0.7}, {"stop_at_eos": False},
                  {"proposer": (("prior_rounds", 0),)}):  # other requests, another proposer
        assert shared_settings(replace(full, **other)) != shared_settings(full)
