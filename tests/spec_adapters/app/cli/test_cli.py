"""``hedgespec`` CLI: --help of every command, clear errors (missing target path, unknown
domain, corrupt cache -> message + rebuild), and the commands end to end on a tiny local target
and tiny prepared domains."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from spec_adapters.app.bench.config import PRESETS
from spec_adapters.app.cli import build_parser, main
from spec_adapters.app.cli.bench import bench_config
from spec_adapters.app.cli.common import UserError
from tests.spec_adapters.app.cli.tiny_cli import DOMS, tiny_world, world_args

COMMANDS = ("demo", "prepare-data", "distill", "train-drafters", "cache-features",
            "train-head", "ship-heads", "bench", "generate")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    world = tiny_world(tmp_path_factory, "cli")
    assert main(["distill", *world_args(world), "--engine", "transformers",
                 "--tokens-per-domain", "6", "--max-new-tokens", "4", "--batch-size", "2"]) == 0
    return world


def _args(tiny, *extra):
    return [*world_args(tiny), "--distilled-tokens", "6", *extra]


def test_distill_prints_what_it_made_and_a_pool_of_other_settings_says_what_is_missing(
        tiny, capsys):
    root, _ = tiny
    (manifest,) = (root / "cache" / "distilled").glob("*/manifest.json")
    assert set(json.loads(manifest.read_text())["domains"]) == set(DOMS.split(","))
    rc = main(["train-drafters", *_args(tiny, "--distilled-tokens", "99")])
    err = capsys.readouterr().err
    assert rc == 2 and "hold 6 tokens per domain, the pool asks for 99" in err


@pytest.mark.parametrize("engine", ["transformers", "llamacpp"])
def test_a_workload_the_domains_cannot_build_is_refused_before_any_pool_work(tiny, capsys,
                                                                             engine):
    rc = main(["bench", *_args(tiny, "--domains", "code,math", "--workload", "copy-edit",
                               "--engine", engine)])
    err = capsys.readouterr().err
    assert rc == 2 and "the copy-edit workload needs the news domain(s)" in err


def test_heads_from_cached_features_generalist_then_specialist(tiny, capsys):
    """cache-features (the distilled answers, the held-out answers), a generalist trained on
    the cache, a specialist fine-tuned from it on one domain; bad combinations are one line."""
    from spec_adapters.eagle import EagleHead
    from spec_adapters.eagle.features import load_features
    from spec_adapters.eagle.shipped import load_shipped
    from spec_adapters.hf.models import load_target

    root, folder = tiny
    feats, held = root / "feats", root / "held"
    assert main(["cache-features", *world_args(tiny), "--out", str(feats)]) == 0
    assert main(["cache-features", *world_args(tiny), "--set", "heldout", "--per-domain", "1",
                 "--max-new-tokens", "4", "--out", str(held)]) == 0
    assert capsys.readouterr().out.count(" documents, ") == 2
    fs = load_features(feats)
    assert sorted(set(fs.labels)) == sorted(DOMS.split(",")) and len(load_features(held)) == 3
    base = ["train-head", "--target", str(folder), "--cache-dir", str(root / "cache"),
            "--threads", "1", "--no-progress", "--features", str(feats), "--heldout", str(held),
            "--steps", "2", "--batch-size", "2", "--seq-len", "64", "--draft-vocab-size", "40",
            "--ttt-steps", "2", "--eval-every", "2"]
    assert main([*base, "--out", str(root / "general")]) == 0
    out = capsys.readouterr().out  # the held-out report line, then the last history row
    assert "held-out top1" in out and "top1" in json.loads(out[out.index("{"):])
    assert main([*base, "--domain", "code", "--init", str(root / "general"), "--out",
                 str(root / "code")]) == 0
    general = EagleHead.from_pretrained(root / "general")
    code = EagleHead.from_pretrained(root / "code")
    assert torch.equal(general.d2t, code.d2t)  # fine-tuned from it: one draft vocabulary
    assert not torch.equal(general.fc.weight, code.fc.weight)
    capsys.readouterr()
    assert main([*base, "--domain", "poetry", "--out", str(root / "x")]) == 2
    assert "has no documents of domain 'poetry'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --corpus and --features exclude each other
        main([*base, "--corpus", str(feats / "features.json"), "--out", str(root / "x")])
    # shipped: a specialist must share the generalist's fc / lm_head (--midlayer-only)
    ship = ["ship-heads", "--target", str(folder), "--cache-dir", str(root / "cache"),
            "--heads", str(root), "--out", str(root / "shipped")]
    assert main(ship) == 2
    assert "head 'code' does not share" in capsys.readouterr().err
    assert not (root / "shipped").exists()
    assert main([*base, "--domain", "math", "--init", str(root / "general"), "--midlayer-only",
                 "--out", str(root / "math")]) == 0
    shutil.rmtree(root / "code")
    capsys.readouterr()
    assert main(ship) == 0
    assert "2 heads" in capsys.readouterr().out
    heads = load_shipped(root / "shipped", load_target(str(folder))[0])
    assert list(heads) == ["general", "math"]
    torch.testing.assert_close(heads["math"].lm_head.weight, heads["general"].lm_head.weight)


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for c in COMMANDS:
        assert c in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--target" in out and "--cache-dir" in out


def test_unknown_domain_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train-drafters", "--domains", "code,physics"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown domain(s) 'physics'" in err and "biology" in err


def test_missing_target_path_is_one_clear_line(tmp_path, capsys):
    rc = main(["train-drafters", "--target", str(tmp_path / "nope"), "--cache-dir",
               str(tmp_path), "--threads", "1"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hedgespec: error: target model path")
    assert "does not exist" in err[-1]


def test_generate_requires_a_prompt(capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate"])
    assert e.value.code == 2
    assert "--prompt" in capsys.readouterr().err


def test_parser_defaults():
    a = build_parser().parse_args(["bench"])
    assert a.preset == "small" and a.target is None and len(a.domains) == 7


@pytest.mark.parametrize("temps, temperature, sampled", [
    (None, 0.7, 3), ("0.0", 0.7, 0), ("0.0,0.5", 0.5, 3), ("0.9,0.0", 0.9, 3)])
def test_bench_temperatures_narrow_the_transformers_streams(temps, temperature, sampled):
    argv = ["bench", "--preset", "headline", *(["--temperatures", temps] if temps else [])]
    cfg = bench_config(build_parser().parse_args(argv))
    assert (cfg.temperature, cfg.sampled_queries_per_domain) == (temperature, sampled)
    assert cfg.queries_per_domain == PRESETS["headline"].queries_per_domain


def test_bench_top_p_reaches_the_transformers_config():
    parse = build_parser().parse_args
    assert bench_config(parse(["bench", "--preset", "headline"])).top_p == 1.0
    assert bench_config(parse(["bench", "--preset", "headline", "--top-p", "0.9"])).top_p == 0.9


@pytest.mark.parametrize("temps", ["0.7", "0.0,0.5,0.7"])
def test_bench_temperatures_without_greedy_or_with_two_samplings_are_refused(temps):
    with pytest.raises(UserError, match=f"at most one sampling temperature.*got {temps}"):
        bench_config(build_parser().parse_args(["bench", "--temperatures", temps]))


def test_train_drafters_then_corrupt_cache_is_rebuilt(tiny, capsys):
    root, _ = tiny
    assert main(["train-drafters", *_args(tiny, "--max-train-tokens", "2000")]) == 0
    out = capsys.readouterr().out
    assert "ngram-general" in out and "prompt-lookup" in out
    entry = next((root / "cache" / "pool").glob("*/ngram-code-*.npz"))
    entry.write_bytes(b"\0" * 10)
    assert main(["train-drafters", *_args(tiny, "--max-train-tokens", "2000")]) == 0
    err = capsys.readouterr().err
    assert f"{entry.name} is unusable" in err and "rebuilding" in err
    assert entry.stat().st_size > 10


def test_generate_streams_with_drafter_markers(tiny, capsys):
    rc = main(["generate", *_args(tiny, "--max-train-tokens", "2000"), "--prompt",
               "please continue def return self", "--max-new-tokens", "12", "--colour",
               "never"])
    assert rc == 0
    cap = capsys.readouterr()
    assert "[ngram-" in cap.out or "[prompt-lookup]" in cap.out
    assert "target calls" in cap.err and "rounds per drafter" in cap.err


def test_demo_prints_the_comparison_table(tiny, tmp_path, capsys):
    rc = main(["demo", *_args(tiny, "--max-train-tokens", "2000"), "--max-new-tokens", "6",
               "--out", str(tmp_path / "demo"), "--no-vllm"])
    assert rc == 0
    cap = capsys.readouterr()
    out = cap.out
    assert "inside vLLM" not in out and not (tmp_path / "demo" / "vllm").exists()
    assert "llama.cpp is skipped: it decodes GGUF files" in cap.err
    for label in ("target alone", "HF prompt lookup", "generalist", "EXP3Spec",
                  "HedgeSpec (NormalHedge)", "HedgeSpec cost-aware", "hindsight oracle"):
        assert label in out
    target_row = next(line for line in out.splitlines() if line.startswith("target alone"))
    assert target_row.split()[-1] == "1.00"  # the speed-up column is relative to the target
    assert (tmp_path / "demo" / "fig5a_regret.png").is_file()
    assert (tmp_path / "demo" / "results.json").is_file()


def test_demo_distills_a_target_without_answers_first_then_reuses_them(tmp_path_factory,
                                                                         monkeypatch, capsys):
    """``demo --target``'s recipe: no cached or shipped answers -> distilled (the transformers
    engine where vLLM is missing), then found; ``--distilled-tokens 0`` asks for none."""
    from spec_adapters.app import serve
    from spec_adapters.app.cli import bench as cli_bench
    from spec_adapters.app.cli.common import target_and_domains
    from spec_adapters.app.distill import answers

    world = tiny_world(tmp_path_factory, "demo-distill")

    def no_vllm():
        raise FileNotFoundError("vLLM is not installed here")

    monkeypatch.setattr(serve, "find_vllm_python", no_vllm)
    args = build_parser().parse_args(["demo", *world_args(world), "--distilled-tokens", "6"])
    model, tok, domains = target_and_domains(args)
    assert not list((world[0] / "cache").glob("distilled/*/manifest.json"))
    cli_bench._distill_if_missing(args, model, tok, domains)
    assert "distilling them first (transformers engine" in capsys.readouterr().err
    (manifest,) = (world[0] / "cache").glob("distilled/*/manifest.json")
    made = json.loads(manifest.read_text())
    assert made["engine"] == "transformers" and set(made["domains"]) == set(DOMS.split(","))
    assert made["settings"]["tokens_per_domain"] == 6

    def fail(*a, **k):
        raise AssertionError("distilled again")

    monkeypatch.setattr(answers, "distill", fail)
    cli_bench._distill_if_missing(args, model, tok, domains)  # found: nothing to do
    none = build_parser().parse_args(["demo", *world_args(world), "--distilled-tokens", "0"])
    shutil.rmtree(manifest.parent)
    cli_bench._distill_if_missing(none, model, tok, domains)  # asks for no answers
