"""``hedgespec bench --engine llamacpp``'s run, resume and figures on a tiny Q4_1 GGUF written by
the test (llama.cpp plain, llama-cpp-python plain, HedgeSpec), and its reading of llama.cpp's
``llama-lookup`` log."""

from __future__ import annotations

import json
import stat
from dataclasses import replace

import gguf
import pytest

from spec_adapters.app.bench import llamacpp as bench
from spec_adapters.app.bench.llamacpp import (
    LlamaCppBenchConfig,
    cpp_generate,
    run_llamacpp_bench,
    summarize_cell,
)
from spec_adapters.drafters.point import PromptLookup
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf

# llama.cpp decodes in a child first: a crash fails these tests, not their worker
pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")

PROMPTS = [("a/0", "a", [5, 70, 71, 72, 5, 70, 71]), ("b/0", "b", [100, 101, 102, 103]),
           ("a/1", "a", list(range(40, 60)))]
CFG = LlamaCppBenchConfig(lengths=(12,), temperatures=(0.0, 0.7), threads=1, n_ctx=128,
                          methods=("plain", "lcp-plain", "hedgespec"))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-q4_1.gguf"
    write_tiny_gguf(path, hidden=64, heads=1, kv_heads=1, ff=128, seed=3,
                    qtype=gguf.GGMLQuantizationType.Q4_1)
    return path


def _pool(vocab: int) -> list:
    return [PromptLookup(1), PromptLookup(2)]


def test_a_run_reports_every_cell_resumes_and_refuses_other_settings(model, tmp_path,
                                                                     monkeypatch):
    summary = run_llamacpp_bench(model, PROMPTS, _pool, CFG, tmp_path, progress=False)
    assert set(summary["cells"]) == {"n12-t0.0", "n12-t0.7"}
    greedy = summary["cells"]["n12-t0.0"]["methods"]
    assert set(greedy) == {"plain", "lcp-plain", "hedgespec"}
    assert greedy["hedgespec"]["equal_to_plain"] == 3 and greedy["hedgespec"]["mat"] >= 1
    assert greedy["plain"]["cap_share"] == 1.0 and greedy["plain"]["x_plain"] == 1.0
    assert set(greedy["hedgespec"]["per_domain_x_plain"]) == {"a", "b"}
    assert 0 <= greedy["hedgespec"]["non_target_share"] < 1
    for cell in summary["cells"].values():  # our loops time each token: a prefix speed-up
        assert cell["methods"]["hedgespec"]["x_plain_loop_free_prefix"] > 0
        assert cell["methods"]["plain"]["x_plain_loop_free_prefix"] == pytest.approx(1.0)
        assert 0 < cell["plain_prefix_share"] <= 1
        assert len(cell["row_seconds"]) == CFG.draft_length + 1  # the row price it drafted at
        assert all(s > 0 for s in cell["row_seconds"])
    assert greedy["lcp-plain"]["x_plain_loop_free_prefix"] is None  # not timed per token
    sampled = summary["cells"]["n12-t0.7"]["methods"]
    assert sampled["hedgespec"]["equal_to_plain"] == 3  # the same seed, the same draws
    assert "equal_to_plain" not in sampled["lcp-plain"]  # its own sampler
    assert (tmp_path / "tables.md").read_text().count("| hedgespec |") == 2
    assert (tmp_path / "tables.md").read_text().count("A decode of 1 .. K + 1 rows") == 2
    assert (tmp_path / "speedup_vs_repetition.png").stat().st_size > 0
    # a re-run with the same settings redoes nothing
    monkeypatch.setattr(bench, "_Methods", None)
    again = run_llamacpp_bench(model, PROMPTS, _pool, CFG, tmp_path, progress=False)
    assert json.loads(json.dumps(again)) == json.loads(json.dumps(summary))
    with pytest.raises(ValueError, match="other settings"):
        run_llamacpp_bench(model, PROMPTS, _pool, replace(CFG, draft_length=2), tmp_path)


def test_bad_settings_name_the_problem(model, tmp_path):
    with pytest.raises(ValueError, match=r"unknown llama\.cpp benchmark methods"):
        LlamaCppBenchConfig(methods=("plain", "eagle"))
    with pytest.raises(ValueError, match="needs method 'plain'"):
        LlamaCppBenchConfig(methods=("hedgespec",))
    with pytest.raises(ValueError, match=r"cpp-lookup needs llama\.cpp's llama-lookup"):
        run_llamacpp_bench(model, PROMPTS, _pool, replace(CFG, methods=("plain", "cpp-lookup")),
                           tmp_path, cpp_bin=tmp_path)


def _rec(tokens, seconds=1.0, **extra):
    return {"tokens": tokens, "seconds": seconds, **extra}


def test_equality_places_each_divergence_and_its_cache_cells():
    """Token methods diverge at their first differing token; a text method (llama-lookup, a
    token or two longer) is equal where one text extends the other, else placed at the plain
    token whose text it leaves."""
    plain = [_rec([1, 2, 3, 4]), _rec([5, 6, 7, 8])]
    plain[0]["text"], plain[1]["text"] = "ab cd ef gh", "ij kl mn op"
    plain[0]["pieces"], plain[1]["pieces"] = ["ab", " cd", " ef", " gh"], ["ij", " kl", " mn",
                                                                           " op"]
    rows = [{"qid": "x/0", "domain": "x", "prompt_tokens": 250, "plain": plain[0],
             "mine": _rec([1, 2, 9, 9], 0.5, calls=2),
             "text": {"text": "ab cd ef gh ij", "new_tokens": 5, "seconds": 1.0, "calls": 3,
                      "prompt_tokens": 250}},
            {"qid": "x/1", "domain": "x", "prompt_tokens": 10, "plain": plain[1],
             "mine": _rec([5, 6, 7, 8], 0.5, calls=2),
             "text": {"text": "ij kl zz", "new_tokens": 3, "seconds": 1.0, "calls": 2,
                      "prompt_tokens": 11}}]
    cell = summarize_cell({"n": 4, "temperature": 0.0, "rows": rows}, ("plain", "mine", "text"))
    mine, text = cell["methods"]["mine"], cell["methods"]["text"]
    assert mine["equal_to_plain"] == 1
    assert mine["divergences"] == [{"qid": "x/0", "token": 2, "cache_cells": 252,
                                    "past_split": False}]
    assert mine["x_plain"] == 2.0 and mine["mat"] == 2.0
    assert text["equal_to_plain"] == 1 and text["same_prompt_tokens"] == 1
    assert text["divergences"] == [{"qid": "x/1", "token": 2, "cache_cells": 12,
                                    "past_split": False}]
    rows[0]["mine"] = _rec([4] * 7 + [9], calls=4)  # diverges past 256 cells
    rows[0]["plain"] = _rec([4] * 8)  # three 5-grams seen before
    cell = summarize_cell({"n": 8, "temperature": 0.0, "rows": rows}, ("plain", "mine"))
    assert cell["methods"]["mine"]["divergences"][0] == {
        "qid": "x/0", "token": 7, "cache_cells": 257, "past_split": True}
    assert cell["methods"]["plain"]["repeated_share"] == pytest.approx((3 / 8 + 0) / 2)
    # x/0's plain output loops (3/8 >= 0.2), x/1's does not: the speed-up on each apart
    rows[0]["mine"]["seconds"], rows[1]["mine"]["seconds"] = 0.25, 2.0
    split = summarize_cell({"n": 8, "temperature": 0.0, "rows": rows}, ("plain", "mine"))
    assert split["looping_prompts"] == 1
    assert split["methods"]["mine"]["x_plain_by_repetition"] == {"below": 0.5, "above": 4.0}
    rows.pop(0)
    assert summarize_cell({"n": 8, "temperature": 0.0, "rows": rows}, ("plain", "mine"))[
        "methods"]["mine"]["x_plain_by_repetition"] == {"below": 0.5, "above": None}


LOOKUP_LOG = """0.00.324.087 I cmn          init: llama threadpool init, n_threads = 2
0.01.125.771 I encoded   12 tokens in    0.099 seconds, speed:  645.161 t/s
0.01.125.825 I decoded   52 tokens in    0.667 seconds, speed:   78.007 t/s
0.01.125.911 I n_draft      = 4
0.01.125.956 I n_predict    = 52
0.01.126.001 I n_drafted    = 32
0.01.126.134 I n_accept     = 30
"""
COMPLETION_LOG = """0.14.269.896 I common_perf_print:    sampling time =      99.62 ms
0.14.269.930 I common_perf_print:        load time =     496.06 ms
0.14.269.940 I common_perf_print: prompt eval time =    1354.86 ms /    23 tokens (   58.91 ms \
per token,    16.98 tokens per second)
0.14.269.951 I common_perf_print:        eval time =   11831.13 ms /    63 runs   (  187.80 ms \
per token,     5.32 tokens per second)
"""


def _fake(folder, name: str, stdout: str, log: str) -> None:
    """A stand-in for a llama.cpp program: prints ``stdout``, writes ``log`` to stderr."""
    (folder / f"{name}.log").write_text(log)
    fake = folder / name
    fake.write_text(f"#!/bin/sh\nprintf '{stdout}'\ncat {folder / name}.log >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)


def test_cpp_generate_reads_llama_cpps_programs_output_and_logs(tmp_path):
    """llama-lookup: the text after the echoed prompt (accepted drafts' colour codes removed),
    its counts and seconds; llama-completion: its text, runs + 1 tokens, prompt + decode +
    sampling seconds, the load excluded (the log lines as the build of ``make
    llama-cpp-tools`` writes them); a failure raises with the log."""
    _fake(tmp_path, "llama-lookup", "\\n\\n<p>hi\\033[34m there\\033[0m you\\n\\n", LOOKUP_LOG)
    args = (tmp_path, tmp_path / "m.gguf", "<p>", 52, 0.0, 0.9, 4, 2, 1024, 0)
    assert cpp_generate("cpp-lookup", *args) == {
        "text": "hi there you", "new_tokens": 52, "seconds": pytest.approx(0.766), "calls": 22,
        "prompt_tokens": 12}
    _fake(tmp_path, "llama-completion", "hi there\\n", COMPLETION_LOG)
    assert cpp_generate("cpp-plain", *args) == {
        "text": "hi there", "new_tokens": 64, "calls": 64, "prompt_tokens": 23,
        "seconds": pytest.approx((99.62 + 1354.86 + 11831.13) / 1e3)}
    _fake(tmp_path, "llama-lookup", "", "error: invalid argument: --x\n")
    with pytest.raises(RuntimeError, match=r"llama-lookup failed.*invalid argument"):
        cpp_generate("cpp-lookup", *args)


def test_prompt_lookup_of_llama_cpp_python_runs_past_its_batch_of_512_tokens(model, tmp_path):
    # its Llama sized the score buffer n_batch rows with a draft model: eval past 512 overflowed
    long = [("a/0", "a", [(7 * i) % 200 + 3 for i in range(500)])]
    cfg = replace(CFG, lengths=(30,), temperatures=(0.0,), n_ctx=1024,
                  methods=("plain", "lcp-lookup"))
    summary = run_llamacpp_bench(model, long, _pool, cfg, tmp_path, progress=False)
    assert summary["cells"]["n30-t0.0"]["methods"]["lcp-lookup"]["tok_s"] > 0
