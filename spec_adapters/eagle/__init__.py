"""EAGLE-style draft heads, draft-tree decoding, tree gamma and the HedgeSpec tree decoder.

See docs/eagle.md. The names below load on first use (PEP 562), so that a torch-free module of
the package (``train_config``) can be imported without torch.
"""

from __future__ import annotations

from spec_adapters.lazy import lazy_exports

_EXPORTS = {"HedgeSpecDecoder": "decoder", "EagleHead": "head", "EagleHeadConfig": "head",
            "HeadPool": "pool", "TreeConfig": "tree"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
