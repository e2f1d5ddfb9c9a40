"""The HedgeSpec round loop on transformers models (select -> draft -> verify -> evaluate ->
update) and its schemes.

``loop``: :class:`~spec_adapters.decoding.loop.RoundLoop`, the one loop; ``chain``: the
single-draft scheme and :class:`~spec_adapters.decoding.chain.HedgeSpecDecoder`;
``custom_generate``: :func:`generate`, the loop as ``model.generate(custom_generate=...)``.

The names load on first use (PEP 562): ``from spec_adapters.decoding import generate`` imports
neither torch nor transformers until the function is called.
"""

from __future__ import annotations

from spec_adapters.lazy import lazy_exports

_EXPORTS = {"GenerateOutput": "loop", "RoundInfo": "loop", "HedgeSpecDecoder": "chain",
            "generate": "custom_generate", "HedgeSpecGenerateOutput": "custom_generate",
            "PolicySettings": "settings"}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
