"""HedgeSpec on llama.cpp (ENGINE ADAPTER 3): a GGUF target through llama-cpp-python's C API
(``target``) and the round loop over the selection core (``decoder``). llama-cpp-python is
imported when a target is built, not with this package."""

from __future__ import annotations

from spec_adapters.lazy import lazy_exports

_EXPORTS = {"GGUFTarget": "target", "LlamaCppDecoder": "decoder", "plain_generate": "decoder"}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
