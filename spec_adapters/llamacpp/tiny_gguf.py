"""A tiny random Llama written as a GGUF file: what tests and llama.cpp's start-up probe
decode (llama.cpp loads it as it loads any GGUF; ``spec_adapters.hf.models`` converts it to
transformers' layout like any other). Needs the ``gguf`` package and numpy only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["TEMPLATE", "write_tiny_gguf"]

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


def write_tiny_gguf(path: str | Path, hidden: int = 32, layers: int = 2, heads: int = 4,
                    kv_heads: int = 2, ff: int = 64, seed: int = 0, tied: bool = False,
                    qtype: int | None = None) -> dict[str, np.ndarray]:
    """A tiny Llama with a byte-level BPE tokenizer and a chat template, as float32 GGUF
    (without an ``output.weight`` when ``tied``: the LM head is the embedding); ``qtype`` (a
    ``gguf.GGMLQuantizationType``, e.g. Q4_1 as the default target ships) quantizes its
    matrices (``hidden`` and ``ff`` then multiples of 32). Returns the float32 tensors by GGUF
    name (before quantization)."""
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
