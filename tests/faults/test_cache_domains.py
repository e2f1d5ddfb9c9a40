"""Prepared domains under attack: a damaged file is one CacheError naming it on load, and
``prepare_domains`` rebuilds it (its builders replaced by a synthetic one: no downloads)."""

from __future__ import annotations

import json
import shutil

import pytest

from spec_adapters.app import domains as dm
from spec_adapters.app.domains import Sources, load_domain, prepare_domains
from spec_adapters.store import CacheError
from tests.spec_adapters.bench_fixtures import domain_texts

from .damage import FILE_FAULTS, on, overwrite_with

DOMS = ("code", "math", "news")


def _builder(name):
    def build(src, n, seed):
        return domain_texts(name, 30, 0), [f"continue {t[:40]}" for t in domain_texts(
            name, n, 1)], [f"continue {t[:40]}" for t in domain_texts(name, 5, 2)], "synthetic"
    return build


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """Synthetic builders and sources that exist: prepare_domains runs without a network."""
    for d in DOMS:
        monkeypatch.setitem(dm._BUILDERS, d, _builder(d))
    src = Sources(*[tmp_path] * 6)
    monkeypatch.setattr(dm, "fetch_sources", lambda cache_dir: src)
    ref = tmp_path / "reference"
    prepare_domains(ref, DOMS, n_prompts=4)
    cache = tmp_path / "cache"
    shutil.copytree(ref, cache)
    return ref, cache


def _tree(cache):
    return {p.relative_to(cache).as_posix(): p.read_bytes() for p in cache.rglob("*")
            if p.is_file() and not p.name.startswith(".")}


def _meta_edit(f):
    def go(folder):
        meta = json.loads((folder / "meta.json").read_text())
        f(meta)
        (folder / "meta.json").write_text(json.dumps(meta))
    return go


FAULTS = {
    **{f"train-{k}": on("train.jsonl", d) for k, d in FILE_FAULTS.items()},
    "prompts-flip64": lambda f: FILE_FAULTS["flip64"](f / "prompts.jsonl"),
    "swap-train-prompts": lambda f: overwrite_with(f / "train.jsonl", f / "prompts.jsonl"),
    "other-domain": lambda f: overwrite_with(f / "train.jsonl",
                                             f.parent / "code" / "train.jsonl"),
    "meta-not-json": lambda f: (f / "meta.json").write_text("{"),
    "meta-list": lambda f: (f / "meta.json").write_text("[1, 2, 3]"),
    "meta-files-list": _meta_edit(lambda m: m.update(files=list(m["files"]))),
    "meta-traversal": _meta_edit(lambda m: m["files"].update(
        {"../../../../etc/hostname": m["files"].pop("train.jsonl")})),
    "meta-format": _meta_edit(lambda m: m.update(format=2)),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_damaged_domain_is_refused_then_rebuilt(offline, fault, capsys):
    ref, cache = offline
    folder = cache / "domains" / "math"
    FAULTS[fault](folder)
    with pytest.raises(CacheError, match=r"domain 'math' .* is corrupt .*rebuild it with"):
        load_domain("math", cache)
    load_domain("code", cache)  # the others are fine
    capsys.readouterr()
    prepare_domains(cache, DOMS, n_prompts=4)
    assert "preparing domain math (" in capsys.readouterr().err
    assert _tree(cache) == _tree(ref)
    assert load_domain("math", cache).train == load_domain("math", ref).train
