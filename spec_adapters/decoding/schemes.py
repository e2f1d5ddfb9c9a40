"""Which round scheme runs a drafter pool: single drafts, or the scheme a drafter kind registers.

:class:`~spec_adapters.decoding.chain.HedgeSpecDecoder` runs any pool of
:class:`~spec_adapters.drafters.Drafter` objects with the single-draft
:class:`~spec_adapters.decoding.chain.ChainScheme`. A drafter kind whose rounds are not single
drafts (EAGLE heads: draft trees verified with a tree mask) registers the builder of its
scheme here, both named by their import path, so that this package never imports the kinds
it runs: :mod:`spec_adapters.eagle` registers its heads when imported. No torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

__all__ = ["register_scheme", "scheme_builder"]

_BUILDERS: dict[str, str] = {}  # "module.Class" of a drafter kind -> "module:function"


def register_scheme(drafter_class: str, builder: str) -> None:
    """Run pools of ``drafter_class`` (``"package.module.Class"``) with the scheme that
    ``builder`` (``"package.module:function"``) returns, called as
    ``builder(target, drafters, draft_length, tree, batched)``."""
    _BUILDERS[drafter_class] = builder


def _kind(drafter) -> str:
    return f"{type(drafter).__module__}.{type(drafter).__qualname__}"


def scheme_builder(drafters: Sequence) -> Callable | None:
    """The registered scheme builder of a pool's drafters, ``None`` for single drafts.

    Raises
    ------
    ValueError
        The pool mixes a registered kind with other drafters (one round scheme per pool).
    """
    kinds = {_BUILDERS.get(_kind(d)) for d in drafters}
    if len(kinds) > 1:
        names = sorted({_kind(d).rpartition(".")[2] for d in drafters})
        raise ValueError(f"a pool mixing {', '.join(names)} is not supported: their rounds "
                         "differ (draft trees vs single drafts); pass one kind of drafter")
    (builder,) = kinds or {None}
    if builder is None:
        return None
    module, _, name = builder.partition(":")
    return getattr(importlib.import_module(module), name)
