"""Where a served model's drafter pool lives: ``<cache_dir>/pool/<target-id>/``.

The pool is built by the application (``hedgespec train-drafters``) for a loaded
``(model, tokenizer)``; vLLM hands the proposer only the model folder. :func:`target_id` is the
one definition of the folder name, used by both (``spec_adapters.app.pool.cache`` calls it with the
loaded model's numbers, :func:`pool_folder` with the same numbers read from the folder).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from spec_adapters.store.location import default_cache_dir

__all__ = ["loaded_target_id", "pool_folder", "target_id"]


def target_id(model_class: str, name: str, vocab_size: int, hidden_size: int,
              num_layers: int, n_tokens: int) -> str:
    """Folder name of a target's pool: the model folder's *name* (not its path, so the same
    cache reached as ``.cache`` or as an absolute path is one pool) and a hash of its shape.

    Parameters
    ----------
    model_class : str
        The class ``AutoModelForCausalLM`` loads the folder as (``LlamaForCausalLM``).
    name : str
        The model folder's name.
    vocab_size, hidden_size, num_layers : int
        From the model's config.
    n_tokens : int
        ``len(tokenizer)`` (added tokens included).
    """
    key = json.dumps([model_class, name, vocab_size, hidden_size, num_layers, n_tokens])
    return f"{name[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def loaded_target_id(model, tokenizer) -> str:
    """:func:`target_id` of a loaded ``(model, tokenizer)``: the model folder's name from its
    config's ``name_or_path`` (the class name when it has none)."""
    cfg = model.config
    name = Path(str(getattr(cfg, "name_or_path", "") or type(model).__name__)).name
    return target_id(type(model).__name__, name, getattr(cfg, "vocab_size", 0),
                     getattr(cfg, "hidden_size", 0), getattr(cfg, "num_hidden_layers", 0),
                     len(tokenizer))


def pool_folder(model_folder: str | os.PathLike, cache_dir: str | os.PathLike | None = None
                ) -> Path:
    """``<cache_dir>/pool/<target-id>`` of the model saved in ``model_folder`` (which need not
    exist yet); ``cache_dir`` defaults to :func:`default_cache_dir`.

    Reads the folder's config and tokenizer (offline), as the application's pool code sees them
    once the model is loaded.

    Raises
    ------
    ValueError
        The folder holds no loadable config or tokenizer (then no pool can have been built).
    """
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    folder = Path(model_folder)
    try:
        cfg = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        n_tokens = len(AutoTokenizer.from_pretrained(str(folder), local_files_only=True))
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"{folder} has no loadable config and tokenizer: {err}") from err
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(cfg.model_type, type(cfg).__name__)
    name = target_id(model_class, folder.name, getattr(cfg, "vocab_size", 0),
                     getattr(cfg, "hidden_size", 0), getattr(cfg, "num_hidden_layers", 0),
                     n_tokens)
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / "pool" / name
