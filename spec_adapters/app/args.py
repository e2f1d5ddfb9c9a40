"""argparse types shared by the command lines: each rejects a bad value with one line that
names the allowed range (``hedgespec``, ``python -m spec_adapters.app.domains``); and
:func:`check_int`, the same integer check for values given in Python."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

__all__ = ["OneLineParser", "check_int", "comma_list", "distinct_list", "existing_arg", "file_arg",
           "float_arg", "floats_arg", "folder_arg", "int_arg", "ints_arg", "json_object",
           "names_arg"]


# ------------------------------------------------------------------------------------------
class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (the usage is in ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _range_text(lo: float, hi: float | None, lo_open: bool = False) -> str:
    low = f"> {lo}" if lo_open else f">= {lo}"
    return low if hi is None else f"in {'(' if lo_open else '['}{lo}, {hi}]"


def int_arg(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[lo, hi]`` (no upper bound when ``hi`` is None)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be an integer {_range_text(lo, hi)}, got "
                                             f"{text}")
        return v

    return parse


def check_int(name: str, value, lo: int) -> int:
    """``value`` when it is an integer (a bool is not) ``>= lo``, else a ``ValueError`` naming
    ``name``: :func:`int_arg`'s check for values given in Python."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return value


def comma_list(text: str) -> tuple[str, ...]:
    """The items of a comma-separated list, stripped; an empty item or a repeated one is an
    ``argparse.ArgumentTypeError`` naming it."""
    items = tuple(t.strip() for t in text.split(","))
    if "" in items:
        raise argparse.ArgumentTypeError(f"empty item in {text!r}")
    repeated = sorted({t for t in items if items.count(t) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{', '.join(map(repr, repeated))} given more than "
                                         f"once in {text!r}")
    return items


def distinct_list(one: Callable[[str], object]) -> Callable[[str], tuple]:
    """An argparse ``type``: distinct comma-separated values, each parsed by ``one``
    (``distinct_list(int_arg(1))`` reads ``"1,4,16"``)."""
    def parse(text: str) -> tuple:
        values = tuple(one(t) for t in comma_list(text))
        if len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(f"a value given more than once in {text!r}")
        return values

    return parse


def ints_arg(lo: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type``: distinct comma-separated integers ``>= lo`` (``"1,4,16"``)."""
    return distinct_list(int_arg(lo))


def floats_arg(lo: float) -> Callable[[str], tuple[float, ...]]:
    """An argparse ``type``: distinct comma-separated finite numbers ``>= lo`` (``"0,0.7"``)."""
    return distinct_list(float_arg(lo))


def names_arg(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse ``type``: distinct comma-separated names, each one of ``choices``."""
    def one(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"unknown {text!r}; choose from "
                                             f"{', '.join(choices)}")
        return text

    return distinct_list(one)


def float_arg(lo: float, hi: float | None = None, lo_open: bool = False
              ) -> Callable[[str], float]:
    """An argparse ``type``: a finite number ``>= lo`` (``> lo`` if ``lo_open``), ``<= hi``."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(v) and (v > lo if lo_open else v >= lo)
                and (hi is None or v <= hi)):
            raise argparse.ArgumentTypeError(
                f"must be a finite number {_range_text(lo, hi, lo_open)}, got {text}")
        return v

    return parse


def json_object(text: str) -> dict:
    """An argparse ``type``: a JSON object (``'{"prior_rounds": 0}'``)."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON ({err}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def folder_arg(text: str) -> str:
    """An argparse ``type``: a folder that exists or can be created (no file in the way)."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {text!r}: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{str(parent)!r} is not writable")
    return text


def existing_arg(text: str) -> str:
    """An argparse ``type``: a file or folder that exists."""
    if not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    return text


def file_arg(text: str) -> str:
    """An argparse ``type``: an existing file."""
    if not Path(text).expanduser().is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a file" if Path(text).exists()
                                         else f"{text!r} does not exist")
    return text
