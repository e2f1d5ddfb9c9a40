"""The application's progress messages: one ``[hedgespec]`` line on stderr each."""

from __future__ import annotations

import sys

__all__ = ["log"]


def log(msg: str) -> None:
    """Print ``[hedgespec] msg`` to stderr and flush (stdout stays for results)."""
    print(f"[hedgespec] {msg}", file=sys.stderr, flush=True)
