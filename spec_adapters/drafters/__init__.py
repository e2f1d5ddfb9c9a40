"""Drafters: transformers models, corpus n-grams, prompt lookup, suffix; point-mass drafters.

``base`` holds the :class:`Drafter` protocol of the transformers loop (distributions) and the
pool checks; ``hf`` the transformers drafters; ``ngram`` and ``suffix`` the model-free ones
(torch). ``point`` holds the point-mass drafters the vLLM and llama.cpp engines use
(:class:`PointDrafter`: tokens and a confidence each, numpy), over the compiled kernels of
``ngram_kernel`` and ``suffix_index`` (numba). EAGLE heads live in :mod:`spec_adapters.eagle`.
Names load on first use, so ``spec_adapters.drafters.point`` never imports torch.
"""

from spec_adapters.lazy import lazy_exports

__all__ = ["CorpusNGram", "Drafter", "HFDrafter", "NGramDrafter", "PointDrafter",
           "PromptLookup", "PromptLookupDrafter", "Proposal", "StackedHFDrafters",
           "SuffixDraft", "SuffixDrafter", "as_drafter", "check_k", "check_vocab",
           "expand_drafters", "propose_all"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "Drafter": "base", "check_k": "base", "check_vocab": "base",
    "HFDrafter": "hf", "StackedHFDrafters": "hf", "as_drafter": "hf", "expand_drafters": "hf",
    "NGramDrafter": "ngram", "PromptLookupDrafter": "ngram", "SuffixDrafter": "suffix",
    "CorpusNGram": "point", "PointDrafter": "point", "PromptLookup": "point",
    "Proposal": "point", "SuffixDraft": "point", "propose_all": "point",
})
