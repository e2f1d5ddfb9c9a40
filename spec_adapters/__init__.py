"""torch + transformers side of HedgeSpec: drafters, acceptance, estimators, decoders.

The public names below are loaded on first access (PEP 562), so ``import spec_adapters`` and
its light helpers (``spec_adapters.hf.models``, ``spec_adapters.app.domains``) do not import torch
or
the decoders until a name is used::

    from spec_adapters import HedgeSpecDecoder, NGramDrafter   # drafters or EAGLE heads
    from spec_adapters.eagle import EagleHead, TreeConfig

See docs/architecture.md.
"""

from __future__ import annotations

from spec_adapters.lazy import lazy_exports

# public name -> submodule defining it
_EXPORTS = {
    "HedgeSpecDecoder": "decoding.chain",
    "GenerateOutput": "decoding.chain",
    "Drafter": "drafters",
    "HFDrafter": "drafters",
    "StackedHFDrafters": "drafters",
    "NGramDrafter": "drafters.ngram",
    "PromptLookupDrafter": "drafters.ngram",
    "SamplingConfig": "core.sampling",
    "speculative_accept": "core.sampling",
    "tree_accept": "core.sampling",
    "acceptance_probability": "core.acceptance",
    "tree_acceptance": "core.acceptance",
    "greedy_tree_acceptance": "core.acceptance",
    "paper_acceptance_length": "core.estimators",
    "corrected_acceptance_length": "core.estimators",
    "realized_ratio": "core.estimators",
    "tap_loss": "core.estimators",
    "eal_loss": "core.estimators",
    "make_policy": "selection.policies",
    "TargetModel": "hf.target",
    "load_target": "hf.models",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
