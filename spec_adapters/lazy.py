"""Names a package exports without importing the submodules that define them (PEP 562).

A package whose light helpers must not import torch (``spec_adapters``, ``spec_adapters.eagle``,
``spec_adapters.vllm``, which vLLM imports as a plugin) lists its public names and their
submodules, and the submodule is imported on the name's first use::

    __getattr__, __dir__ = lazy_exports(__name__, {"HedgeSpecDecoder": "decoding.chain"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (public name ->
    submodule, relative to the package); a name is cached in the package once loaded."""

    def __getattr__(name: str) -> Any:  # noqa: N807
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
