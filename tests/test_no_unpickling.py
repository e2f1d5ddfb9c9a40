"""No code of the project unpickles a file: ``torch.load`` only with ``weights_only=True``, no
``allow_pickle=True``, no ``pickle.load``. A crafted pickle runs code when it is read (with
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` even through a plain ``torch.load``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("onlinelearn", "spec_adapters", "proofs_check", "benchmarks")
PICKLE_READERS = {("pickle", "load"), ("pickle", "loads"), ("dill", "load"), ("dill", "loads")}


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def unpickling_calls(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: call`` for every call in ``source`` that can unpickle: ``torch.load``
    without a literal ``weights_only=True``, any call with ``allow_pickle`` not literally
    ``False``, and ``pickle.load`` / ``pickle.loads`` (also ``dill``)."""
    hits = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        f = node.func
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
            else None
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        bad = (owner == "torch" and name == "load" and not _is_true(kw.get("weights_only"))) \
            or ("allow_pickle" in kw and not (isinstance(kw["allow_pickle"], ast.Constant)
                                              and kw["allow_pickle"].value is False)) \
            or (owner, name) in PICKLE_READERS
        if bad:
            hits.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return hits


def test_no_source_file_unpickles():
    files = [f for d in SOURCES for f in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 30 and any(f.name == "train.py" for f in files)
    hits = [h for f in files for h in unpickling_calls(f.read_text(), str(f.relative_to(ROOT)))]
    assert not hits, "\n".join(hits)


def test_the_scanner_flags_every_unpickling_call_and_nothing_else():
    flagged = """
import pickle, torch, numpy as np
torch.load(p)
torch.load(p, map_location="cpu")
torch.load(p, weights_only=False)
torch.load(
    p,
    weights_only=flag,
)
np.load(p, allow_pickle=True)
np.load(p, allow_pickle=ok)
pickle.load(fh)
pickle.loads(b)
"""
    safe = """
import torch, numpy as np
torch.load(p, weights_only=True)
torch.load(p, map_location="cpu", weights_only=True)
np.load(p)
np.load(p, allow_pickle=False)
json.load(fh)
model.load(p)
# torch.load(p) in a comment
s = "torch.load(p)"
"""
    assert [h.split(": ", 1)[0] for h in unpickling_calls(flagged)] == \
        [f"<source>:{n}" for n in (3, 4, 5, 6, 10, 11, 12, 13)]
    assert unpickling_calls(safe) == []
