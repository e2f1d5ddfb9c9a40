"""Package boundaries: onlinelearn stays numpy/scipy only; spec_adapters exports lazily."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def _modules_after(statement: str) -> set[str]:
    """Top-level module names loaded by ``statement`` in a fresh interpreter."""
    code = f"{statement}\nimport sys\nprint(' '.join({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(out.stdout.split())


def test_import_onlinelearn_loads_neither_torch_nor_spec_adapters():
    loaded = _modules_after("import onlinelearn, onlinelearn.delayed, onlinelearn.bounds")
    assert "onlinelearn" in loaded
    assert not loaded & {"torch", "transformers", "spec_adapters"}, loaded


def test_import_spec_adapters_is_light_until_a_name_is_used():
    loaded = _modules_after("import spec_adapters")
    assert "spec_adapters" in loaded
    assert not loaded & {"torch", "transformers"}, loaded


def test_every_spec_adapters_export_is_the_submodules_object():
    import spec_adapters

    for name in spec_adapters.__all__:
        module = importlib.import_module(f"spec_adapters.{spec_adapters._EXPORTS[name]}")
        assert getattr(spec_adapters, name) is getattr(module, name), name
    from spec_adapters import HedgeSpecDecoder
    from spec_adapters.decoding.chain import HedgeSpecDecoder as SingleDecoder

    assert HedgeSpecDecoder is SingleDecoder
    assert set(spec_adapters.__all__) <= set(dir(spec_adapters))


def test_unknown_spec_adapters_name_is_an_attribute_error_and_submodules_still_import():
    import spec_adapters

    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = spec_adapters.NoSuchThing
    from spec_adapters.core import estimators  # a submodule, not an export

    assert estimators.__name__ == "spec_adapters.core.estimators"
