"""Heads small enough to commit: int8 weights in the published EAGLE-3 layout, a manifest of
SHA-256 sums, the target they belong to.

A shipped folder (``data/heads/<target-id>/`` in the repository) holds::

    manifest.json               the target's name and embedding fingerprint, the command that
                                rebuilds the folder, the quantisation, and per head its base
                                and the SHA-256 of each of its files
    <base>/config.json          a published EAGLE-3 config (``LlamaForCausalLMEagle3``)
    <base>/model.safetensors    every weight of the base head (the generalist)
    <name>/config.json          a specialist fine-tuned from the base with
    <name>/model.safetensors    ``TrainConfig.midlayer_only``: its decoder layer
                                (``midlayer.*``) only; ``fc``, ``norm``, ``lm_head``, ``d2t``
                                and ``t2d`` are the base's

Quantisation: every 2-D weight ``W`` (rows = output channels) is stored as int8 ``Q`` with one
float32 scale per row, ``s_r = max_j |W_rj| / 127``, ``Q = round(W / s)``, under
``<key>`` and ``<key>_scale`` (the names vLLM's compressed-tensors int8 checkpoints use); the
loader computes ``W' = Q * s``, so ``|W - W'| <= s_r / 2`` per entry. Norm weights and the
vocabulary maps are stored as they are (float16 norms).

:func:`load_shipped` refuses, by name, a folder for another target, a file whose SHA-256 is
not the manifest's, and a specialist whose base is missing. :func:`ship_heads` writes a new
folder next to the destination and renames it into place, so an interrupted export never
leaves a half-written folder behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch

from .eagle3 import CONFIG_FILE, WEIGHTS_FILE, eagle3_config, eagle3_head, eagle3_state
from .head import EagleHead
from .target_info import embedding_fingerprint, target_name

__all__ = ["MANIFEST", "dequantize_int8", "load_shipped", "quantize_int8", "ship_heads"]

MANIFEST = "manifest.json"
SCALE_SUFFIX = "_scale"
FORMAT = "hedgespec-heads/1"


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``(Q, s)`` with ``s_r = max_j |W_rj| / 127`` (1 for a zero row)
    and ``Q = round(W / s)`` in ``[-127, 127]``; ``s`` has shape ``(rows, 1)``, float32."""
    w = w.detach().float()
    scale = w.abs().amax(dim=1, keepdim=True) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``W' = Q * s`` (float32)."""
    return q.float() * scale.float()


def _stored(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Published weights -> what the file holds (2-D floats quantised, 1-D floats float16)."""
    out = {}
    for key, value in state.items():
        if value.is_floating_point() and value.dim() == 2:
            out[key], out[key + SCALE_SUFFIX] = quantize_int8(value)
        elif value.is_floating_point():
            out[key] = value.half()
        else:
            out[key] = value
    return out


def _restored(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of :func:`_stored` (float32 weights)."""
    out = {}
    for key, value in stored.items():
        if key.endswith(SCALE_SUFFIX):
            continue
        scale = stored.get(key + SCALE_SUFFIX)
        out[key] = dequantize_int8(value, scale) if scale is not None else \
            value.float() if value.is_floating_point() else value
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _who(name: str, fingerprint: str) -> str:
    return f"{name or 'an unnamed model'} (fingerprint {fingerprint})"


def _shared_keys(state: dict[str, torch.Tensor]) -> list[str]:
    """The published keys a midlayer-only specialist takes from its base."""
    return sorted(k for k in state if not k.startswith("midlayer."))


def ship_heads(heads: dict[str, EagleHead], out: str | os.PathLike, command: str,
               base: str = "general") -> dict:
    """Write ``heads`` (name -> head, all for one target) as a shipped folder at ``out``.

    Parameters
    ----------
    heads : dict
        Must hold ``base``; every other head must share the base's ``fc``, ``norm``,
        ``lm_head`` and draft vocabulary exactly (trained with ``midlayer_only`` from it).
    out : path
        Replaced as a whole (written beside it, then renamed into place).
    command : str
        The exact command that reproduces the heads, recorded in the manifest.

    Returns
    -------
    dict
        The manifest.

    Raises
    ------
    ValueError
        ``base`` missing, heads of different targets, a head that does not share the base's
        tensors (named).
    """
    if base not in heads:
        raise ValueError(f"no base head {base!r} among {sorted(heads)}")
    b = heads[base].config
    base_state = eagle3_state(heads[base])
    manifest = {"format": FORMAT, "target_name": b.target_name,
                "target_fingerprint": b.target_fingerprint, "command": command,
                "quantization": "int8, one float32 scale per output row (<key>_scale)",
                "heads": {}}
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    from safetensors.torch import save_file

    for name, head in heads.items():
        c = head.config
        if (c.target_name, c.target_fingerprint) != (b.target_name, b.target_fingerprint):
            raise ValueError(f"head {name!r} is for target "
                             f"{_who(c.target_name, c.target_fingerprint)}, the base for "
                             f"{_who(b.target_name, b.target_fingerprint)}")
        state = eagle3_state(head)
        if name != base:
            for key in _shared_keys(base_state):
                if key not in state or not torch.equal(state[key], base_state[key]):
                    raise ValueError(f"head {name!r} does not share {key} with {base!r}: "
                                     f"train it with midlayer_only from {base!r}")
            state = {k: v for k, v in state.items() if k.startswith("midlayer.")}
        folder = tmp / name
        folder.mkdir(parents=True)
        save_file(_stored(state), str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
        (folder / CONFIG_FILE).write_text(json.dumps(eagle3_config(head), indent=2,
                                                     sort_keys=True))
        manifest["heads"][name] = {
            "base": None if name == base else base,
            "sha256": {f: _sha256(folder / f) for f in (CONFIG_FILE, WEIGHTS_FILE)}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest


def load_shipped(folder: str | os.PathLike, target, names: list[str] | None = None,
                 dtype: torch.dtype | None = None) -> dict[str, EagleHead]:
    """The heads of a shipped folder (all, or ``names``), float32-dequantised, bound to
    ``target``, in eval mode, in ``dtype`` (default: the target's).

    ``dtype=torch.bfloat16`` halves the weight traffic that a head's step and the pool's
    batched evaluation cost on a CPU (docs/eagle.md, "The heads in bfloat16"): the dequantised
    ``Q * s`` is rounded once more, to 8 bits of mantissa; the target still verifies every
    draft, so only acceptance can change, never the output.

    Raises
    ------
    ValueError
        No manifest; a folder made for another target (its name and fingerprint named); a file
        missing or whose SHA-256 differs from the manifest's (named); an unknown head name; a
        specialist whose base is not in the folder; weights that do not make a head (as
        :func:`~.eagle3.load_eagle3`).
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise ValueError(f"{folder} has no {MANIFEST}: not a shipped heads folder")
    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{folder / MANIFEST} is format {manifest.get('format')!r}, "
                         f"this loader reads {FORMAT!r}")
    want = (target_name(target), embedding_fingerprint(target))
    have = (manifest["target_name"], manifest["target_fingerprint"])
    if want[1] != have[1]:
        raise ValueError(f"the heads in {folder} were trained for target {_who(*have)}, "
                         f"not {_who(*want)}")
    entries = manifest["heads"]
    unknown = sorted(set(names or ()) - set(entries))
    if unknown:
        raise ValueError(f"{folder} has no heads {unknown} (it has {sorted(entries)})")

    read: dict[str, dict[str, torch.Tensor]] = {}

    def weights(name: str) -> dict[str, torch.Tensor]:
        if name in read:
            return read[name]
        for file, digest in entries[name]["sha256"].items():
            path = folder / name / file
            if not path.is_file():
                raise ValueError(f"{path} is missing (listed in {folder / MANIFEST})")
            if _sha256(path) != digest:
                raise ValueError(f"{path} has SHA-256 {_sha256(path)[:16]}..., the manifest "
                                 f"says {digest[:16]}...: the file was changed")
        read[name] = _restored(load_file(str(folder / name / WEIGHTS_FILE)))
        return read[name]

    heads = {}
    for name in names or list(entries):
        base = entries[name]["base"]
        if base is not None and base not in entries:
            raise ValueError(f"head {name!r} in {folder} is built on {base!r}, which the "
                             f"folder lacks")
        state = weights(name)
        if base is not None:
            shared = weights(base)
            state = {**{k: shared[k] for k in _shared_keys(shared)}, **state}
        config = json.loads((folder / name / CONFIG_FILE).read_text())
        heads[name] = eagle3_head(config, state, target, EagleHead)
        if dtype is not None:
            heads[name].to(dtype)
        heads[name].config.extra["name"] = name
    return heads
