"""The decoders' policy settings, in one object (no torch: ``custom_generate`` reads its
defaults without loading the loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PolicySettings"]


@dataclass(frozen=True)
class PolicySettings:
    """How the learner chooses and what it learns from; one object for every decoder.

    Attributes
    ----------
    policy : str or learner, default "normalhedge"
        See :func:`spec_adapters.selection.policies.make_policy`; also ``"oracle"`` (runs every
        drafter fixed and returns the run with the best mean accepted tokens; for benchmarks).
    loss : {"eal", "tap"}, default "eal"
        Expected-acceptance-length or token-acceptance-probability loss (Theorem 3).
    delay : {"onarrival", "qpmd", "bold"}, default "onarrival"
        Delayed-feedback reduction around full-information learners.
    carry_state : bool, default False
        Keep the learner's state across ``generate`` calls instead of resetting it per query.
    cost_aware : bool, default False
        Learn the draft length too: the experts are ``(drafter, k)``, ``k = 0 .. K``, with the
        time-per-token loss of :mod:`spec_adapters.selection.experts` from step costs measured
        online (kept across ``generate`` calls in :attr:`RoundLoop.costs`). Needs a
        full-information policy; ``False`` is the paper's acceptance-only loss (``loss``) with
        ``k = K``.
    """

    policy: Any = "normalhedge"
    loss: str = "eal"
    delay: str = "onarrival"
    carry_state: bool = False
    cost_aware: bool = False

    @classmethod
    def of(cls, **settings) -> PolicySettings:
        """The settings from keyword arguments, an unknown one refused by name."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"unknown decoder setting(s) {unknown}; expected {sorted(known)}")
        return cls(**settings)
