"""What every check takes and returns: :class:`Settings` in, :class:`CheckResult` rows out."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

EXACT_TOL = 1e-12


@dataclass
class CheckResult:
    """One row of the report: the claim, what was measured, the bound, and the verdict."""

    check: str
    claim: str
    measured: str
    bound: str
    passed: bool
    seconds: float = 0.0
    data: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict
        return d


@dataclass(frozen=True)
class Settings:
    """How much to enumerate: ``quick`` for tests (seconds), full for the command.

    Parameters
    ----------
    quick : bool
        The small sizes (``python -m proofs_check --quick``) instead of the full ones.
    seed : int
        Seed of the random models.
    draws_scale : float
        Multiplies the number of Monte-Carlo draws per case (the ``3 sampler MC`` chi-square
        check) and nothing else; 1 (the default, and what the command uses) keeps the sizes
        above. The test suite runs the quick checks with 0.2 (600 draws a case), enough for the
        chi-square to reject a categorical draw not scaled by the weights' total.
    """

    quick: bool
    seed: int = 0
    draws_scale: float = 1.0

    def n(self, quick: int, full: int) -> int:
        """The quick or the full size."""
        return quick if self.quick else full

    def draws(self, quick: int, full: int) -> int:
        """A number of Monte-Carlo draws: :meth:`n` times ``draws_scale``, at least 1."""
        return max(1, round(self.n(quick, full) * self.draws_scale))


def timed(fn: Callable[..., list[CheckResult]]):
    """Decorate a check so that each of its rows carries its share of the run time."""

    def wrapper(settings: Settings) -> list[CheckResult]:
        start = time.perf_counter()
        rows = fn(settings)
        for r in rows:
            r.seconds = round((time.perf_counter() - start) / len(rows), 3)
        return rows

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
