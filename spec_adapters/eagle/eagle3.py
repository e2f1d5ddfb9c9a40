"""EAGLE-3 draft-head checkpoints in the published format, read and written.

The format is SafeAILab/EAGLE's ``LlamaForCausalLMEagle3`` (``eagle/model/cnets.py``, class
``Model``), which SpecForge trains (``specforge/modeling/draft/llama3_eagle.py``) and vLLM
(``llama_eagle3.py``) and SGLang serve. A checkpoint folder holds

``config.json``
    ``architectures: ["LlamaForCausalLMEagle3"]``, ``num_hidden_layers: 1``, ``hidden_size``,
    ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``, optional
    ``head_dim``, ``rms_norm_eps``, ``vocab_size`` (the target's), ``draft_vocab_size``,
    optional ``target_hidden_size`` (``fc`` reads ``3 * target_hidden_size``), optional
    ``rope_theta`` (EAGLE falls back to 10000) and ``rope_scaling``, SpecForge's optional
    ``eagle_config.eagle_aux_hidden_state_layer_ids`` and EAGLE-3.1's optional ``fc_norm`` /
    ``norm_output`` flags;
``model.safetensors`` (or ``model.safetensors.index.json`` shards, or ``pytorch_model.bin``)
    bias-free ``fc.weight [H, 3H]``; ``midlayer.self_attn.{q,k,v}_proj.weight`` (input ``2H``),
    ``midlayer.self_attn.o_proj.weight``; ``midlayer.mlp.{gate,up,down}_proj.weight``;
    ``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight``;
    ``norm.weight``; ``lm_head.weight [draft_vocab, H]``; the buffers ``d2t`` (int64 offsets:
    target id = draft id + ``d2t[draft id]``) and ``t2d`` (bool over the target vocabulary);
    optionally ``embed_tokens.weight`` (SpecForge exports a copy of the target's table) and
    EAGLE-3.1's ``fc_norm.{i}.weight`` (one RMS norm per fused target layer, before ``fc``).

The head computes exactly :class:`~spec_adapters.eagle.head.EagleHead`'s equations, so loading
is a renaming of keys plus ``d2t`` offsets -> absolute ids. Feature layers: the
``output_hidden_states`` indices ``2, N//2, N-3`` (the inputs of those decoder layers, EAGLE's
capture rule) unless SpecForge's ``eagle_aux_hidden_state_layer_ids`` names layers, whose
*outputs* are captured (SGLang adds 1), i.e. indices ``id + 1``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .target_info import embedding_fingerprint, target_name

__all__ = ["ARCHITECTURE", "eagle3_config", "eagle3_head", "eagle3_state", "load_eagle3",
           "save_eagle3"]

ARCHITECTURE = "LlamaForCausalLMEagle3"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

# published key -> EagleHead state-dict key (fc_norm.{i}.weight keep their names)
_RENAME = {
    "fc.weight": "fc.weight",
    "midlayer.input_layernorm.weight": "norm_e.weight",
    "midlayer.hidden_norm.weight": "norm_h.weight",
    "midlayer.self_attn.q_proj.weight": "q_proj.weight",
    "midlayer.self_attn.k_proj.weight": "k_proj.weight",
    "midlayer.self_attn.v_proj.weight": "v_proj.weight",
    "midlayer.self_attn.o_proj.weight": "o_proj.weight",
    "midlayer.post_attention_layernorm.weight": "norm_post.weight",
    "midlayer.mlp.gate_proj.weight": "gate_proj.weight",
    "midlayer.mlp.up_proj.weight": "up_proj.weight",
    "midlayer.mlp.down_proj.weight": "down_proj.weight",
    "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}
# config flags of EAGLE-3 variants this head does not compute (value that would be wrong)
_UNSUPPORTED = {"norm_before_residual": True, "norm_before_fc": True, "attention_bias": True,
                "mlp_bias": True}


def eagle3_feature_layers(config: dict, num_target_layers: int) -> tuple[int, ...]:
    """The ``output_hidden_states`` indices an EAGLE-3 checkpoint fuses, in the order ``fc``
    reads them.

    Distinct layers are fused in layer order, as vLLM and SGLang capture them (``if idx in
    aux_layers`` while running the layers). Coinciding layers (a shallow target: ``2, N//2,
    N-3`` is ``2, 2, 1`` for ``N = 4``) are fused as listed, the same layer twice: that is what
    SpecForge's transformers backend trains (it asserts three layers and gathers
    ``hidden_states[id + 1]`` for each listed id), and the only trainer whose ``fc`` reads
    three features there; vLLM's capture would hand such a head two (docs/eagle.md).
    """
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    N = int(num_target_layers)
    layers = [int(i) + 1 for i in ids] if ids else [2, N // 2, N - 3]
    if not all(0 <= i <= N for i in layers):
        raise ValueError(f"EAGLE-3 feature layers {layers} are not layers of a {N}-layer "
                         f"target (output_hidden_states indices 0..{N})")
    return tuple(sorted(layers) if len(set(layers)) == len(layers) else layers)


def _config(cfg: dict, target, config_class: type):
    """Validate an EAGLE-3 ``config.json`` against ``target`` -> a ``config_class``
    (:class:`~spec_adapters.eagle.head.EagleHeadConfig`)."""
    if ARCHITECTURE not in (cfg.get("architectures") or ()):
        raise ValueError(f"not an EAGLE-3 checkpoint: architectures "
                         f"{cfg.get('architectures')} lack {ARCHITECTURE!r}")
    if cfg.get("num_hidden_layers", 1) != 1:
        raise ValueError(f"EAGLE-3 head with {cfg['num_hidden_layers']} decoder layers: only "
                         "the one-layer head (midlayer) is supported")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {cfg['hidden_act']!r} is not supported (silu only)")
    bad = [k for k, v in _UNSUPPORTED.items() if cfg.get(k) == v]
    if (cfg.get("eagle_config") or {}).get("use_aux_hidden_state") is False:
        bad.append("eagle_config.use_aux_hidden_state=false")
    if bad:
        raise ValueError(f"EAGLE-3 variant not supported: {bad}")
    c = target.config
    V = int(target.get_input_embeddings().weight.shape[0])
    H = int(c.hidden_size)
    problems = []
    if int(cfg["vocab_size"]) != V:
        problems.append(f"vocab size {cfg['vocab_size']} != target's {V}")
    target_h = int(cfg.get("target_hidden_size") or cfg["hidden_size"])
    if target_h != H:
        problems.append(f"target hidden size {target_h} != target's {H}")
    elif int(cfg["hidden_size"]) != H:
        problems.append(f"head hidden size {cfg['hidden_size']} != target's {H} (a head "
                        "narrower than its target needs its own embedding table: unsupported)")
    own = cfg.get("hedgespec") or {}
    if not problems and own.get("target_fingerprint") and \
            own["target_fingerprint"] != embedding_fingerprint(target):
        problems.append("embedding fingerprint differs (saved for another target)")
    if problems:
        raise ValueError("this EAGLE-3 head was trained for another target: "
                         + "; ".join(problems))
    return config_class(
        target_vocab_size=V,
        hidden_size=H,
        target_num_layers=int(c.num_hidden_layers),
        feature_layers=eagle3_feature_layers(cfg, c.num_hidden_layers),
        draft_vocab_size=int(cfg.get("draft_vocab_size") or V),
        num_attention_heads=int(cfg["num_attention_heads"]),
        num_key_value_heads=int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),
        intermediate_size=int(cfg["intermediate_size"]),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta") or 10000.0),
        head_dim=cfg.get("head_dim"),
        rope_scaling=cfg.get("rope_scaling"),
        fc_norm=bool(cfg.get("fc_norm", False)),
        norm_output=bool(cfg.get("norm_output", False)),
        target_name=target_name(target),
        target_fingerprint=embedding_fingerprint(target),
        extra={"format": "eagle3"},
    )


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if (path / WEIGHTS_FILE).is_file():
        return load_file(str(path / WEIGHTS_FILE))
    index = path / (WEIGHTS_FILE + ".index.json")
    if index.is_file():
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            state.update(load_file(str(path / shard)))
        return state
    if (path / "pytorch_model.bin").is_file():  # EAGLE's own releases; tensors only
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise ValueError(f"{path} has no {WEIGHTS_FILE}, shard index or pytorch_model.bin")


def _check_embeddings(table: torch.Tensor, target) -> None:
    """SpecForge's exported ``embed_tokens`` must be the target's (frozen) table."""
    ours = target.get_input_embeddings().weight.detach()
    if tuple(table.shape) != tuple(ours.shape):
        raise ValueError(f"embed_tokens.weight {tuple(table.shape)} != the target's "
                         f"{tuple(ours.shape)}")
    rows = torch.linspace(0, ours.shape[0] - 1, min(256, ours.shape[0])).long()
    a, b = table[rows].float(), ours[rows.to(ours.device)].float().cpu()
    # checkpoints are often fp16 / bf16 copies: allow one rounding step of bfloat16
    if not torch.allclose(a, b, rtol=2.0 ** -7, atol=1e-6):
        raise ValueError("embed_tokens.weight differs from the target's input embeddings: the "
                         "head was trained for another target or with its own (trained) "
                         "embeddings, which this head does not support")


def load_eagle3(path: str | os.PathLike, target, head_class: type) -> torch.nn.Module:
    """Load a published-format EAGLE-3 head for ``target``, bound to it.

    Parameters
    ----------
    path : folder with ``config.json`` and the weights (see the module docstring).
    target : transformers causal LM the head was trained for.
    head_class : type
        :class:`~spec_adapters.eagle.head.EagleHead` (passed in by
        ``EagleHead.from_eagle3``, so this module does not import the head module).

    Returns
    -------
    EagleHead
        On the target's device and in its dtype, in eval mode, bound to its embeddings.

    Raises
    ------
    ValueError
        Not an EAGLE-3 checkpoint; a variant whose computation differs (more layers,
        ``norm_before_residual``, biases, unsupported ``rope_scaling``); a head for another
        target (vocabulary, hidden size, embedding table); missing, unknown or misshapen
        weights; ``d2t`` / ``t2d`` inconsistent.
    """
    path = Path(path)
    if not (path / CONFIG_FILE).is_file():
        raise ValueError(f"{path} has no {CONFIG_FILE}: not an EAGLE-3 checkpoint")
    return eagle3_head(json.loads((path / CONFIG_FILE).read_text()), _read_weights(path),
                       target, head_class)


def eagle3_head(config: dict, state: dict[str, torch.Tensor], target,
                head_class: type) -> torch.nn.Module:
    """The head a published-format ``config`` (``config.json``'s contents) and ``state`` (its
    weights, published names) describe, bound to ``target``: :func:`load_eagle3` once the
    files are read (the shipped heads, :mod:`.shipped`, assemble ``state`` themselves).
    Raises ``ValueError`` as :func:`load_eagle3` does."""
    cfg = _config(config, target, head_class.config_class)
    state = dict(state)
    if "embed_tokens.weight" in state:
        _check_embeddings(state.pop("embed_tokens.weight"), target)
    Vd, V = cfg.draft_vocab_size, cfg.target_vocab_size
    offsets = state.pop("d2t", None)
    if offsets is None and Vd != V:
        raise ValueError("d2t missing although draft_vocab_size < vocab_size")
    if offsets is not None and offsets.numel() != Vd:
        raise ValueError(f"d2t has {offsets.numel()} entries, draft_vocab_size is {Vd}")
    d2t = torch.arange(Vd) + (0 if offsets is None else offsets.long().view(-1))
    head = head_class(cfg, d2t=d2t)  # checks d2t: distinct target ids in range
    t2d = state.pop("t2d", None)
    if t2d is not None:
        want = torch.zeros(V, dtype=torch.bool)
        want[d2t] = True
        if t2d.shape != (V,) or not torch.equal(t2d.bool(), want):
            raise ValueError("t2d disagrees with d2t (not the indicator of the draft "
                             "vocabulary's target ids)")
    expected = head.state_dict()
    renamed, unknown = {}, []
    for key, value in state.items():
        ours = _RENAME.get(key, key if key.startswith("fc_norm.") else None)
        if ours is None or ours not in expected:
            unknown.append(key)
        else:
            renamed[ours] = value
    if unknown:
        hint = " (fc_norm weights but config.fc_norm is not true)" \
            if any(k.startswith("fc_norm.") for k in unknown) else ""
        raise ValueError(f"unknown EAGLE-3 weights {sorted(unknown)}{hint}")
    inverse = {v: k for k, v in _RENAME.items()}
    missing = sorted(inverse.get(k, k) for k in expected if k not in renamed and k != "d2t")
    if missing:
        raise ValueError(f"EAGLE-3 checkpoint lacks weights {missing}")
    for key, value in renamed.items():
        if value.shape != expected[key].shape:
            raise ValueError(f"{inverse.get(key, key)} has shape {tuple(value.shape)}, this "
                             f"config needs {tuple(expected[key].shape)}")
    head.load_state_dict({**renamed, "d2t": d2t}, strict=True)
    p = next(target.parameters())
    return head.to(device=p.device, dtype=p.dtype).eval().bind(target)


def save_eagle3(head: torch.nn.Module, path: str | os.PathLike) -> None:
    """Write ``head`` as a published-format EAGLE-3 checkpoint (``config.json`` +
    ``model.safetensors``, no ``embed_tokens``), loadable by EAGLE, SpecForge, vLLM, SGLang
    and :func:`load_eagle3` (exactly: same weights, same outputs).

    The feature layers are written as SpecForge's ``eagle_config.
    eagle_aux_hidden_state_layer_ids`` (``index - 1``); EAGLE's own loader ignores that field
    and uses ``2, N//2, N-3``. ``hedgespec`` holds the target's name and fingerprint (other
    loaders ignore unknown config keys).
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(eagle3_state(head), str(path / WEIGHTS_FILE), metadata={"format": "pt"})
    (path / CONFIG_FILE).write_text(json.dumps(eagle3_config(head), indent=2, sort_keys=True))


def eagle3_config(head: torch.nn.Module) -> dict:
    """``head``'s published ``config.json`` (see :func:`save_eagle3`)."""
    c = head.config
    cfg = {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "hidden_size": c.hidden_size,
        "target_hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling,
        "max_position_embeddings": 2048,
        "vocab_size": c.target_vocab_size,
        "draft_vocab_size": c.draft_vocab_size,
        "tie_word_embeddings": False,
        "pretraining_tp": 1,
        "torch_dtype": str(head.fc.weight.dtype).removeprefix("torch."),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in c.feature_layers]},
        "hedgespec": {"target_name": c.target_name, "target_fingerprint": c.target_fingerprint},
    }
    if c.fc_norm:
        cfg["fc_norm"] = True
    if c.norm_output:
        cfg["norm_output"] = True
    return cfg


def eagle3_state(head: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``head``'s weights under their published names, with ``d2t`` as offsets and ``t2d``
    (contiguous CPU tensors, what ``model.safetensors`` holds)."""
    c = head.config
    inverse = {v: k for k, v in _RENAME.items()}
    state = {inverse.get(k, k): v for k, v in head.state_dict().items() if k != "d2t"}
    d2t = head.d2t.detach().cpu()
    state["d2t"] = d2t - torch.arange(c.draft_vocab_size)
    t2d = torch.zeros(c.target_vocab_size, dtype=torch.bool)
    t2d[d2t] = True
    state["t2d"] = t2d
    return {k: v.detach().contiguous().cpu() for k, v in state.items()}
