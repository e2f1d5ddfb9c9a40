"""Where the repository's shipped EAGLE heads live: ``data/heads/<target-id>/``, one folder per
target as for the distilled answers (``spec_adapters.eagle.shipped`` writes and reads it)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_heads_folder", "shipped_heads_root"]


def shipped_heads_root() -> Path:
    """The repository's committed heads (``data/heads``)."""
    return Path(__file__).resolve().parents[2] / "data" / "heads"


def shipped_heads_folder(model, tokenizer) -> Path:
    """``data/heads/<target-id>``: the shipped heads of this target (whether or not they
    exist; :func:`~spec_adapters.eagle.shipped.load_shipped` says what is wrong with it)."""
    from spec_adapters.app.distill.answers import answers_folder

    return answers_folder(shipped_heads_root(), model, tokenizer)
