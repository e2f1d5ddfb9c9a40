"""Names of cached entries: what an entry is, plus a short hash of the settings it was built with.

An entry built with other settings has another name, so entries of different settings coexist
in one folder and a reader that knows the settings it wants finds exactly its own entries (the
drafter pool: ``spec_adapters.app.pool.entries`` names them, the vLLM proposer reads them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

__all__ = ["entry_key"]


def entry_key(name: str, settings: Mapping) -> str:
    """``<name>-<h>``: ``h`` the first 10 hex digits of the SHA-256 of ``settings`` as JSON
    with sorted keys (so the key does not depend on the order the settings were given in).

    Parameters
    ----------
    name : str
        What the entry is (``"ngram-code"``).
    settings : mapping
        JSON-serialisable settings it was built with.

    Returns
    -------
    str
        For example ``"ngram-code-8d85a178a8"``.
    """
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    return f"{name}-{h[:10]}"
