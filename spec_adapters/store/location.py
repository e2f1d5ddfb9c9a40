"""Where the cache lives: ``$HEDGESPEC_CACHE`` if set, else ``./.cache``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "default_cache_dir"]

CACHE_ENV = "HEDGESPEC_CACHE"


def default_cache_dir() -> Path:
    """``$HEDGESPEC_CACHE`` if set, else ``./.cache`` (the repository's gitignored cache), as
    an absolute path (a worker process started elsewhere finds the same folder)."""
    return Path(os.environ.get(CACHE_ENV, ".cache")).resolve()
