"""benchmarks/mixed_pool.py's grid bookkeeping on synthetic records: a cell's rows, the greedy
check against ``model.generate`` (the eager cell's target), the targets line, and a results
folder that grows cell by cell."""

from __future__ import annotations

from argparse import Namespace

import pytest

from spec_adapters.app.bench.records import Records, SettingsMismatchError, check_settings
from tests.benchmarks.scripts import load_script


def _run(mode, qid, method, tokens, seconds, calls, chosen=(0,)) -> dict:
    # the model-free pool drafts and evaluates for less than the pools with heads
    cheap = method == "HedgeSpec model-free"
    return {"section": mode, "qid": qid, "temperature": 0.0, "method": method, "n": 8,
            "domain": qid.split("-")[0], "repeated": 0.25, "tokens": tokens,
            "new_tokens": len(tokens), "seconds": seconds, "target_calls": calls,
            "chosen": list(chosen), "names": ["head-a", "head-b", "suffix"],
            "timing": {"draft": 0.05 if cheap else 0.1, "eval": 0.05 if cheap else 0.2,
                       "verify": 1.0}}


def test_cells_check_greedy_runs_against_generate_and_print_the_targets(tmp_path, capsys):
    mp = load_script("mixed_pool")
    methods = ["target", *(f"HedgeSpec {n}" for n in mp.POOLS), *mp.FIXED]
    prompts = [("code-0", "code", "p0"), ("news-0", "news", "p1")]
    records = Records(tmp_path / "records.jsonl")
    want = [1, 2, 3, 4]
    for qid, _, _ in prompts:
        records.add(_run("eager", qid, "target", want, 2.0, 4))
        for m in methods[1:]:
            records.add(_run("eager", qid, m, want, 1.0, 2, chosen=(0, 2, 1)))
            # compiled: our compiled target differs from generate on the news prompt
            records.add(_run("compiled", qid, m, want if qid == "code-0" else [1, 2, 3, 9],
                             0.5, 2))
        records.add(_run("compiled", qid, "target", want if qid == "code-0" else [1, 2, 3, 9],
                         1.0, 4))
    eager = mp._cell_rows(Records(records.path), ("eager", 8, 0.0), prompts)  # as resumed
    assert [r["domain"] for r in eager] == ["code", "news"]
    assert all(r[m]["lossless"] for r in eager for m in methods)
    compiled = mp._cell_rows(records, ("compiled", 8, 0.0), prompts)
    assert [r["HedgeSpec mixed"]["lossless"] for r in compiled] == [True, False]
    assert [r["target"]["lossless"] for r in compiled] == [True, False]

    summary = mp._summary(eager, methods, heads=[None, None], title="eager", greedy=True)
    mixed = summary["methods"]["HedgeSpec mixed"]
    assert mixed["mat"] == 2.0 and mixed["tok_s"] == 4.0 and summary["methods"]["target"][
        "tok_s"] == 2.0
    assert summary["mixed_choice_share"] == {"head-a": 1 / 3, "head-b": 1 / 3, "suffix": 1 / 3}
    # per round (2 a run): the mixed pool 150 ms of drafting + evaluation, the model-free
    # pool 50, against 500 ms of verification
    assert summary["ms_per_round"]["mixed"] == pytest.approx(
        {"draft": 50.0, "eval": 100.0, "verify": 500.0})
    assert summary["draft_eval_share_of_verify"] == pytest.approx(0.3)
    assert summary["heads_share_of_verify"] == pytest.approx(0.2)
    mp._print_targets({"eager 8 T=0.0": summary})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line == ("| eager 8 T=0.0 | 2.00 | 2.00 | 1.00 | 1.00 (fixed ngram-general) | 1.00 "
                    "| 20% | 25% |")


def test_a_results_folder_grows_cell_by_cell_and_summarises_complete_cells(tmp_path):
    mp = load_script("mixed_pool")
    base = {"per_domain": 5, "k": 4, "head_dtype": "bfloat16", "out": str(tmp_path)}
    (tmp_path / "records.jsonl").write_text("")
    check_settings(tmp_path, mp._settings(Namespace(**base, tokens=(128,), temperatures=(0.0,),
                                                    targets=("eager",), threads=2)))
    # other cells (and threads) may add to the folder; another K may not
    check_settings(tmp_path, mp._settings(Namespace(**base, tokens=(256,),
                                                    temperatures=(0.7,),
                                                    targets=("compiled",), threads=1)))
    with pytest.raises(SettingsMismatchError):
        check_settings(tmp_path, mp._settings(Namespace(**{**base, "k": 3}, tokens=(128,),
                                                        temperatures=(0.0,),
                                                        targets=("eager",), threads=2)))
    methods = ["target", *(f"HedgeSpec {n}" for n in mp.POOLS), *mp.FIXED]
    prompts = [("code-0", "code", "p0"), ("news-0", "news", "p1")]
    records = Records(tmp_path / "records.jsonl")
    for mode in ("compiled", "eager"):
        for qid, _, _ in prompts:
            for m in methods:
                if (mode, qid, m) != ("compiled", "news-0", "fixed suffix"):
                    records.add(_run(mode, qid, m, [1, 2], 1.0, 1))
    assert mp._complete_cells(records, prompts, methods) == [("eager", 8, 0.0)]
    records.add(_run("compiled", "news-0", "fixed suffix", [1, 2], 1.0, 1))
    assert mp._complete_cells(Records(records.path), prompts, methods) == [
        ("eager", 8, 0.0), ("compiled", 8, 0.0)]
