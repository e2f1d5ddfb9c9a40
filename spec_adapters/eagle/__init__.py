"""EAGLE-style draft heads, draft trees, tree gamma and the tree scheme of the round loop;
heads as chain drafters in a mixed pool (:class:`~.chain.HeadDrafters`).

See docs/eagle.md. The names below load on first use (PEP 562), so that a torch-free module of
the package (``train_config``) can be imported without torch. ``HedgeSpecDecoder`` is
:class:`spec_adapters.decoding.HedgeSpecDecoder` (the one decoder: a pool of heads runs draft
trees, :func:`spec_adapters.eagle.decoder.tree_scheme`, registered below).
"""

from __future__ import annotations

from spec_adapters.decoding.schemes import register_scheme
from spec_adapters.lazy import lazy_exports

register_scheme("spec_adapters.eagle.head.EagleHead", "spec_adapters.eagle.decoder:tree_scheme")

_EXPORTS = {"HedgeSpecDecoder": "decoder", "EagleHead": "head", "EagleHeadConfig": "head",
            "HeadDrafters": "chain", "HeadPool": "pool", "TreeConfig": "tree"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
