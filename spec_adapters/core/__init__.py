"""The decoding core: torch only, no transformers.

``sampling`` (warping, speculative and tree acceptance), ``acceptance`` (gamma, Theorems 1-2),
``estimators`` (acceptance-length estimators and losses, Theorem 3), ``rounds`` (the per-position
table and round windows), ``policies`` (drafter-selection policies over :mod:`onlinelearn`).
"""
