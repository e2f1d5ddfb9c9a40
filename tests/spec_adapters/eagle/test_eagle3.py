"""EAGLE-3 checkpoints in the published key / shape layout: load, forward against a reference
written here from EAGLE-3's equations, exact save -> load round trip, refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from spec_adapters.eagle import EagleHead, EagleHeadConfig
from spec_adapters.eagle.head import rope_inv_freq
from tests.conftest import make_tiny_llama

V, H, N_LAYERS = 96, 32, 8  # target; default feature layers 2, N//2, N-3 = (2, 4, 5)
NH, KV, D, INTER, VD = 4, 2, 8, 48, 40


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return make_tiny_llama(V, seed=3, hidden_size=H, num_hidden_layers=N_LAYERS)


def _weights(seed: int, fc_norm: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def mat(*shape):
        return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

    def gain():
        return 1 + 0.2 * torch.randn(H, generator=g)

    w = {"fc.weight": mat(H, 3 * H),
         "midlayer.self_attn.q_proj.weight": mat(NH * D, 2 * H),
         "midlayer.self_attn.k_proj.weight": mat(KV * D, 2 * H),
         "midlayer.self_attn.v_proj.weight": mat(KV * D, 2 * H),
         "midlayer.self_attn.o_proj.weight": mat(H, NH * D),
         "midlayer.mlp.gate_proj.weight": mat(INTER, H),
         "midlayer.mlp.up_proj.weight": mat(INTER, H),
         "midlayer.mlp.down_proj.weight": mat(H, INTER),
         "midlayer.input_layernorm.weight": gain(),
         "midlayer.hidden_norm.weight": gain(),
         "midlayer.post_attention_layernorm.weight": gain(),
         "norm.weight": gain(),
         "lm_head.weight": 3 * mat(VD, H)}
    ids = torch.randperm(V, generator=g)[:VD].sort().values
    w["d2t"] = ids - torch.arange(VD)  # offsets, as published
    w["t2d"] = torch.zeros(V, dtype=torch.bool).index_fill_(0, ids, True)
    if fc_norm:
        for i in range(3):
            w[f"fc_norm.{i}.weight"] = gain()
    return w


def _config(**extra) -> dict:
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
           "num_hidden_layers": 1, "hidden_size": H, "intermediate_size": INTER,
           "num_attention_heads": NH, "num_key_value_heads": KV, "rms_norm_eps": 1e-5,
           "vocab_size": V, "draft_vocab_size": VD, "hidden_act": "silu"}
    cfg.update(extra)
    return {k: v for k, v in cfg.items() if v is not None}


def _write(folder, weights, config):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# ---------------------------------------------------------------- reference, from the equations
def _rms(x, w, eps=1e-5):
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def _rotate(x, pos, theta):
    """Rotary embedding on (T, heads, d): pairs (i, i + d/2) rotated by pos * theta^(-2i/d)."""
    half = x.shape[-1] // 2
    ang = pos[:, None].double() * theta ** (-torch.arange(half, dtype=torch.float64) / half)
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], -1)


def _reference(w, emb, h_in, theta=10000.0):
    """EAGLE-3 layer over T positions (causal), float64: logits and pre-norm output."""
    w = {k: v.double() for k, v in w.items()}
    emb, h_in = emb.double(), h_in.double()
    T = h_in.shape[0]
    x = torch.cat([_rms(emb, w["midlayer.input_layernorm.weight"]),
                   _rms(h_in, w["midlayer.hidden_norm.weight"])], -1)
    pos = torch.arange(T)
    q = _rotate((x @ w["midlayer.self_attn.q_proj.weight"].T).view(T, NH, D), pos, theta)
    k = _rotate((x @ w["midlayer.self_attn.k_proj.weight"].T).view(T, KV, D), pos, theta)
    v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(T, KV, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    out = []
    for i in range(NH):  # query head i reads key/value head i // (NH / KV)
        j = i // (NH // KV)
        s = (q[:, i] @ k[:, j].T / math.sqrt(D)).masked_fill(~causal, -math.inf)
        out.append(torch.softmax(s, -1) @ v[:, j])
    z = h_in + torch.cat(out, -1) @ w["midlayer.self_attn.o_proj.weight"].T
    y = _rms(z, w["midlayer.post_attention_layernorm.weight"])
    z = z + (torch.nn.functional.silu(y @ w["midlayer.mlp.gate_proj.weight"].T)
             * (y @ w["midlayer.mlp.up_proj.weight"].T)) @ w["midlayer.mlp.down_proj.weight"].T
    return _rms(z, w["norm.weight"]) @ w["lm_head.weight"].T, z


def _fused(w, target, seq, layers=(2, 4, 5)):
    with torch.no_grad():
        hs = target(input_ids=seq.view(1, -1), output_hidden_states=True).hidden_states
    chunks = [hs[i][0].double() for i in layers]
    if "fc_norm.0.weight" in w:
        chunks = [_rms(c, w[f"fc_norm.{i}.weight"].double()) for i, c in enumerate(chunks)]
    return torch.cat(chunks, -1) @ w["fc.weight"].double().T, torch.cat(
        [hs[i][0] for i in layers], -1)


def _emb(target, tokens):
    return target.get_input_embeddings().weight.detach()[tokens]


# ---------------------------------------------------------------- loading
@pytest.mark.parametrize("theta", [None, 500.0])
def test_published_checkpoint_forward_equals_the_eagle3_equations(tmp_path, target, theta):
    w = _weights(0)
    head = EagleHead.from_eagle3(_write(tmp_path / "ck", w, _config(rope_theta=theta)), target)
    assert head.config.feature_layers == (2, 4, 5)
    assert head.config.rope_theta == (theta or 10000.0)  # EAGLE's fallback when absent
    assert torch.equal(head.d2t, torch.arange(VD) + w["d2t"])  # offsets -> absolute ids
    seq = torch.randint(3, V, (13,), generator=torch.Generator().manual_seed(1))
    fused, feats = _fused(w, target, seq[:-1])
    emb = _emb(target, seq[1:])
    ref_logits, ref_z = _reference(w, emb, fused, theta or 10000.0)
    with torch.no_grad():
        logits, fed, k, v = head(feats[None], emb[None], torch.arange(12), fuse=True)
    torch.testing.assert_close(logits[0].double(), ref_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(fed[0].double(), ref_z, atol=2e-5, rtol=1e-5)  # pre-norm fed
    # drafting one deeper: the fed-back hidden of the last pair replaces the fused feature
    tok = torch.tensor([7])
    deep_logits, _ = _reference(w, torch.cat([emb, _emb(target, tok)]),
                                torch.cat([fused, ref_z[-1:]]), theta or 10000.0)
    with torch.no_grad():
        step, _, _, _ = head(fed[:, -1:], head.embed(tok)[None], torch.tensor([12]), k, v)
    torch.testing.assert_close(step[0, 0].double(), deep_logits[-1], atol=2e-5, rtol=1e-5)


def test_eagle31_fc_norm_and_norm_output_are_applied(tmp_path, target):
    w = _weights(1, fc_norm=True)
    folder = _write(tmp_path / "ck", w, _config(fc_norm=True, norm_output=True))
    head = EagleHead.from_eagle3(folder, target)
    seq = torch.randint(3, V, (10,), generator=torch.Generator().manual_seed(2))
    fused, feats = _fused(w, target, seq[:-1])
    ref_logits, ref_z = _reference(w, _emb(target, seq[1:]), fused)
    with torch.no_grad():
        logits, fed, _, _ = head(feats[None], head.embed(seq[1:])[None], torch.arange(9),
                                 fuse=True)
    torch.testing.assert_close(logits[0].double(), ref_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(fed[0].double(), _rms(ref_z, w["norm.weight"].double()),
                               atol=2e-5, rtol=1e-5)  # post-norm hidden fed back


def test_specforge_embed_tokens_and_layer_ids(tmp_path, target):
    w = _weights(2)
    w["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().to(torch.bfloat16)
    cfg = _config(eagle_config={"eagle_aux_hidden_state_layer_ids": [5, 1, 3]})
    head = EagleHead.from_eagle3(_write(tmp_path / "ok", w, cfg), target)
    assert head.config.feature_layers == (2, 4, 6)  # outputs of layers 1, 3, 5, in order
    other = w["embed_tokens.weight"].clone()
    other[5] += 1
    with pytest.raises(ValueError, match=r"embed_tokens\.weight differs"):
        EagleHead.from_eagle3(_write(tmp_path / "bad", {**w, "embed_tokens.weight": other},
                                     cfg), target)


def test_a_shallow_targets_coinciding_layers_are_fused_as_specforge_lists_them(tmp_path):
    shallow = make_tiny_llama(V, seed=4, hidden_size=H, num_hidden_layers=4)
    w = _weights(6)
    head = EagleHead.from_eagle3(_write(tmp_path / "ck", w, _config()), shallow)
    assert head.config.feature_layers == (2, 2, 1)  # 2, N//2, N-3: layer 2 twice, as listed
    seq = torch.randint(3, V, (9,), generator=torch.Generator().manual_seed(5))
    fused, feats = _fused(w, shallow, seq[:-1], layers=(2, 2, 1))
    with torch.no_grad():
        logits, _, _, _ = head(feats[None], head.embed(seq[1:])[None], torch.arange(8),
                               fuse=True)
    ref_logits, _ = _reference(w, _emb(shallow, seq[1:]), fused)
    torch.testing.assert_close(logits[0].double(), ref_logits, atol=2e-5, rtol=1e-5)
    # SpecForge's default ids for N = 4 (1, N//2 - 1, N - 4) name the same layers
    ids = _config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 1, 0]})
    again = EagleHead.from_eagle3(_write(tmp_path / "ids", w, ids), shallow)
    assert again.config.feature_layers == (2, 2, 1)
    again.save_eagle3(tmp_path / "out")  # and written back as the same ids
    out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 1, 0]
    with pytest.raises(ValueError, match="not layers of a 4-layer target"):
        EagleHead.from_eagle3(_write(tmp_path / "bad", w, _config(
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 1, 4]})), shallow)


def test_save_then_load_is_exact(tmp_path, target):
    for fc_norm in (False, True):
        w = _weights(3, fc_norm=fc_norm)
        cfg = _config(fc_norm=fc_norm or None, rope_theta=123.0,
                      rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 2.0,
                                    "original_max_position_embeddings": 16})
        head = EagleHead.from_eagle3(_write(tmp_path / f"a{fc_norm}", w, cfg), target)
        head.save_eagle3(tmp_path / f"b{fc_norm}")
        written = json.loads((tmp_path / f"b{fc_norm}" / "config.json").read_text())
        assert written["architectures"] == ["LlamaForCausalLMEagle3"]
        assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
        again = EagleHead.from_eagle3(tmp_path / f"b{fc_norm}", target)
        assert again.config == head.config
        a, b = head.state_dict(), again.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        from safetensors.torch import load_file
        saved = load_file(str(tmp_path / f"b{fc_norm}" / "model.safetensors"))
        assert saved.keys() == w.keys()
        assert all(torch.equal(saved[k], w[k]) for k in w)  # byte-identical layout


def test_head_follows_the_target_dtype_and_keeps_float32_rotary(tmp_path, target):
    folder = _write(tmp_path / "ck", _weights(4), _config())
    half = make_tiny_llama(V, seed=3, hidden_size=H, num_hidden_layers=N_LAYERS).to(
        torch.bfloat16)
    head = EagleHead.from_eagle3(folder, half)
    assert head.fc.weight.dtype == torch.bfloat16
    assert head.inv_freq.dtype == torch.float32
    torch.testing.assert_close(head.inv_freq, rope_inv_freq(head.config), atol=0, rtol=0)


def test_llama3_rope_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    ref = LlamaRotaryEmbedding(LlamaConfig(hidden_size=64, num_attention_heads=4,
                                           rope_theta=500000.0, rope_scaling=dict(scaling)))
    cfg = EagleHeadConfig(V, 64, 2, (1, 2), 8, num_attention_heads=4, num_key_value_heads=2,
                          rope_theta=500000.0, rope_scaling=scaling)
    ours = rope_inv_freq(cfg)
    plain = rope_inv_freq(EagleHeadConfig(V, 64, 2, (1, 2), 8, num_attention_heads=4,
                                          num_key_value_heads=2, rope_theta=500000.0))
    assert (ours != plain).sum() >= 4  # the scaled and the smoothed bands are exercised
    torch.testing.assert_close(ours, ref.inv_freq.float(), atol=0, rtol=1e-6)


# ---------------------------------------------------------------- refusals
def test_head_for_another_target_is_refused(tmp_path, target):
    folder = _write(tmp_path / "ck", _weights(5), _config())
    with pytest.raises(ValueError, match=r"another target.*vocab size 96 != target.s 128"):
        EagleHead.from_eagle3(folder, make_tiny_llama(128, num_hidden_layers=N_LAYERS))
    with pytest.raises(ValueError, match="target hidden size 32 != target's 48"):
        EagleHead.from_eagle3(folder, make_tiny_llama(V, hidden_size=48,
                                                      num_hidden_layers=N_LAYERS))
    narrow = _write(tmp_path / "narrow", _weights(5), _config(hidden_size=16,
                                                              target_hidden_size=H))
    with pytest.raises(ValueError, match="head hidden size 16 != target's 32"):
        EagleHead.from_eagle3(narrow, target)


@pytest.mark.parametrize("change, match", [
    (dict(config={"architectures": ["LlamaForCausalLM"]}), "not an EAGLE-3 checkpoint"),
    (dict(config={"num_hidden_layers": 2}), "2 decoder layers"),
    (dict(config={"norm_before_residual": True}), "variant not supported"),
    (dict(config={"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
     "rope_scaling type 'dynamic'"),
    (dict(config={"fc_norm": True}), r"lacks weights \['fc_norm.0.weight'"),
    (dict(add={"fc_norm.0.weight": torch.ones(H)}), "config.fc_norm is not true"),
    (dict(add={"midlayer.self_attn.q_proj.bias": torch.zeros(NH * D)}), "unknown EAGLE-3"),
    (dict(drop="norm.weight"), r"lacks weights \['norm.weight'\]"),
    (dict(add={"lm_head.weight": torch.zeros(VD, H + 1)}), "lm_head.weight has shape"),
    (dict(add={"t2d": torch.ones(V, dtype=torch.bool)}), "t2d disagrees"),
    (dict(add={"d2t": torch.zeros(VD, dtype=torch.long) + 60}), "d2t must hold distinct"),
])
def test_bad_checkpoints_are_value_errors(tmp_path, target, change, match):
    w = _weights(6)
    w.update(change.get("add", {}))
    w.pop(change.get("drop", "none"), None)
    folder = _write(tmp_path / "ck", w, {**_config(), **change.get("config", {})})
    with pytest.raises(ValueError, match=match):
        EagleHead.from_eagle3(folder, target)
