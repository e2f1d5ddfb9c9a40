"""The decoding core: torch only, no transformers.

``sampling`` (warping, speculative and tree acceptance), ``acceptance`` (gamma, Theorems 1-2),
``estimators`` (acceptance-length estimators and losses, Theorem 3), ``position_stats`` (every
drafter's gamma / rho at the verified positions). What the learner does with them is the
numpy selection core, :mod:`spec_adapters.selection`.
"""
