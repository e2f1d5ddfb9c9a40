"""``hedgespec serve`` without vLLM: the server's command line and environment, and the
one-line errors raised before any server starts (the server itself: tests/vllm/test_serve.py).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import ClassVar

import pytest

from spec_adapters.app import serve
from spec_adapters.app.cli import main
from spec_adapters.vllm.config import ENV_VAR, ProposerConfig


def test_server_command_speculates_with_the_proposer_on_localhost():
    cmd = serve.server_command(Path("/v/bin/python"), Path("/m/target"), port=8123, k=3,
                               vllm_args=["--enforce-eager"])
    assert cmd[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    opts = dict(zip(cmd[3:-1:2], cmd[4:-1:2], strict=True))
    assert opts["--model"] == "/m/target"
    assert opts["--host"] == "127.0.0.1" and opts["--port"] == "8123"
    assert json.loads(opts["--speculative-config"]) == {
        "method": "custom_class", "model": "spec_adapters.vllm.HedgeSpecProposer",
        "num_speculative_tokens": 3}
    assert cmd[-1] == "--enforce-eager"


def test_server_env_preloads_intel_openmp_once_and_keeps_set_values(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    (tmp_path / "venv" / "lib").mkdir(parents=True)
    iomp = tmp_path / "venv" / "lib" / "libiomp5.so"
    iomp.touch()
    env = serve.server_env(python, tmp_path / "c.json",
                           {"LD_PRELOAD": f"/x/libtcmalloc.so:{iomp}", "PYTHONPATH": "/p",
                            "VLLM_CPU_KVCACHE_SPACE": "8"})
    assert env["LD_PRELOAD"] == f"{iomp}:/x/libtcmalloc.so"
    assert env["HEDGESPEC_VLLM_CONFIG"] == str(tmp_path / "c.json")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "8"
    assert env["PYTHONPATH"].split(":") == [str(serve.ROOT), "/p"]
    assert env["VLLM_PLUGINS"] == serve.PLUGIN  # HedgeSpec's plugin, not Arctic Inference's
    entry_points = tomllib.loads((serve.ROOT / "pyproject.toml").read_text())["project"][
        "entry-points"]["vllm.general_plugins"]
    assert serve.PLUGIN in entry_points
    assert serve.server_env(python, tmp_path / "c.json", {"VLLM_PLUGINS": ""})["VLLM_PLUGINS"] == ""
    iomp.unlink()  # a GPU environment: nothing preloaded, default KV cache size
    env = serve.server_env(python, tmp_path / "c.json", {})
    assert "LD_PRELOAD" not in env and env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_server_env_binds_the_engine_threads_to_the_cores_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 4)
    python = tmp_path / "python"
    assert serve.server_env(python, tmp_path / "c.json", {})["VLLM_CPU_OMP_THREADS_BIND"] == "0-3"
    assert serve.server_env(python, tmp_path / "c.json", {},
                            threads=2)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert serve.server_env(python, tmp_path / "c.json", {},
                            threads=16)["VLLM_CPU_OMP_THREADS_BIND"] == "0-3"  # no more cores
    kept = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    env = serve.server_env(python, tmp_path / "c.json", kept)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


@pytest.fixture
def target(tmp_path) -> Path:
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_serve_without_vllm_is_one_line_naming_the_fix(tmp_path, target, monkeypatch,
                                                       capsys):
    monkeypatch.setattr(serve, "ROOT", tmp_path)
    monkeypatch.setattr(serve.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"run `make test-vllm`"):
        serve.find_vllm_python()
    assert main(["serve", "--target", str(target), "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e '.[vllm]'" in err


def test_serve_rejects_bad_settings_before_starting_vllm(tmp_path, target, capsys,
                                                         monkeypatch):
    monkeypatch.setattr(serve.subprocess, "Popen", None)  # starting anything would fail
    assert main(["serve", "--target", str(target), "--policy", "bestever"]) == 2
    assert "unknown policy 'bestever'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--target", str(target), "--port", "70000"])
    assert "must be an integer in [1, 65535]" in capsys.readouterr().err


def test_the_users_settings_file_is_merged_under_the_command_line(tmp_path):
    user = tmp_path / "user.json"
    user.write_text(json.dumps({"policy": "hedge", "k": 2, "trace": "t.jsonl",
                                "prompt_lookup": [2, 3]}))
    config, notes = serve.proposer_config({"policy": "adahedge", "k": 2, "cache_dir": None},
                                          {ENV_VAR: str(user)})
    assert (config.policy, config.k, config.trace, config.prompt_lookup) == (
        "adahedge", 2, "t.jsonl", (2, 3))
    assert notes == [f"--policy adahedge overrides policy='hedge' of {user}"]
    config, notes = serve.proposer_config({"policy": None, "k": None}, {})
    assert config == ProposerConfig() and notes == []
    user.write_text('{"policy": "hedge",')
    with pytest.raises(ValueError, match=rf"{ENV_VAR} \({user}\): malformed JSON"):
        serve.proposer_config({}, {ENV_VAR: str(user)})


class _FakeServer:
    """Stands in for vLLM's server process: records its command and settings file."""

    started: ClassVar[list] = []

    def __init__(self, cmd, env):
        self.started.append((cmd, env, json.loads(Path(env[ENV_VAR]).read_text())))

    def wait(self, timeout=None):
        return 0

    def poll(self):
        return 0


def test_serve_hands_vllm_the_whole_merged_settings_and_the_threads(tmp_path, target,
                                                                    monkeypatch, capsys):
    user = tmp_path / "user.json"
    user.write_text(json.dumps({"policy": "hedge", "suffix": False, "pool": None}))
    monkeypatch.setenv(ENV_VAR, str(user))
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-7")
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(serve, "find_vllm_python", lambda: tmp_path / "python")
    monkeypatch.setattr(serve.subprocess, "Popen", _FakeServer)
    (target / "config.json").write_text(json.dumps({"vocab_size": 64}))
    _FakeServer.started.clear()
    assert main(["serve", "--target", str(target), "--policy", "ucbspec", "--k", "3",
                 "--threads", "1", "--stats", str(tmp_path / "stats.json")]) == 0
    [(cmd, env, settings)] = _FakeServer.started
    assert settings["policy"] == "ucbspec" and settings["k"] == 3
    assert settings["stats"] == str(tmp_path / "stats.json")
    assert settings["suffix"] is False and settings["pool"] is None
    assert json.loads(cmd[cmd.index("--speculative-config") + 1])["num_speculative_tokens"] == 3
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-0"
    assert capsys.readouterr().err.strip() == (
        f"hedgespec serve: --policy ucbspec overrides policy='hedge' of {user}")


@pytest.mark.parametrize("settings, message", [
    ('{"policy": "hedge",', "malformed JSON"),
    ('{"k": 0}', "k must be an integer >= 1, got 0"),
    ('{"policy": "fixed:9", "pool": null}', "fixed:9 is out of range for 6 drafters"),
    ('{"pool": "/no/such/pool"}', "pool folder /no/such/pool does not exist"),
    ('{"speculate": true}', "unknown keys ['speculate']"),
])
def test_bad_settings_are_one_line_before_vllm_starts(tmp_path, target, monkeypatch, capsys,
                                                      settings, message):
    user = tmp_path / "user.json"
    user.write_text(settings)
    monkeypatch.setenv(ENV_VAR, str(user))
    monkeypatch.setattr(serve, "find_vllm_python", lambda: tmp_path / "python")
    monkeypatch.setattr(serve.subprocess, "Popen", None)  # starting anything would fail
    (target / "config.json").write_text(json.dumps({"vocab_size": 64}))
    assert main(["serve", "--target", str(target), "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
