"""The ``math`` domain: GSM-Symbolic templates (``reasoning-gym`` wheel, loaded without importing
the package), question + worked solution for training; every fifth template held out for the
benchmark prompts."""

from __future__ import annotations

import contextlib
import importlib.util
import random
import re
import shutil
import sys
import tempfile
import types
import zipfile
from collections.abc import Callable
from pathlib import Path

from spec_adapters.app.corpora.sources import Sources
from spec_adapters.app.corpora.split import Split, pick

__all__ = ["build_math"]

@contextlib.contextmanager
def _gsm_modules(wheel: Path):
    """Load reasoning-gym's gsm_symbolic generator files from the wheel *without importing the
    package* (its ``__init__`` imports a dozen heavy dependencies): ``reasoning_gym.utils`` is
    stdlib-only, so a stand-in package holding just that module is enough. ``sys.modules`` is
    restored afterwards."""
    stand_ins = ("reasoning_gym", "reasoning_gym.utils")
    saved = {k: sys.modules[k] for k in stand_ins if k in sys.modules}
    tmp = Path(tempfile.mkdtemp())
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [f for f in z.namelist() if f == "reasoning_gym/utils.py"
                     or f.startswith("reasoning_gym/arithmetic/gsm_symbolic/")]
            z.extractall(tmp, members=names)
        pkg = types.ModuleType("reasoning_gym")
        pkg.__path__ = [str(tmp / "reasoning_gym")]
        sys.modules["reasoning_gym"] = pkg
        spec = importlib.util.spec_from_file_location("reasoning_gym.utils",
                                                      tmp / "reasoning_gym/utils.py")
        utils = importlib.util.module_from_spec(spec)
        sys.modules["reasoning_gym.utils"] = utils
        spec.loader.exec_module(utils)
        gdir = tmp / "reasoning_gym/arithmetic/gsm_symbolic"
        mods = []
        for f in sorted(gdir.glob("generators_*.py")):
            spec = importlib.util.spec_from_file_location(f"_hedgespec_gsm_{f.stem}", f)
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            mods.append(m)
        broken: set[int] = set()
        main = gdir / "gsm_symbolic.py"
        if main.is_file():
            m = re.search(r"tasks_need_fix\s*=\s*\[([^\]]*)\]", main.read_text())
            broken = {int(x) for x in re.findall(r"\d+", m.group(1))} if m else set()
        gens: dict[int, Callable] = {}
        for m in mods:
            for k, v in vars(m).items():
                if k.startswith("generate_") and k[9:].isdigit() and int(k[9:]) not in broken:
                    gens[int(k[9:])] = v
        yield gens
    finally:  # the stand-ins out, whatever they replaced back
        for k in stand_ins:
            sys.modules.pop(k, None)
        sys.modules.update(saved)
        shutil.rmtree(tmp, ignore_errors=True)


_MATH_ASK = "Solve this math word problem step by step, then give the final answer."


def build_math(src: Sources, n: int, seed: int, per_template: int = 40) -> Split:
    """``per_template`` draws of each training template (question + worked solution), enough
    draws of the held-out templates for ``n`` prompts."""
    train, prompts, train_prompts = [], [], []
    with _gsm_modules(src.reasoning_gym_wheel) as gens:
        held = sorted(i for i in gens if i % 5 == 0)  # every fifth template is benchmark-only
        for i, gen in sorted(gens.items()):
            rng = random.Random(f"{seed}:gsm:{i}")
            count = max(1, -(-n // max(len(held), 1))) if i in held else per_template
            for _ in range(count):
                try:
                    ex = gen(rng, 1.0)
                except Exception:  # a few templates fail on some draws: skip the draw
                    continue
                ask = f"{_MATH_ASK}\n\n{ex['question']}"
                if i in held:
                    prompts.append(ask)
                else:
                    train_prompts.append(ask)
                    cot = ex.get("answer_cot") or f"#### {ex['answer']}"
                    sol = re.sub(r"\n?#### *(.*)$", r"\nThe answer is \1.", cot).strip()
                    train.append(f"Question: {ex['question']}\nAnswer: {sol}")
    return train, pick(prompts, n, seed, "math"), train_prompts, \
        (f"GSM-Symbolic templates: {len(gens) - len(held)} for training ({per_template} draws "
         f"each), {len(held)} held out for prompts")
