"""The converted target under attack (a tiny GGUF, the real conversion code): every damage
is reported as a corrupt cache and rebuilt to the same weights; never loaded as it is."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from spec_adapters.hf import models
from spec_adapters.hf.models import MANIFEST, load_target
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from spec_adapters.store import integrity

from .damage import FILE_FAULTS, on


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(gguf, reference cache, the embedding the GGUF holds)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("model-world")
    gguf = root / "tiny.gguf"
    tensors = write_tiny_gguf(gguf)
    load_target(gguf, cache_dir=root / "cache")
    return gguf, root / "cache", tensors["token_embd.weight"]


@pytest.fixture
def copy(built, tmp_path):
    gguf, cache, emb = built
    shutil.copytree(cache, tmp_path / "cache")
    (folder,) = (tmp_path / "cache" / "models").iterdir()
    return gguf, tmp_path / "cache", folder, emb


def _manifest_edit(f):
    def go(folder):
        m = folder / MANIFEST
        meta = json.loads(m.read_text())
        f(meta, folder)
        m.write_text(json.dumps(meta))
    return go


def _vouch_for_hostname(meta, folder):
    """List /etc/hostname (with its true digest) in place of the weights, then damage them."""
    host = "../" * len(folder.parts) + "etc/hostname"
    meta["files"].pop("model.safetensors")
    meta["files"][host] = {"size": (folder / host).stat().st_size,
                           "sha256": integrity.sha256_file(folder / host)}
    FILE_FAULTS["flip64"](folder / "model.safetensors")


def _nan_with_valid_manifest(folder):
    from safetensors.torch import load_file, save_file

    w = folder / "model.safetensors"
    state = load_file(str(w))
    next(iter(state.values())).view(-1)[3] = float("nan")
    save_file(state, str(w), metadata={"format": "pt"})
    _manifest_edit(lambda meta, f: meta["files"].update(
        integrity.file_digests(f, ["model.safetensors"])))(folder)


FAULTS = {
    **{f"weights-{k}": on("model.safetensors", d) for k, d in FILE_FAULTS.items()},
    "xor-4k-middle": lambda f: FILE_FAULTS["flip64"](f / "model.safetensors", 4096),
    "config-flip": lambda f: FILE_FAULTS["flip64"](f / "config.json", 8),
    "tokenizer-truncate": lambda f: FILE_FAULTS["truncate"](f / "tokenizer.json"),
    "planted-file": lambda f: (f / "pytorch_model.bin").write_bytes(b"\0" * 64),
    "manifest-deleted": lambda f: (f / MANIFEST).unlink(),
    "manifest-not-json": lambda f: (f / MANIFEST).write_text("{"),
    "manifest-list": lambda f: (f / MANIFEST).write_text("[1, 2, 3]"),
    "manifest-files-list": _manifest_edit(lambda m, f: m.update(files=sorted(m["files"]))),
    "manifest-sizes-only": _manifest_edit(lambda m, f: m.update(
        files={k: v["size"] for k, v in m["files"].items()})),
    "manifest-traversal": _manifest_edit(_vouch_for_hostname),
    "manifest-extra-name": _manifest_edit(lambda m, f: m["files"].update(  # true digest
        integrity.file_digests(f, [os.path.relpath("/etc/hostname", f)]))),
    "manifest-fingerprint": _manifest_edit(lambda m, f: m["fingerprint"].update(size=1)),
    "nan-valid-manifest": _nan_with_valid_manifest,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_damaged_conversion_is_rebuilt(copy, fault, capsys, monkeypatch):
    gguf, cache, folder, emb = copy
    if fault == "weights-flip1-keep-mtime":  # arm the fast path first
        monkeypatch.setattr(integrity, "RACY_NS", 0)
        load_target(gguf, cache_dir=cache)
        assert (folder / integrity.VERIFIED).is_file()
    FAULTS[fault](folder)
    capsys.readouterr()
    model, _ = load_target(gguf, cache_dir=cache)
    assert "is corrupt" in capsys.readouterr().err
    np.testing.assert_array_equal(model.get_input_embeddings().weight.detach().numpy(), emb)
    assert [p.name for p in (cache / "models").iterdir()] == [folder.name]
    assert models._cache_problem(folder, gguf) is None


def test_fast_path_skips_hashing_until_the_stat_changes(copy, monkeypatch):
    gguf, _, folder, _ = copy
    monkeypatch.setattr(integrity, "RACY_NS", 0)
    hashed = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    assert models._cache_problem(folder, gguf) is None  # a copy: new inodes, all re-hashed
    assert "model.safetensors" in hashed
    hashed.clear()
    assert models._cache_problem(folder, gguf) is None
    assert hashed == []
    (folder / "config.json").touch()
    assert models._cache_problem(folder, gguf) is None
    assert hashed == ["config.json"]


def test_a_gguf_with_non_finite_weights_is_not_cached(tmp_path):
    gguf = tmp_path / "nan.gguf"
    import gguf as gg

    write_tiny_gguf(gguf)
    r = gg.GGUFReader(str(gguf), "r+")
    t = next(t for t in r.tensors if t.name == "blk.0.ffn_up.weight")
    t.data.reshape(-1)[0] = np.inf
    del r
    with pytest.raises(ValueError, match=r"nan\.gguf holds non-finite weights"):
        load_target(gguf, cache_dir=tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache" / "models").iterdir()] == []


def test_a_local_model_folder_with_nan_is_refused(copy):
    from safetensors.torch import load_file, save_file

    _, _, folder, _ = copy
    w = folder / "model.safetensors"
    state = load_file(str(w))
    next(iter(state.values())).view(-1)[0] = float("nan")
    save_file(state, str(w), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="holds non-finite weights"):
        load_target(folder)


def test_a_killed_conversions_folder_goes_on_the_next_load(copy):
    gguf, cache, folder, _ = copy
    left = cache / "models" / f".{folder.name}.tmp-abc123"
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"\0" * 4096)
    load_target(gguf, cache_dir=cache)
    assert [p.name for p in (cache / "models").iterdir()] == [folder.name]
