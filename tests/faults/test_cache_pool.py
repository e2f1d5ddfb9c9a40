"""Pool entries under attack: every entry kind damaged in every file way, garbage and lying
sidecars, born-bad (non-finite) weights behind valid checksums, pools of other settings side
by side. Each damaged copy must either be rebuilt to the reference bytes (``build=True``) or be
one ``PoolCorruptError`` naming the entry (``build=False``); never loaded as if it were fine."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from spec_adapters.app.pool.cache import PoolCorruptError, load_pool
from spec_adapters.app.pool.entries import write_sidecar
from spec_adapters.store import integrity

from .cache_world import config, patch_router, world_fixture
from .damage import FILE_FAULTS, overwrite_with

world = world_fixture("pool-world")


@pytest.fixture
def pool(world, tmp_path, monkeypatch):
    """A fresh copy of the reference cache: (its pool folder, its entries by name)."""
    patch_router(monkeypatch)
    folder = world.copy(tmp_path / "cache")
    return folder, world.entries(folder)


def _files(entry) -> list:
    return [entry.folder / f for f in entry.files]


def _same_as_reference(world, folder) -> None:
    got = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
           if p.is_file() and not p.name.startswith(".")}
    assert got == world.reference


def _refused_then_rebuilt(world, folder, entry, capsys) -> None:
    """The two outcomes every fault must have (answers are only read while building)."""
    cache = folder.parents[1]
    if entry.kind != "answers":
        with pytest.raises(PoolCorruptError, match=re.escape(entry.key)) as err:
            load_pool(world.model, world.tok, cache, world.cfg, build=False)
        assert "\n" not in str(err.value)
    capsys.readouterr()
    pool = load_pool(world.model, world.tok, cache, world.cfg, progress=False)
    log = capsys.readouterr().err
    assert f"{entry.key}" in log and "rebuilding" in log
    _same_as_reference(world, folder)
    assert len(pool.heads) == 4 and pool.router is not None


TARGETS = {  # entry -> which of its files is damaged
    "ngram-code": 0, "ngram-general": 0, "answers-math": 0, "eagle-code": 1,
    "eagle-general": 0, "router": 0}


@pytest.mark.parametrize("fault", sorted(FILE_FAULTS))
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_damaged_entry_file_is_refused_or_rebuilt(world, pool, name, fault, capsys,
                                                  monkeypatch):
    folder, entries = pool
    e = entries[name]
    if fault == "flip1-keep-mtime":  # the fast path is armed: only ctime shows the change
        monkeypatch.setattr(integrity, "RACY_NS", 0)
        load_pool(world.model, world.tok, folder.parents[1], world.cfg, build=False)
        assert json.loads((folder / integrity.VERIFIED).read_text())
    FILE_FAULTS[fault](_files(e)[TARGETS[name]])
    _refused_then_rebuilt(world, folder, e, capsys)


SWAPS = [("ngram-code", "ngram-math"), ("ngram-general", "ngram-news"),
         ("answers-math", "ngram-math"), ("eagle-code", "eagle-math"), ("router", "ngram-code")]


@pytest.mark.parametrize(("victim", "donor"), SWAPS)
def test_another_entrys_file_copied_over_is_refused_or_rebuilt(world, pool, victim, donor,
                                                               capsys):
    folder, entries = pool
    overwrite_with(_files(entries[victim])[-1], _files(entries[donor])[-1])
    _refused_then_rebuilt(world, folder, entries[victim], capsys)


def _sidecar_faults():
    """name -> (victim, edit of the victim's sidecar); some edits also swap the entry's file
    for another one, which a sidecar vouching for the wrong file would let through."""

    def text(t):
        return lambda e, es: e.sidecar.write_text(t)

    def edit(f):
        def go(e, es):
            meta = json.loads(e.sidecar.read_text())
            f(meta, e, es)
            e.sidecar.write_text(json.dumps(meta))
        return go

    def vouch_for(path_of):
        def f(meta, e, es):
            other = path_of(e, es)
            rel = os.path.relpath(other, e.folder)
            meta["files"] = {rel: {"size": other.stat().st_size,
                                   "sha256": integrity.sha256_file(other)}}
            overwrite_with(_files(e)[0], _files(es["ngram-math"])[0])
        return f

    def files(v):
        return edit(lambda m, e, es: m.__setitem__("files", v))

    def first_info(**kw):
        return edit(lambda m, e, es: next(iter(m["files"].values())).update(kw))

    return {
        "not-json": ("ngram-code", text("{oops")),
        "list": ("ngram-code", text("[1, 2, 3]")),
        "null": ("ngram-code", text("null")),
        "files-list": ("ngram-code", files(["ngram-code.npz"])),
        "files-missing": ("eagle-code", edit(lambda m, e, es: m.pop("files"))),
        "files-empty": ("eagle-code", files({})),
        "size-string": ("ngram-code", first_info(size="12")),
        "size-negative": ("ngram-code", first_info(size=-1)),
        "sha-not-hex": ("ngram-code", first_info(sha256="z" * 64)),
        "traversal": ("ngram-code", edit(vouch_for(lambda e, es: Path("/etc/hostname")))),
        "other-entry": ("ngram-code",
                        edit(vouch_for(lambda e, es: _files(es["ngram-math"])[0]))),
        "extra-name": ("eagle-code", edit(lambda m, e, es: m["files"].update(  # true digest
            integrity.file_digests(e.folder, es["ngram-math"].files)))),
        "settings": ("ngram-code", edit(lambda m, e, es: m["settings"].update(order=9))),
        "kind": ("router", edit(lambda m, e, es: m.update(kind="ngram"))),
        "format": ("ngram-code", edit(lambda m, e, es: m.update(format=1))),
        "copied-sidecar": ("ngram-code",
                           lambda e, es: overwrite_with(e.sidecar, es["ngram-math"].sidecar)),
        "deleted": ("eagle-code", lambda e, es: e.sidecar.unlink()),
        "directory": ("ngram-code", lambda e, es: (e.sidecar.unlink(), e.sidecar.mkdir())),
    }


SIDECAR_FAULTS = _sidecar_faults()


@pytest.mark.parametrize("fault", sorted(SIDECAR_FAULTS))
def test_garbage_or_lying_sidecar_is_refused_or_rebuilt(world, pool, fault, capsys):
    folder, entries = pool
    victim, damage = SIDECAR_FAULTS[fault]
    damage(entries[victim], entries)
    _refused_then_rebuilt(world, folder, entries[victim], capsys)


def _born_bad(entry) -> None:
    """Non-finite weights written *with* a matching sidecar (as a diverged build would)."""
    if entry.kind == "eagle":
        from safetensors.torch import load_file, save_file

        f = _files(entry)[1]
        state = load_file(str(f))
        key = next(k for k, v in state.items() if v.is_floating_point())
        state[key].view(-1)[0] = float("nan")
        save_file(state, str(f), metadata={"format": "pt"})
    else:
        with np.load(entry.path) as z:
            arrays = dict(z)
        arrays["W"][0, 0] = np.inf
        with open(entry.path, "wb") as fh:
            np.savez(fh, **arrays)
    write_sidecar(entry)


@pytest.mark.parametrize("name", ["eagle-math", "router"])
def test_non_finite_weights_behind_a_valid_checksum_are_corrupt(world, pool, name, capsys):
    folder, entries = pool
    _born_bad(entries[name])
    with pytest.raises(PoolCorruptError, match=r"non-finite"):
        load_pool(world.model, world.tok, folder.parents[1], world.cfg, build=False)
    capsys.readouterr()
    load_pool(world.model, world.tok, folder.parents[1], world.cfg, progress=False)
    assert "non-finite" in capsys.readouterr().err
    _same_as_reference(world, folder)


def test_a_head_with_non_finite_weights_is_never_saved(world, tmp_path):
    from spec_adapters.eagle import EagleHead

    e = world.entries(world.folder)["eagle-news"]
    head = EagleHead.from_pretrained(e.path, target=world.model)
    with torch.no_grad():
        next(head.parameters()).view(-1)[0] = float("inf")
    with pytest.raises(ValueError, match="non-finite weights"):
        head.save_pretrained(tmp_path / "h")
    assert not (tmp_path / "h").exists()


def test_pools_of_other_settings_coexist(world, pool, capsys):
    folder, _ = pool
    cache = folder.parents[1]
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()
              if not p.name.startswith(".")}
    sql_like = config(domains=("math",), router=False)  # `--domains math` on a full cache
    capsys.readouterr()
    small = load_pool(world.model, world.tok, cache, sql_like, progress=False)
    assert small.names == ["ngram-math", "ngram-general", "prompt-lookup", "suffix"]
    assert "unusable" not in capsys.readouterr().err
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert {n: after[n] for n in before} == before  # nothing of the full pool touched
    for shared in ("ngram-math", "eagle-math"):
        assert small.paths[shared] == world.entries(folder)[shared].path
    for own in ("ngram-general", "eagle-general"):  # other settings: beside the full pool's
        assert small.paths[own] != world.entries(folder)[own].path
    load_pool(world.model, world.tok, cache, world.cfg, progress=False)  # the default again
    assert "built" not in capsys.readouterr().err


def test_leftovers_of_killed_builds_go_even_when_nothing_needs_building(world, pool, capsys):
    folder, entries = pool
    left = [folder / f".{entries['eagle-code'].key}.tmp-4242", folder / "x.npz.tmp.npz",
            folder / f"{entries['router'].sidecar.name}.tmp"]
    left[0].mkdir()
    (left[0] / "model.safetensors").write_bytes(b"\0" * 4096)
    for p in left[1:]:
        p.write_bytes(b"half")
    load_pool(world.model, world.tok, folder.parents[1], world.cfg, progress=False)
    assert not any(p.exists() for p in left) and "built" not in capsys.readouterr().err
    _same_as_reference(world, folder)
