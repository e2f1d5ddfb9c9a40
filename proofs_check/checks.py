"""The registry of checks, one per claim of the HedgeSpec paper, in report order.

Each check takes :class:`~proofs_check.result.Settings` and returns
:class:`~proofs_check.result.CheckResult` rows; it computes the quantity of interest *through the
product's functions* (``spec_adapters.core.sampling`` / ``.acceptance`` / ``.estimators``,
``onlinelearn``) and compares it with an independent exact computation on small random
Markov-chain models (:mod:`proofs_check.models`).
"""

from __future__ import annotations

from collections.abc import Callable

from proofs_check.check_acceptance import check_theorem1, check_theorem2
from proofs_check.check_estimators import check_pointmass, check_theorem3
from proofs_check.check_label_efficient import check_label_efficient
from proofs_check.check_lossless import check_lossless
from proofs_check.check_regret import check_theorem4
from proofs_check.check_seeded import check_seeded
from proofs_check.check_stoprules import check_stoprules
from proofs_check.result import CheckResult, Settings

CHECKS: dict[str, Callable[[Settings], list[CheckResult]]] = {
    "theorem1": check_theorem1,
    "theorem2": check_theorem2,
    "lossless": check_lossless,
    "theorem3": check_theorem3,
    "pointmass": check_pointmass,
    "theorem4": check_theorem4,
    "seeded": check_seeded,
    "stoprules": check_stoprules,
    "labelefficient": check_label_efficient,
}
