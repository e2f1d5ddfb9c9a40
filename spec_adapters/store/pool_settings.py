"""The n-gram entries of a drafter pool: their names and the settings they are keyed by.

``hedgespec train-drafters`` (``spec_adapters.app.pool.builders``) writes every n-gram drafter as
``ngram-<domain>-<key>.npz`` / ``ngram-general-<key>.npz`` with a sidecar ``<entry>.json``,
``<key>`` a hash of the entry's settings (:func:`spec_adapters.store.keys.entry_key`). This
module is the one definition of those settings, used by the application to write the entries
and by the vLLM proposer to find exactly the entries of one pool among pools of other settings
in the same folder.

The defaults are those of the pool ``hedgespec train-drafters`` builds without options
(``spec_adapters.app.pool.config.PoolConfig`` holds these settings as its ``ngram``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

__all__ = ["DOMAINS", "NGramPoolSettings"]

# the seven domains of the default pool, a specialist each (their data: hedgespec prepare-data)
DOMAINS: tuple[str, ...] = ("code", "math", "sql", "chemistry", "medicine", "biology", "news")


def _is_int(v, lo: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


@dataclass(frozen=True)
class NGramPoolSettings:
    """How a pool's n-gram drafters were built (what their entry names are keyed by).

    Attributes
    ----------
    domains : tuple of str
        The domains with a specialist (default :data:`DOMAINS`); the generalist is trained on
        their mix.
    ngram_order, max_train_tokens : int
        Longest context and training tokens per drafter (``--ngram-order``,
        ``--max-train-tokens``).
    distilled_tokens : int
        Tokens per domain of the target's own answers (``hedgespec distill``) added to each
        corpus (0: none).
    answer_weight : float
        Their count weight.
    context_weight : float
        The request's own n-grams (prompt and text so far) counted into every n-gram drafter's
        distribution, each occurrence this many corpus occurrences (REST + prompt lookup in
        one model; ``NGramDrafter(context_weight=...)``); 0: the corpus alone.

    Raises
    ------
    ValueError
        No domains or repeated ones, or a number out of its range.
    """

    domains: tuple[str, ...] = DOMAINS
    ngram_order: int = 4
    max_train_tokens: int = 300_000
    distilled_tokens: int = 50_000
    answer_weight: float = 1.0
    context_weight: float = 4.0

    def __post_init__(self) -> None:
        d = self.domains
        if not (isinstance(d, tuple) and d and all(isinstance(x, str) and x for x in d)
                and len(set(d)) == len(d)):
            raise ValueError(f"domains must be distinct non-empty names, got {d!r}")
        for name, lo in (("ngram_order", 1), ("max_train_tokens", 1), ("distilled_tokens", 0)):
            if not _is_int(getattr(self, name), lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got "
                                 f"{getattr(self, name)!r}")
        w = self.answer_weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 < w < math.inf:
            raise ValueError(f"answer_weight must be a finite number > 0, got {w!r}")
        object.__setattr__(self, "answer_weight", float(w))  # 20 and 20.0: one key
        c = self.context_weight
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c < math.inf:
            raise ValueError(f"context_weight must be a finite number >= 0, got {c!r}")
        object.__setattr__(self, "context_weight", float(c))

    @classmethod
    def from_mapping(cls, obj: Mapping) -> NGramPoolSettings:
        """From a JSON object (``domains`` a list); absent keys take their defaults.

        Raises
        ------
        ValueError
            Not an object, an unknown key, or a bad value.
        """
        if not isinstance(obj, Mapping):
            raise ValueError(f"expected an object, got {type(obj).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(obj) - set(known))
        if unknown:
            raise ValueError(f"unknown keys {unknown}; expected some of {known}")
        kw = dict(obj)
        if isinstance(kw.get("domains"), list):
            kw["domains"] = tuple(kw["domains"])
        return cls(**kw)

    def base(self, target_vocab: int) -> dict:
        """The settings every n-gram entry of the pool shares (the application's shard-trained
        extras add theirs to these)."""
        ans = {"distilled_tokens": self.distilled_tokens, "weight": self.answer_weight}
        return {"target_vocab": int(target_vocab), "order": self.ngram_order,
                "tokens": self.max_train_tokens, "answers": ans if self.distilled_tokens
                else None, "context_weight": self.context_weight}

    def entries(self, target_vocab: int) -> dict[str, dict]:
        """Entry name -> settings: the specialists in ``domains`` order, then the generalist
        (an equal share of every domain, the budget of one specialist)."""
        base = self.base(target_vocab)
        out = {f"ngram-{d}": {**base, "domain": d} for d in self.domains}
        out["ngram-general"] = {**base, "domains": list(self.domains)}
        return out

    def union(self, target_vocab: int) -> dict:
        """Settings of the union baseline ``ngram-union``: every domain's text and answers in
        one model (what a user would try instead of selecting; not a selectable member)."""
        return {**self.base(target_vocab), "union": list(self.domains)}
