"""Native code first in a child process: a crash there fails the tests that need it, naming
the signal, instead of killing the pytest worker that would have run them (issue 44).

llama.cpp, the numba kernels and vLLM are C or machine code: a fault in them (SIGSEGV, SIGILL)
ends the whole process, so inside a pytest worker it would end every test that worker held.
:func:`run_child` runs such code in a fresh interpreter first; the session fixtures in
``tests/conftest.py`` use it once per worker before the tests that load the same code in process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spec_adapters.llamacpp.cpu_backend import exit_cause

ROOT = Path(__file__).resolve().parents[1]


def run_child(args: list[str], what: str, timeout: float = 180.0,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python args...`` from the repository root; fail the calling test (or fixture)
    with ``what``, the cause (signal or status) and the child's last lines when it does not
    exit cleanly within ``timeout`` seconds."""
    try:
        run = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=timeout, env=dict(os.environ, **(env or {})), check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: no answer from a child process in {timeout:.0f} s", pytrace=False)
    if run.returncode != 0:
        tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-15:])
        pytest.fail(f"{what} failed in a child process ({exit_cause(run.returncode)}):\n{tail}",
                    pytrace=False)
    return run
