"""Executable checks of the HedgeSpec paper's claims, by exact enumeration on small models.

``python -m proofs_check [--quick] [--json] [--only NAME ...] [--seed S]``; see docs/theory.md.
Each check goes through the product's own functions (``spec_adapters.core.sampling``,
``.acceptance``, ``.estimators``) and ``onlinelearn``, so a wrong formula fails a check.
"""
