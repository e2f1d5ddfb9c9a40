"""Who a head was trained for: the target's name and a fingerprint of its embeddings."""

from __future__ import annotations

import hashlib

import torch

__all__ = ["embedding_fingerprint", "short_name", "target_name"]


def embedding_fingerprint(target) -> str:
    """A short hash of the target's input embedding table (rounded to 1e-3), so a head cannot
    be bound to a different model that happens to share the architecture."""
    w = target.get_input_embeddings().weight.detach()
    rows = w[: min(64, w.shape[0])].double().cpu()
    q = torch.round(rows * 1000).to(torch.int64).numpy().tobytes()
    return hashlib.sha256(q).hexdigest()[:16]


def target_name(target) -> str:
    """The target's name: the last component of ``name_or_path`` (a hub id's model name or a
    local folder's name), so a head does not depend on where the target is stored."""
    name = str(getattr(target.config, "_name_or_path", "") or getattr(target, "name_or_path", "")
               or "")
    return short_name(name)


def short_name(name: str) -> str:
    return name.replace("\\", "/").rstrip("/").split("/")[-1]
