"""EAGLE-style draft heads, draft-tree decoding, tree gamma and the HedgeSpec tree decoder.

See docs/eagle.md. The names below load on first use (PEP 562), so that a torch-free module of
the package (``train_config``) can be imported without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"HedgeSpecDecoder": "decoder", "EagleHead": "head", "EagleHeadConfig": "head",
            "HeadPool": "pool", "TreeConfig": "tree"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spec_adapters.eagle' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
