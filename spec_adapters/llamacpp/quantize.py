"""Another weight type for a GGUF model: what a drafted row costs, and what the model loses.

In llama.cpp the weight type decides the price of a speculative round's extra rows as much as
the CPU does: some types reach batched kernels (llamafile's tiled matmul, the repacked Q4_0 /
Q4_K / IQ4_NL layouts) that turn a second row into a few per cent of a step, others pay most
of a step per row (docs/benchmark.md, "What a row costs, per weight type").
:func:`quantize` writes a GGUF in another type with llama.cpp's own quantizer
(``llama_model_quantize``); :func:`perplexity` measures what the change costs the model.

A file re-quantized from an already quantized one (SmolLM2 ships only Q4_1) is a different
model, not a faster copy: its greedy text differs from the shipped file's, and its perplexity
on held-out text (:func:`perplexity`, against the shipped file's) is its quality cost. Every
speed comparison is against plain decoding *of the same file*.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spec_adapters.llamacpp.cpu_backend import llama_cpp_module
from spec_adapters.llamacpp.native_log import captured
from spec_adapters.llamacpp.target import GGUFTarget

__all__ = ["WEIGHT_TYPES", "perplexity", "quantize", "source_of", "weight_type_of"]

# the types a user meets, as llama-quantize names them -> llama.cpp's file type constant
WEIGHT_TYPES = {
    "F16": "LLAMA_FTYPE_MOSTLY_F16", "BF16": "LLAMA_FTYPE_MOSTLY_BF16",
    "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M", "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "Q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
    "IQ4_NL": "LLAMA_FTYPE_MOSTLY_IQ4_NL",
}


def quantize(source: str | os.PathLike, dest: str | os.PathLike, weight_type: str,
             threads: int = 2) -> Path:
    """Write ``source`` (a GGUF) as ``dest`` in ``weight_type`` (a key of
    :data:`WEIGHT_TYPES`), re-quantizing already quantized weights (allowed: see the module
    docstring). Written beside ``dest`` and renamed into place: ``dest`` is complete or
    absent. A sidecar ``<dest>.json`` names the source (:func:`source_of`): the same
    tokenizer, so the same drafter pool.

    Raises
    ------
    ValueError
        An unknown type, a missing source, or llama.cpp's quantizer failing.
    """
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"unknown weight type {weight_type!r}; one of "
                         f"{', '.join(WEIGHT_TYPES)}")
    source, dest = Path(source), Path(dest)
    if not source.is_file():
        raise ValueError(f"GGUF file {source} does not exist")
    lc = llama_cpp_module()
    params = lc.llama_model_quantize_default_params()
    params.ftype = getattr(lc, WEIGHT_TYPES[weight_type])
    params.nthread = int(threads)
    params.allow_requantize = True
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        with captured() as log:  # a warning per tensor whose rows the type cannot hold
            rc = lc.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise ValueError(f"llama.cpp could not quantize {source} to {weight_type} "
                             f"({rc}){log.detail()}")
        tmp.replace(dest)
        dest.with_name(dest.name + ".json").write_text(json.dumps(
            {"source": str(source.resolve()), "weight_type": weight_type}))
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return dest


def weight_type_of(path: str | os.PathLike) -> str | None:
    """The file's weight type (its ``general.file_type``) as a key of :data:`WEIGHT_TYPES`;
    ``None`` when it is another or unrecorded."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    if field is None:
        return None
    code = int(field.parts[field.data[0]][0])
    lc = llama_cpp_module()
    return next((t for t, name in WEIGHT_TYPES.items() if getattr(lc, name) == code), None)


def source_of(path: str | os.PathLike) -> Path | None:
    """The GGUF that :func:`quantize` wrote ``path`` from (its sidecar), ``None`` for a file it
    did not write or whose source is gone."""
    sidecar = Path(path).with_name(Path(path).name + ".json")
    try:
        source = Path(json.loads(sidecar.read_text())["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if source.is_file() else None


def perplexity(target: GGUFTarget, texts: Sequence[Sequence[int]], window: int = 256
               ) -> float:
    """``exp`` of the mean negative log-likelihood the model gives each next token of
    ``texts`` (token lists, each read from its start in windows of ``window`` tokens, as
    llama-perplexity reads a file; a window's first token is context only).

    .. math:: \\mathrm{PPL} = \\exp\\Big(-\\frac{1}{T}\\sum_t \\log p(x_t \\mid x_{<t})\\Big)

    Raises
    ------
    ValueError
        No text with two tokens or more, or ``window < 2``.
    """
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    nll, count = 0.0, 0
    for text in texts:
        for lo in range(0, len(text) - 1, window - 1):
            chunk = [int(t) for t in text[lo:lo + window]]
            if len(chunk) < 2:
                break
            target.reset()
            logits = target.step(chunk)[:-1].astype(np.float64)
            top = logits.max(1, keepdims=True)
            logz = top[:, 0] + np.log(np.exp(logits - top).sum(1))
            nll += float((logz - logits[np.arange(len(chunk) - 1), chunk[1:]]).sum())
            count += len(chunk) - 1
    if not count:
        raise ValueError("perplexity needs a text of two tokens or more")
    return float(np.exp(nll / count))
