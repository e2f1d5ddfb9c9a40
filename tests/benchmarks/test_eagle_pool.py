"""benchmarks/eagle_pool.py reads the heads ``hedgespec train-drafters --eagle-steps N`` built,
through ``load_pool`` (entries of exactly those settings, checked), on a tiny target."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spec_adapters.app.cli import main as hedgespec
from spec_adapters.eagle.head import CONFIG_NAME
from spec_adapters.store.integrity import VERIFIED
from tests.benchmarks.scripts import load_script
from tests.spec_adapters.bench_fixtures import make_target_folder, write_domains

DOMS = ("code", "math", "news")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny target and the pool ``train-drafters --eagle-steps 1`` builds for it."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("eagle-pool")
    target, cache = make_target_folder(root), root / "cache"
    write_domains(cache, DOMS)
    assert hedgespec(["train-drafters", "--target", str(target), "--cache-dir", str(cache),
                      "--threads", "1", "--domains", ",".join(DOMS), "--max-train-tokens",
                      "2000", "--eagle-steps", "1", "--distilled-tokens", "0"]) == 0
    return root, target, cache


def _argv(target, cache, out, steps: int) -> list[str]:
    return ["--target", str(target), "--cache-dir", str(cache), "--domains", ",".join(DOMS),
            "--max-train-tokens", "2000", "--distilled-tokens", "0", "--eagle-steps", str(steps),
            "--tokens", "6",
            "--depth", "2", "--top-k", "2", "--total-tokens", "4", "--out", str(out)]


def test_reads_the_built_heads_and_decodes_losslessly(built):
    root, target, cache = built
    out = root / "res.json"
    load_script("eagle_pool").main(_argv(target, cache, out, steps=1))
    res = json.loads(out.read_text())
    assert res["heads"] == [*(f"eagle-{d}" for d in DOMS), "eagle-general"]
    for name, path in zip(res["heads"], res["paths"], strict=True):
        assert re.fullmatch(rf"{name}-[0-9a-f]{{10}}", Path(path).name), path
        assert (Path(path) / CONFIG_NAME).is_file()
    assert [r["domain"] for r in res["records"]] == list(DOMS)
    methods = [f"fixed:{i}" for i in range(len(DOMS) + 1)] + ["exp3spec", "ucbspec",
                                                              "normalhedge"]
    for r in res["records"]:
        for m in methods:
            assert r[m]["lossless"] is True, (r["domain"], m)
            assert r[m]["new_tokens"] == 6


def test_other_settings_are_not_read_and_nothing_is_built(built, capsys):
    """Heads of ``--eagle-steps 2`` were never built: one line naming the missing entry, and
    the folder is unchanged (the benchmark builds nothing)."""
    root, target, cache = built
    (pool,) = [p for p in (cache / "pool").iterdir() if p.is_dir()]
    def entries():  # the integrity record (.verified.json) is bookkeeping, not a built entry:
        # it appears once a load finds the files older than RACY_NS (timing-dependent)
        return sorted(p.name for p in pool.iterdir() if p.name != VERIFIED)

    before = entries()
    with pytest.raises(SystemExit) as e:
        load_script("eagle_pool").main(_argv(target, cache, root / "res2.json", steps=2))
    assert e.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(lines) == 1 and re.search(r"pool entry \S+/eagle-code-[0-9a-f]{10} is unusable "
                                         r"\(missing\)", lines[0]), lines
    assert entries() == before
    assert not (root / "res2.json").exists()
