"""Which of llama.cpp's CPU backends a process loads: the fastest one this CPU runs safely.

The Makefile builds llama-cpp-python with ggml's runtime-dispatched CPU backends
(``GGML_NATIVE=OFF GGML_BACKEND_DL=ON GGML_CPU_ALL_VARIANTS=ON``): one
``libggml-cpu-<variant>.so`` per x86 level (``x64``, ``sse42``, ``haswell``, ``skylakex``,
``icelake``, ``zen4``, ``alderlake``, ``sapphirerapids``, ...), each scoring this CPU at run time
(``ggml_backend_score``: 0 where the CPU lacks an instruction the variant was compiled with).
A ``-march=native`` build is not safe: on a Xeon VM with AMX its AMX matrix kernel died with
SIGSEGV at ``ldtilecfg`` (issue 44), and a hand-written flag list dies with SIGILL on a CPU
without one of its flags.

ggml looks for the variants beside the executable, which in Python is the interpreter's folder,
so :func:`ensure_loaded` chooses one and hands it to ggml (``GGML_BACKEND_PATH``) before
``llama_backend_init``:

1. every variant is scored on this CPU; the highest score wins;
2. a variant with AMX tiles (``sapphirerapids``) wins only after a *probe*: a child process
   loads it and decodes a tiny quantized GGUF, one row and then several (the rows take AMX's
   tile kernel, one row its VNNI one). A child that dies (a signal, a time-out) rules AMX out
   and the best variant without it is loaded. The verdict is kept per machine and library in
   ``$HEDGESPEC_CACHE/llamacpp-cpu.json``.

``HEDGESPEC_LLAMACPP_CPU=<variant>`` forces a variant (it must score above 0 here), e.g. to
time AMX against AVX-512 on one machine. A llama-cpp-python built without runtime dispatch
(its CPU backend inside ``libggml``) is used as it is and reported as such.
"""

from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spec_adapters.store.location import default_cache_dir

__all__ = ["AMX_VARIANTS", "CpuBackend", "ensure_loaded", "exit_cause", "llama_cpp_module",
           "probe_decodes", "system_info", "variant_scores"]

log = logging.getLogger(__name__)

# variants compiled with AMX tiles (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS)
AMX_VARIANTS = ("sapphirerapids",)
PREFIX, SUFFIX = "libggml-cpu-", ".so"
FORCE_ENV = "HEDGESPEC_LLAMACPP_CPU"
PROBE_TIMEOUT_S = 120.0
PROBE_ARGS = ("-m", "spec_adapters.llamacpp.probe")  # the probe child, to the interpreter
# CPU flags (/proc/cpuinfo) that name what the variants differ by
FLAGS_OF_INTEREST = ("sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f",
                     "avx512_vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8",
                     "amx_bf16")


@dataclass
class CpuBackend:
    """What :func:`ensure_loaded` chose, and why.

    Attributes
    ----------
    variant : str
        The variant loaded (``"haswell"``, ...), or ``"built-in"`` for a build without runtime
        dispatch.
    path : str or None
        Its shared library.
    scores : dict
        Every variant's ``ggml_backend_score`` on this CPU (0: cannot run here).
    amx : str
        ``"not on this CPU"``, ``"works"`` (the probe decoded), ``"crashed: <why>"``,
        ``"forced"`` or ``"not guarded (no runtime dispatch)"``.
    reason : str
        One line: why this variant.
    cpu_flags : list of str
        The flags of :data:`FLAGS_OF_INTEREST` this CPU has.
    """

    variant: str
    path: str | None
    scores: dict[str, int]
    amx: str
    reason: str
    cpu_flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """The engine's start-up line."""
        return f"llama.cpp CPU backend: {self.variant} ({self.reason}; AMX: {self.amx})"


_chosen: CpuBackend | None = None


def lib_dir() -> Path:
    """llama-cpp-python's folder of shared libraries (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the llama.cpp engine needs llama-cpp-python: pip install "
                          "llama-cpp-python==0.3.36 (the Makefile builds it)")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def variants_dir() -> Path:
    """Where the build put the CPU variants: ``llama_cpp/lib``, or the ``bin`` folder beside
    the package (ggml installs its backend modules to ``bin``, which the wheel keeps at the
    top of site-packages)."""
    lib = lib_dir()
    for folder in (lib, lib.parent.parent / "bin"):
        if any(folder.glob(f"{PREFIX}*{SUFFIX}")):
            return folder
    return lib


def variant_scores(folder: Path | None = None) -> dict[str, int]:
    """``ggml_backend_score()`` of every CPU variant in ``folder`` on this CPU, by name
    (empty for a build without runtime dispatch). Each library is opened, asked and closed;
    scoring runs no instruction the CPU lacks (it is ggml's own way of choosing). The variants
    need ``libggml-base``, loaded first from llama-cpp-python's folder."""
    folder = variants_dir() if folder is None else folder
    paths = sorted(folder.glob(f"{PREFIX}*{SUFFIX}"))
    if paths:
        ctypes.CDLL(str(lib_dir() / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    scores = {}
    for path in paths:
        lib = ctypes.CDLL(str(path))
        try:
            lib.ggml_backend_score.restype = ctypes.c_int
            scores[path.name[len(PREFIX):-len(SUFFIX)]] = int(lib.ggml_backend_score())
        finally:
            _ctypes.dlclose(lib._handle)
    return scores


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    have = set(line.partition(":")[2].split())
    return [f for f in FLAGS_OF_INTEREST if f in have]


def exit_cause(returncode: int) -> str:
    """How a child process ended: ``"killed by SIGSEGV"``, or ``"exit status N"``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def probe_decodes(path: Path, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Decode a tiny Q4_0 GGUF through the CPU backend ``path`` in a child process: one row,
    then 5 rows at once. Returns ``"works"``, or ``"crashed: <signal or status>"`` with the
    child's last line of output."""
    env = dict(os.environ, **{FORCE_ENV: str(path)})
    try:
        run = subprocess.run([sys.executable, *PROBE_ARGS], env=env,
                             capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"crashed: no answer in {timeout:.0f} s"
    if run.returncode == 0:
        return "works"
    tail = (run.stderr or run.stdout).strip().splitlines()[-1:]
    return f"crashed: {exit_cause(run.returncode)}" + (f" ({tail[0][:200]})" if tail else "")


def _probe_cache_key(folder: Path, variant: str) -> str:
    lib = folder / f"{PREFIX}{variant}{SUFFIX}"
    st = lib.stat()
    ident = f"{lib}|{st.st_size}|{st.st_mtime_ns}|{' '.join(_cpu_flags())}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _amx_verdict(folder: Path, variant: str) -> str:
    """The probe's verdict on an AMX variant, from the per-machine record or a new probe."""
    record_path = default_cache_dir() / "llamacpp-cpu.json"
    key = _probe_cache_key(folder, variant)
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict):
        record = {}
    if key in record:
        return str(record[key])
    verdict = probe_decodes(folder / f"{PREFIX}{variant}{SUFFIX}")
    record[key] = verdict
    try:  # a read-only cache only costs a probe next time
        record_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = record_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, record_path)
    except OSError:
        pass
    return verdict


def choose(folder: Path | None = None, forced: str | None = None) -> CpuBackend:
    """Choose the CPU variant for this machine (nothing is loaded).

    Raises
    ------
    ValueError
        ``forced`` names a variant that is not built, or that this CPU cannot run.
    """
    folder = variants_dir() if folder is None else folder
    scores, flags = variant_scores(folder), _cpu_flags()
    if not scores:
        return CpuBackend("built-in", None, {}, "not guarded (no runtime dispatch)",
                          "llama-cpp-python built without GGML_BACKEND_DL: its CPU backend is "
                          "inside libggml", flags)
    if forced:
        name = Path(forced).name[len(PREFIX):-len(SUFFIX)] if forced.endswith(SUFFIX) else forced
        if scores.get(name, 0) <= 0:
            runnable = ", ".join(v for v, s in scores.items() if s > 0)
            raise ValueError(f"{FORCE_ENV}={forced}: no CPU variant {name!r} this CPU runs "
                             f"(it runs: {runnable})")
        return CpuBackend(name, str(folder / f"{PREFIX}{name}{SUFFIX}"), scores, "forced",
                          f"forced by {FORCE_ENV}", flags)
    ranked = sorted((v for v, s in scores.items() if s > 0), key=scores.__getitem__,
                    reverse=True)
    if not ranked:
        raise ValueError(f"none of llama.cpp's CPU variants in {folder} runs on this CPU")
    amx = "not on this CPU"
    if ranked[0] in AMX_VARIANTS:
        amx = _amx_verdict(folder, ranked[0])
        if amx != "works":
            ranked = [v for v in ranked if v not in AMX_VARIANTS]
    best = ranked[0]
    return CpuBackend(best, str(folder / f"{PREFIX}{best}{SUFFIX}"), scores, amx,
                      f"the highest score of {len(scores)} variants", flags)


def ensure_loaded() -> CpuBackend:
    """Choose this process's CPU variant once and point ggml at it; call before
    ``llama_backend_init``. Later calls return the same choice."""
    global _chosen
    if _chosen is None:
        chosen = choose(forced=os.environ.get(FORCE_ENV))
        if chosen.path is not None:
            os.environ["GGML_BACKEND_PATH"] = chosen.path
        _chosen = chosen
    return _chosen


def llama_cpp_module():
    """llama_cpp with this CPU's backend chosen (:func:`ensure_loaded`; its line logged once),
    its C library's log quieted to errors (it prints every load otherwise)."""
    try:
        import llama_cpp
        from llama_cpp._logger import set_verbose
    except ImportError as err:  # built from its sdist by the Makefile
        raise ImportError("the llama.cpp engine needs llama-cpp-python: pip install "
                          "llama-cpp-python==0.3.36 (the Makefile builds it)") from err
    first = _chosen is None
    chosen = ensure_loaded()
    if first:
        log.info(chosen.line())
    set_verbose(False)
    return llama_cpp


def system_info() -> str:
    """llama.cpp's features in use (``llama_print_system_info``), backends loaded first."""
    llama_cpp = llama_cpp_module()
    llama_cpp.llama_backend_init()
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip()


if __name__ == "__main__":  # the variant for this machine, for the Makefile's llama.cpp tools
    print(ensure_loaded().variant)
