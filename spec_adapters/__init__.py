"""torch + transformers side of HedgeSpec: drafters, acceptance, estimators, decoders.

The public names below are loaded on first access (PEP 562), so ``import spec_adapters`` and
its light helpers (``spec_adapters.models``, ``spec_adapters.domains``) do not import torch or
the decoders until a name is used::

    from spec_adapters import HedgeSpecDecoder, NGramDrafter   # single-draft decoder
    from spec_adapters.eagle import HedgeSpecDecoder as EagleDecoder, TreeConfig

See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> submodule defining it
_EXPORTS = {
    "HedgeSpecDecoder": "single",
    "GenerateOutput": "single",
    "Drafter": "drafters",
    "HFDrafter": "drafters",
    "StackedHFDrafters": "drafters",
    "NGramDrafter": "ngram",
    "PromptLookupDrafter": "ngram",
    "SamplingConfig": "sampling",
    "speculative_accept": "sampling",
    "tree_accept": "sampling",
    "acceptance_probability": "acceptance",
    "tree_acceptance": "acceptance",
    "greedy_tree_acceptance": "acceptance",
    "paper_acceptance_length": "estimators",
    "corrected_acceptance_length": "estimators",
    "realized_ratio": "estimators",
    "tap_loss": "estimators",
    "eal_loss": "estimators",
    "make_policy": "policies",
    "TargetModel": "target",
    "load_target": "models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spec_adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
