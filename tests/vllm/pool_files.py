"""Write the n-gram entries of one drafter pool as ``hedgespec train-drafters`` does (the
vLLM tests' helper, not a test): the application's own writer, ``<name>-<key>.npz`` plus its
sidecar of checksums, so the proposer reads what the application really writes."""

from __future__ import annotations

from pathlib import Path

from spec_adapters.store.pool_settings import NGramPoolSettings

USELESS = [[0, 1, 2]]  # the generalist's corpus when a test wants only its specialists to draft


def write_pool(folder: Path, vocab_size: int, docs: dict[str, list[list[int]]],
               general: list[list[int]] = USELESS, **settings) -> NGramPoolSettings:
    """One specialist per ``docs`` key (its domain) on ``docs[domain]`` and the generalist on
    ``general``, with ``settings`` (``NGramPoolSettings`` fields) for the rest; returns the
    pool's settings."""
    from spec_adapters.app.pool.builders import save_ngram
    from spec_adapters.app.pool.entries import Entry

    pool = NGramPoolSettings(domains=tuple(docs), **settings)
    folder.mkdir(parents=True, exist_ok=True)
    for name, st in pool.entries(vocab_size).items():
        corpus = general if name == "ngram-general" else docs[name.removeprefix("ngram-")]
        save_ngram(Entry(name, "ngram", st, folder), corpus, vocab_size, pool.ngram_order)
    return pool
