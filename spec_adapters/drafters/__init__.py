"""Drafters behind one protocol: transformers models, corpus n-grams, prompt lookup, suffix.

``base`` holds the :class:`Drafter` protocol and the pool checks; ``hf`` the transformers
drafters; ``ngram`` and ``suffix`` the model-free ones. EAGLE heads live in
:mod:`spec_adapters.eagle`.
"""

from spec_adapters.drafters.base import Drafter, check_k, check_vocab
from spec_adapters.drafters.hf import HFDrafter, StackedHFDrafters, as_drafter, expand_drafters
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.suffix import SuffixDrafter

__all__ = ["Drafter", "HFDrafter", "NGramDrafter", "PromptLookupDrafter", "StackedHFDrafters",
           "SuffixDrafter", "as_drafter", "check_k", "check_vocab", "expand_drafters"]
