"""The choice of llama.cpp's CPU backend (issue 44): the best variant this CPU runs, a variant
with AMX only after a probe process decoded with it, the verdict kept per machine."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from spec_adapters.llamacpp import cpu_backend

SCORES = {"x64": 1, "haswell": 40, "icelake": 90, "sapphirerapids": 120, "zen4": 0}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A library folder of fake variants scored by SCORES; the probe scripted
    (``machine.verdict``) and its calls counted (``machine.probes``)."""
    for name in SCORES:
        (tmp_path / f"libggml-cpu-{name}.so").write_bytes(b"")
    monkeypatch.setattr(cpu_backend, "variant_scores", lambda folder=None: dict(SCORES))
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path / "cache"))
    state = SimpleNamespace(verdict="works", probes=[], folder=tmp_path)

    def probe(path, timeout=cpu_backend.PROBE_TIMEOUT_S):
        state.probes.append(path.name)
        return state.verdict

    monkeypatch.setattr(cpu_backend, "probe_decodes", probe)
    return state


def test_amx_is_chosen_only_after_its_probe_decodes(machine):
    chosen = cpu_backend.choose(machine.folder)
    assert chosen.variant == "sapphirerapids" and chosen.amx == "works"
    assert machine.probes == ["libggml-cpu-sapphirerapids.so"]
    assert chosen.path.endswith("libggml-cpu-sapphirerapids.so")


def test_a_crashing_amx_probe_falls_back_to_the_best_variant_without_amx(machine):
    machine.verdict = "crashed: killed by SIGSEGV"
    chosen = cpu_backend.choose(machine.folder)
    assert chosen.variant == "icelake" and chosen.amx == "crashed: killed by SIGSEGV"
    assert "icelake" in chosen.line() and "SIGSEGV" in chosen.line()


def test_the_probes_verdict_is_kept_per_machine_and_library(machine):
    machine.verdict = "crashed: killed by SIGSEGV"
    cpu_backend.choose(machine.folder)
    machine.verdict = "works"  # not asked again: the record answers
    assert cpu_backend.choose(machine.folder).variant == "icelake"
    assert len(machine.probes) == 1
    record = json.loads((machine.folder / "cache" / "llamacpp-cpu.json").read_text())
    assert list(record.values()) == ["crashed: killed by SIGSEGV"]
    # another build of the library is another key: probed again
    lib = machine.folder / "libggml-cpu-sapphirerapids.so"
    lib.write_bytes(b"rebuilt")
    assert cpu_backend.choose(machine.folder).variant == "sapphirerapids"
    assert len(machine.probes) == 2


def test_a_damaged_record_is_probed_again_not_trusted(machine):
    (machine.folder / "cache").mkdir()
    (machine.folder / "cache" / "llamacpp-cpu.json").write_text("[not a record")
    assert cpu_backend.choose(machine.folder).variant == "sapphirerapids"
    assert len(machine.probes) == 1


def test_no_probe_where_the_best_variant_has_no_amx(machine, monkeypatch):
    scores = {k: v for k, v in SCORES.items() if k != "sapphirerapids"}
    monkeypatch.setattr(cpu_backend, "variant_scores", lambda folder=None: scores)
    chosen = cpu_backend.choose(machine.folder)
    assert chosen.variant == "icelake" and chosen.amx == "not on this CPU"
    assert machine.probes == []


def test_a_forced_variant_must_run_here(machine):
    assert cpu_backend.choose(machine.folder, forced="haswell").variant == "haswell"
    lib = str(machine.folder / "libggml-cpu-x64.so")
    assert cpu_backend.choose(machine.folder, forced=lib).variant == "x64"
    with pytest.raises(ValueError, match=r"no CPU variant 'zen4' this CPU runs"):
        cpu_backend.choose(machine.folder, forced="zen4")
    with pytest.raises(ValueError, match=r"'avx9'"):
        cpu_backend.choose(machine.folder, forced="avx9")
    assert machine.probes == []


def test_a_build_without_runtime_dispatch_is_used_as_it_is(machine, monkeypatch):
    monkeypatch.setattr(cpu_backend, "variant_scores", lambda folder=None: {})
    chosen = cpu_backend.choose(machine.folder)
    assert chosen.variant == "built-in" and chosen.path is None


def test_the_probe_names_the_signal_that_killed_its_child(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_backend, "PROBE_ARGS",
                        ("-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert cpu_backend.probe_decodes(tmp_path / "x.so") == "crashed: killed by SIGSEGV"
    monkeypatch.setattr(cpu_backend, "PROBE_ARGS", ("-c", "raise SystemExit('no tiles')"))
    assert cpu_backend.probe_decodes(tmp_path / "x.so") == "crashed: exit status 1 (no tiles)"
    monkeypatch.setattr(cpu_backend, "PROBE_ARGS", ("-c", "import time; time.sleep(30)"))
    assert cpu_backend.probe_decodes(tmp_path / "x.so", timeout=1) == (
        "crashed: no answer in 1 s")


def test_this_machine_gets_a_variant_it_runs_and_the_probe_decodes_with_it():
    """On whatever CPU runs the suite: the chosen variant scores above 0 and no runnable
    variant without AMX scores higher; the real probe child decodes through it."""
    chosen = cpu_backend.choose()
    if chosen.variant == "built-in":
        pytest.fail("llama-cpp-python was built without runtime dispatch: run `make test`, "
                    "which builds it with GGML_BACKEND_DL")
    assert chosen.scores[chosen.variant] > 0
    safe = [s for v, s in chosen.scores.items() if v not in cpu_backend.AMX_VARIANTS]
    assert chosen.scores[chosen.variant] >= max(safe)
    assert cpu_backend.probe_decodes(Path(chosen.path)) == "works"


@pytest.mark.usefixtures("llama_cpp_decodes")
def test_doctor_reports_the_variant_chosen_and_llama_cpps_features(capsys):
    from spec_adapters.app.cli.main import main

    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    lc = report["llama_cpp"]
    assert lc["scores"][lc["variant"]] > 0 and lc["amx"] and lc["reason"]
    assert "CPU :" in lc["features"] and report["cpu"]
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"llama.cpp CPU      {lc['variant']}" in out and "features in use" in out
