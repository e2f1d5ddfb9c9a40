"""Package boundaries: onlinelearn stays numpy/scipy only; spec_adapters exports lazily; every
module imports in a fresh interpreter; the library never imports the application; the
project's modules import one another without cycles."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spec_adapters", "onlinelearn", "proofs_check")


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


def test_the_vllm_plugin_and_the_command_line_do_not_load_torch():
    """vLLM imports the plugin in every process it starts; `hedgespec --help` and the
    settings checks of `hedgespec serve` answer before any model library loads."""
    loaded = _modules_after("import spec_adapters.vllm.sampling_fix, spec_adapters.vllm")
    assert not loaded & {"torch", "transformers", "numba"}, loaded
    loaded = _modules_after("from spec_adapters.app.cli import build_parser; build_parser()")
    assert not loaded & {"torch", "transformers", "numba"}, loaded


@pytest.mark.parametrize("package", ["spec_adapters.vllm", "spec_adapters.eagle"])
def test_lazy_package_exports_are_the_submodules_objects(package):
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        module = importlib.import_module(f"{package}.{pkg._EXPORTS[name]}")
        assert getattr(pkg, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = pkg.NoSuchThing


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


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of :data:`PACKAGES` under ``root``."""
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _run_time_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its body (function-local imports
    included: they run too), read from the AST; relative imports resolved."""
    known = project_modules(root)
    graph = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _run_time_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [f"{base}.{a.name}" for a in node.names]  # a submodule, or a name
            else:
                continue
            for t in targets:
                while t and t not in known:  # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(project_modules())
    assert {"spec_adapters.app.cli", "onlinelearn.delayed", "proofs_check.checks"} <= set(names)
    code = "\n".join(f"import {m}" for m in names)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_library_never_imports_the_application():
    graph = import_graph()
    library = [m for m in graph if m.startswith("spec_adapters.")
               and not m.startswith("spec_adapters.app")]
    assert "spec_adapters.eagle.train" in library and "spec_adapters.drafters.hf" in library
    bad = {m: sorted(t for t in graph[m] if t.split(".")[:2] == ["spec_adapters", "app"])
           for m in library}
    assert not {m: t for m, t in bad.items() if t}, bad


def test_the_project_has_no_import_cycles():
    assert import_cycles(import_graph()) == []


def _write_tree(root: Path, files: dict[str, str]) -> Path:
    """``root`` holding ``files`` (path -> text)."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def package_of(module: str) -> str:
    """``spec_adapters.<package>`` for the modules of ``spec_adapters`` (the library's
    packages and the application), the top-level package for the others."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "spec_adapters" and len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import (function-local imports included)."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = package_of(module)
        out.setdefault(here, set()).update(package_of(t) for t in targets
                                           if package_of(t) != here)
    return out


def test_the_packages_have_no_import_cycles():
    """A circle between packages (``hf`` importing ``decoding`` in a function while
    ``decoding`` imports ``hf``) is a circle even when no two modules form one."""
    assert import_cycles(package_graph(import_graph())) == []


def test_the_package_cycle_finder_sees_a_lazy_circle_no_module_circle_shows(tmp_path):
    files = {"spec_adapters/__init__.py": "",
             "spec_adapters/hf/__init__.py": "",
             "spec_adapters/hf/target.py": "",
             "spec_adapters/hf/generate.py":
                 "def generate():\n    from spec_adapters.decoding.loop import run\n",
             "spec_adapters/decoding/__init__.py": "",
             "spec_adapters/decoding/loop.py": "from spec_adapters.hf.target import x\n",
             "onlinelearn/__init__.py": "",
             "proofs_check/__init__.py": ""}
    graph = import_graph(_write_tree(tmp_path, files))
    assert import_cycles(graph) == []
    assert import_cycles(package_graph(graph)) == [["spec_adapters.decoding", "spec_adapters.hf"]]


def test_the_cycle_finder_sees_a_circle_through_function_local_and_relative_imports(tmp_path):
    """The shape of the circle removed from ``eagle/train.py``: a lazy import back into the
    CLI from a library function, relative imports in the library."""
    files = {"spec_adapters/__init__.py": "",
             "spec_adapters/app/__init__.py": "",
             "spec_adapters/app/cli.py": "def main():\n    from spec_adapters.eagle import train\n",
             "spec_adapters/eagle/__init__.py": "from .train import fit\n",
             "spec_adapters/eagle/train.py":
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import onlinelearn\n"
                 "def fit():\n    from spec_adapters.app.cli import main\n",
             "onlinelearn/__init__.py": "import spec_adapters.eagle\n",
             "proofs_check/__init__.py": ""}
    graph = import_graph(_write_tree(tmp_path, files))
    assert graph["spec_adapters.eagle"] == {"spec_adapters.eagle.train"}
    assert graph["spec_adapters.eagle.train"] == {"spec_adapters.app.cli"}  # not TYPE_CHECKING
    assert import_cycles(graph) == [["spec_adapters.app.cli", "spec_adapters.eagle.train"]]


def private_imports_across_packages(root: Path = ROOT) -> list[str]:
    """``from a.b.m import _name`` where the importer is outside package ``a.b``: a private
    name used as if it were public (within one package, helpers may share private names)."""
    known = project_modules(root)
    found = []
    for name, path in known.items():
        for node in _run_time_nodes(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.module and not node.level
                    and node.module in known):
                continue
            owner = node.module.rpartition(".")[0]
            inside = name == owner or name.startswith(owner + ".")
            found += [f"{name} imports {node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not inside]
    return found


def test_no_private_name_is_imported_from_another_package():
    assert private_imports_across_packages() == []


def test_the_private_import_check_sees_one(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "spec_adapters" / "hf").mkdir()
    (tmp_path / "spec_adapters" / "hf" / "__init__.py").write_text("")
    (tmp_path / "spec_adapters" / "hf" / "target.py").write_text("def _kw(): pass\n")
    (tmp_path / "spec_adapters" / "tree.py").write_text(
        "def f():\n    from spec_adapters.hf.target import _kw\n")
    assert private_imports_across_packages(tmp_path) == [
        "spec_adapters.tree imports spec_adapters.hf.target._kw"]
