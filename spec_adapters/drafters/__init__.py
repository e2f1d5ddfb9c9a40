"""Drafters behind one protocol: transformers models, corpus n-grams, prompt lookup.

``base`` holds the :class:`Drafter` protocol and the pool checks; ``hf`` the transformers
drafters; ``ngram`` the model-free ones. EAGLE heads live in :mod:`spec_adapters.eagle`.
"""

from spec_adapters.drafters.base import Drafter, check_k, check_vocab
from spec_adapters.drafters.hf import HFDrafter, StackedHFDrafters, as_drafter, expand_drafters
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter

__all__ = ["Drafter", "HFDrafter", "NGramDrafter", "PromptLookupDrafter", "StackedHFDrafters",
           "as_drafter", "check_k", "check_vocab", "expand_drafters"]
