"""Drafter pool cache: build, reuse, corrupt entry -> clear message + rebuild, nothing
half-written; tiny target and tiny prepared domains on disk (real loading code)."""

from __future__ import annotations

import json

import pytest
import torch

from spec_adapters.app.domains import load_domains
from spec_adapters.app.pool.cache import PoolCorruptError, build_pool, load_pool
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.suffix import SuffixDrafter
from spec_adapters.hf.models import load_target
from spec_adapters.store.pool_settings import NGramPoolSettings
from tests.spec_adapters.bench_fixtures import distill_answers, make_target_folder, write_domains

DOMS = ("code", "math", "news")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("pool")
    folder = make_target_folder(root)
    write_domains(root / "cache", DOMS)
    model, tok = load_target(folder, root / "cache")
    distill_answers(model, tok, root / "cache", DOMS)
    return root, model, tok


def _entry(folder, name, ext=".npz"):
    """The one file of entry ``name`` (its name ends in a hash of its settings)."""
    (path,) = folder.glob(f"{name}-??????????{ext}")
    return path


def _entries(folder):
    """mtime of every entry file and sidecar (not the lock or the checksum fast path)."""
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if not p.name.startswith(".")}


def _cfg(extra_shards: int = 0, ngram_order: int = 4) -> PoolConfig:
    return PoolConfig(NGramPoolSettings(DOMS, ngram_order, max_train_tokens=2000,
                                        distilled_tokens=6), extra_shards=extra_shards)


def test_pool_builds_loads_and_reuses(setup, capsys):
    root, model, tok = setup
    cache = root / "cache"
    pool = load_pool(model, tok, cache, _cfg(), progress=False)
    assert pool.names == ["ngram-code", "ngram-math", "ngram-news", "ngram-general",
                          "prompt-lookup", "suffix"]
    assert all(isinstance(d, NGramDrafter) for d in pool.drafters[:4])
    assert isinstance(pool.drafters[4], PromptLookupDrafter)
    assert isinstance(pool.drafters[5], SuffixDrafter)
    # the union baseline saw every domain's text and answers: more than any member
    union, frozen = pool.baselines
    assert (union.name, frozen.name) == ("ngram-union", "suffix-no-memory")
    assert union.n_tokens > sum(d.n_tokens for d in pool.drafters[:3]) * 0.9
    assert pool.specialist("math") == 1 and pool.generalist == 3
    assert pool.domain_of["ngram-news"] == "news" and pool.domain_of["ngram-general"] is None
    # equal training budget: the generalist saw no more tokens than a specialist
    assert pool.drafters[3].n_tokens <= 1.2 * max(d.n_tokens for d in pool.drafters[:3])
    assert pool.paths["ngram-math"] == _entry(pool.folder, "ngram-math")
    mtimes = _entries(pool.folder)
    capsys.readouterr()
    again = load_pool(model, tok, cache, _cfg(), progress=False)
    assert _entries(again.folder) == mtimes
    assert "built" not in capsys.readouterr().err
    assert not [p for p in pool.folder.iterdir() if ".tmp" in p.name]


def test_corrupt_entry_is_reported_and_rebuilt(setup, capsys):
    root, model, tok = setup
    cache = root / "cache"
    folder = build_pool(model, tok, cache, _cfg(), progress=False)
    entry = _entry(folder, "ngram-math")
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2])  # truncated: checksum no longer matches
    capsys.readouterr()
    pool = load_pool(model, tok, cache, _cfg(), progress=False)
    err = capsys.readouterr().err
    assert f"{entry.name} is unusable" in err and "rebuilding" in err
    assert entry.read_bytes() == good  # deterministic rebuild
    assert pool.drafters[1].n_tokens > 0
    # a missing sidecar (interrupted before it was written) also means: rebuild
    side = _entry(folder, "ngram-news", ".json")
    side.unlink()
    capsys.readouterr()
    build_pool(model, tok, cache, _cfg(), progress=False)
    assert f"{side.stem}.npz is unusable" in capsys.readouterr().err
    assert json.loads(side.read_text())["kind"] == "ngram"


def test_load_without_build_names_the_fix(setup):
    root, model, tok = setup
    cache = root / "cache"
    folder = build_pool(model, tok, cache, _cfg(), progress=False)
    _entry(folder, "ngram-code").write_bytes(b"garbage")
    with pytest.raises(PoolCorruptError, match="hedgespec train-drafters"):
        load_pool(model, tok, cache, _cfg(), build=False)
    build_pool(model, tok, cache, _cfg(), progress=False)  # repair for the other tests


def test_other_settings_build_alongside_and_extras_exist(setup):
    root, model, tok = setup
    cache = root / "cache"
    before = _entries(build_pool(model, tok, cache, _cfg(), progress=False))
    pool = load_pool(model, tok, cache, _cfg(extra_shards=2, ngram_order=3), progress=False)
    after = _entries(pool.folder)
    assert {n: after[n] for n in before} == before  # the default pool is left alone
    assert len(list(pool.folder.glob("ngram-code-*.npz"))) == 2
    assert len(pool.extras) == 2 * len(DOMS)
    assert pool.drafters[0].order == 3
    assert {x.name for x in pool.extras} == {f"extra-{d}-{s}" for d in DOMS for s in range(2)}


def test_unknown_domain_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown domain.*'physics'"):
        PoolConfig(NGramPoolSettings(("code", "physics")))


def test_prepared_fixture_domains_load(setup):
    root, _, _ = setup
    d = load_domains(root / "cache", DOMS)
    assert set(d) == set(DOMS) and all(x.prompts and x.train for x in d.values())


def test_drafters_hand_out_valid_distributions(setup):
    from spec_adapters.core.proposal import warp
    from spec_adapters.core.sampling import SamplingConfig

    root, model, tok = setup
    pool = load_pool(model, tok, root / "cache", _cfg(), progress=False)
    ids = torch.tensor([1, 7, 8, 9, 7, 8])
    sampling = SamplingConfig(0.7)
    for d in pool.drafters:
        d.start(ids)
        toks, q = d.propose(3, sampling, torch.Generator().manual_seed(0))
        n = 3 if d.name != "suffix" else len(toks)  # its draft length follows the match
        assert toks.shape == (n,) and (len(q), q.vocab_size) == (n, d.vocab_size) and n >= 1
        q.check(d.name)
        assert bool((q.prob(toks) > 0).all())  # drafts were drawn from q
        warp(d.extend(toks), sampling).check(d.name)


def test_pool_folder_does_not_depend_on_how_the_cache_path_is_spelled(setup):
    from spec_adapters.app.pool.cache import pool_dir

    _root, model, tok = setup
    original = model.config.name_or_path
    try:
        model.config.name_or_path = "/abs/cache/models/tiny-target"
        absolute = pool_dir("c", model, tok)
        model.config.name_or_path = ".cache/models/tiny-target"
        assert pool_dir("c", model, tok) == absolute
        model.config.name_or_path = ".cache/models/other-target"
        assert pool_dir("c", model, tok) != absolute
    finally:
        model.config.name_or_path = original
