"""``hedgespec distill``: answers equal the target's own greedy generation, a killed run resumes
to the same bytes, answers are tied to their target, the pool refuses foreign ones and leaves
out answers to benchmark prompts (tiny target and tiny prepared domains on disk)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from spec_adapters.app.distill.answers import (
    DistillConfig,
    answer_batch,
    answers_folder,
    distill,
    load_answers,
    weights_fingerprint,
)
from spec_adapters.app.domains import Domain, chat_ids, load_domains, save_domain
from spec_adapters.app.pool.cache import build_pool
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.hf.models import load_target
from spec_adapters.store.integrity import CacheError
from spec_adapters.store.pool_settings import NGramPoolSettings
from tests.spec_adapters.bench_fixtures import make_target_folder, write_domains

DOMS = ("code", "math")
CFG = DistillConfig(tokens_per_domain=10, max_new_tokens=4, batch_size=2)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("distill")
    folder = make_target_folder(root)
    cache = root / "cache"
    write_domains(cache, DOMS)
    # more training-side prompts than one batch, so a run has several batches per domain
    for name, d in load_domains(cache, DOMS).items():
        asks = [f"{p} {i}" for i in range(4) for p in d.train_prompts]
        save_domain(cache, Domain(name, d.train, d.prompts, asks, d.meta))
    model, tok = load_target(folder, cache)
    return root, folder, cache, model, tok


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_answers_are_the_targets_own_greedy_generation(world):
    _, _, cache, model, tok = world
    prompts = load_domains(cache, ["code"])["code"].train_prompts[:3]
    prompts[1] = prompts[1] * 3  # rows of different lengths: left padding
    ref = []
    for p in prompts:
        ids = chat_ids(tok, p).view(1, -1)
        out = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
        ref.append(out[0, ids.shape[1]:].tolist())
    assert answer_batch(model, tok, prompts, 6) == ref
    # an EOS ends that row's answer before it (and only that row's)
    eos = ref[0][2]
    model.generation_config.eos_token_id = eos
    try:
        got = answer_batch(model, tok, prompts, 6)
    finally:
        model.generation_config.eos_token_id = None
    for g, r in zip(got, ref, strict=True):
        assert g == (r[:r.index(eos)] if eos in r else r)


def test_a_run_stops_each_domain_after_its_token_goal(world, tmp_path):
    _, _, cache, model, tok = world
    m = distill(model, tok, load_domains(cache, DOMS), tmp_path, CFG, progress=False)
    folder = answers_folder(tmp_path, model, tok)
    assert m == json.loads((folder / "manifest.json").read_text())
    assert m["target"]["fingerprint"] == weights_fingerprint(model, tok)
    for d in DOMS:
        answers, prompts = load_answers(folder, d, m["target"]["fingerprint"], 10)
        total = sum(map(len, answers))
        assert m["domains"][d]["tokens"] == total and m["domains"][d]["answers"] == len(answers)
        # the last batch brought the total to the goal; without it the goal was not reached
        assert total >= 10 and total - sum(map(len, answers[-2:])) < 10
        asks = load_domains(cache, [d])[d].train_prompts
        assert prompts == asks[:len(prompts)]  # the training-side prompts, in order
    assert not list(tmp_path.glob(".*.partial"))


_KILLED = """
import os, signal, sys, torch
torch.set_num_threads(1)
from spec_adapters.app.distill.answers import DistillConfig, distill
from spec_adapters.app.domains import load_domains
from spec_adapters.hf.models import load_target
folder, cache, out = sys.argv[1:4]
model, tok = load_target(folder, cache)
def kill(domain, i):
    if domain == "math" and i == 0:
        os.kill(os.getpid(), signal.SIGKILL)
distill(model, tok, load_domains(cache, ["code", "math"]), out,
        DistillConfig(tokens_per_domain=10, max_new_tokens=4, batch_size=2),
        progress=False, on_batch=kill)
"""


def test_a_killed_run_resumes_to_the_same_bytes(world, tmp_path):
    _, folder, cache, model, tok = world
    whole = tmp_path / "whole"
    distill(model, tok, load_domains(cache, DOMS), whole, CFG, progress=False)
    resumed = tmp_path / "resumed"
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(_KILLED))
    rc = subprocess.run([sys.executable, str(script), str(folder), str(cache), str(resumed)],
                        capture_output=True, timeout=300).returncode
    assert rc == -9  # killed between batches: math's first batch saved, nothing finished
    (work,) = resumed.glob(".*.partial")
    assert sorted(p.name for p in (work / "math").iterdir()) == ["batch-00000.npz"]
    assert not (answers_folder(resumed, model, tok) / "manifest.json").exists()
    saved = {p: p.read_bytes() for p in work.rglob("batch-*.npz")}
    assert len(saved) == 3  # code's two, math's first
    seen = []

    def check(d, i):  # the kept batches are still there, as they were
        seen.append((d, i, all(p.read_bytes() == b for p, b in saved.items())))

    m = distill(model, tok, load_domains(cache, DOMS), resumed, CFG, progress=False,
                on_batch=check)
    assert seen == [("math", 1, True)]  # only what was missing was generated
    a, b = _files(answers_folder(whole, model, tok)), _files(answers_folder(resumed, model, tok))
    assert {k: v for k, v in a.items() if k != "manifest.json"} == \
        {k: v for k, v in b.items() if k != "manifest.json"}
    assert m["domains"] == json.loads(a["manifest.json"])["domains"]


def test_a_partial_run_of_other_settings_is_discarded(world, tmp_path):
    _, _, cache, model, tok = world
    doms = load_domains(cache, DOMS)

    def stop(d, i):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        distill(model, tok, doms, tmp_path, CFG, progress=False, on_batch=stop)
    other = DistillConfig(tokens_per_domain=10, max_new_tokens=3, batch_size=2)
    m = distill(model, tok, doms, tmp_path, other, progress=False)
    answers, _ = load_answers(answers_folder(tmp_path, model, tok), "code",
                              m["target"]["fingerprint"], 10)
    assert max(map(len, answers)) <= 3  # nothing of the 4-token run was kept


def test_answers_of_another_target_are_refused(world, tmp_path):
    root, _, cache, model, tok = world
    distill(model, tok, load_domains(cache, DOMS), tmp_path, CFG, progress=False)
    other, other_tok = load_target(make_target_folder(root / "other", seed=1), cache)
    folder = answers_folder(tmp_path, other, other_tok)
    assert folder == answers_folder(tmp_path, model, tok)  # same shape: same folder name
    theirs, ours = weights_fingerprint(model, tok), weights_fingerprint(other, other_tok)
    assert theirs != ours
    with pytest.raises(CacheError, match=rf"made by another target \(fingerprint {theirs}, "
                                         rf"this target's is {ours}\).*hedgespec distill"):
        load_answers(folder, "code", ours, 10)
    with pytest.raises(CacheError, match=r"hold 10 tokens per domain, the pool asks for 99"):
        load_answers(folder, "code", theirs, 99)
    with pytest.raises(CacheError, match=r"no domain 'news'"):
        load_answers(folder, "news", theirs, 10)
    with pytest.raises(CacheError, match=r"no distilled answers in"):
        load_answers(tmp_path / "nowhere", "code", theirs, 10)
    # the pool of the other target says so instead of using them
    cfg = PoolConfig(NGramPoolSettings(DOMS, max_train_tokens=500, distilled_tokens=10),
                     answers_dir=str(tmp_path))
    with pytest.raises(CacheError, match=r"made by another target"):
        build_pool(other, other_tok, root / "other-cache", cfg, domains=load_domains(cache, DOMS),
                   progress=False)


def test_a_damaged_answers_file_is_named(world, tmp_path):
    _, _, cache, model, tok = world
    m = distill(model, tok, load_domains(cache, DOMS), tmp_path, CFG, progress=False)
    folder = answers_folder(tmp_path, model, tok)
    f = folder / "answers-math.npz"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(CacheError, match=r"answers-math\.npz"):
        load_answers(folder, "math", m["target"]["fingerprint"], 10)


def test_the_pool_leaves_out_answers_to_benchmark_prompts(world, tmp_path, capsys):
    root, _, cache, model, tok = world
    distill(model, tok, load_domains(cache, DOMS), tmp_path, CFG, progress=False)
    folder = answers_folder(tmp_path, model, tok)
    fp = weights_fingerprint(model, tok)
    doms = load_domains(cache, DOMS)
    answers, prompts = load_answers(folder, "code", fp, 10)
    # the split moved: the first training prompt is now a benchmark prompt
    code = doms["code"]
    doms["code"] = Domain("code", code.train, [prompts[0], *code.prompts], code.train_prompts,
                          code.meta)
    cfg = PoolConfig(NGramPoolSettings(DOMS, max_train_tokens=500, distilled_tokens=10),
                     answers_dir=str(tmp_path))
    pool_folder = build_pool(model, tok, root / "cache-split", cfg, domains=doms, progress=False)
    import numpy as np

    (entry,) = pool_folder.glob("answers-code-*.npz")
    with np.load(entry) as z:
        kept = len(z["offsets"]) - 1
    assert kept == len(answers) - prompts.count(prompts[0])
    assert "distilled code answers are to benchmark prompts" in capsys.readouterr().err


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1, got 0"):
        DistillConfig(batch_size=0)
    with pytest.raises(ValueError, match=r"tokens_per_domain must be an integer >= 1"):
        DistillConfig(tokens_per_domain=True)
