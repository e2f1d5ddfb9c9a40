"""The model-free pool of the engines that take point-mass drafters (llama.cpp): prompt lookup
(n = 1..4), the suffix drafter with its memory of finished requests, the cached pool's
n-gram specialists read as point masses, and their consensus (the majority path of their
drafts)."""

from __future__ import annotations

from pathlib import Path

from spec_adapters.drafters.point import Consensus, PointDrafter, PromptLookup, SuffixDraft
from spec_adapters.store.pool_settings import NGramPoolSettings

__all__ = ["PROMPT_LOOKUP_SIZES", "point_pool"]

PROMPT_LOOKUP_SIZES = (1, 2, 3, 4)


def point_pool(folder: str | Path, vocab_size: int,
               settings: NGramPoolSettings | None = None,
               consensus: bool = True) -> list[PointDrafter]:
    """Prompt lookup (:data:`PROMPT_LOOKUP_SIZES`), the suffix drafter, then the n-gram drafters
    of the pool ``folder`` (``<cache>/pool/<target id>``, built by ``hedgespec demo`` /
    ``train-drafters``) built with ``settings`` (default: ``train-drafters``' defaults), and
    last (``consensus``) the :class:`~spec_adapters.drafters.point.Consensus` of them all.

    Raises
    ------
    ValueError
        ``folder`` holds no complete n-gram pool, or one over another vocabulary.
    """
    from spec_adapters.drafters.pool_folder import load_pool_folder

    pool = [*(PromptLookup(n) for n in PROMPT_LOOKUP_SIZES), SuffixDraft(),
            *load_pool_folder(folder, vocab_size, settings)]
    return [*pool, Consensus(pool)] if consensus else pool
