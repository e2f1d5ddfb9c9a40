"""Every bad input to ``hedgespec`` a user can fix gives ONE line on stderr and exit status 2,
never a traceback: numbers out of range, a folder argument that is a file, targets that do not
load (bad config.json, no tokenizer, text / random bytes / a truncated header named .gguf), a
prompt longer than the target's context, a corpus shorter than one training window.

Argument errors are raised by argparse (``SystemExit(2)``) before anything is loaded; errors
found while a command runs are returned as status 2 by ``main``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spec_adapters.app import domains as domains_module
from spec_adapters.app.cli import build_parser, main
from spec_adapters.app.cli.common import MAX_THREADS
from tests.spec_adapters.app.cli.tiny_cli import tiny_world, world_args


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny CLI world (target folder, prepared domains), a token file and a plain file."""
    root, folder = tiny_world(tmp_path_factory, "faults")
    (root / "corpus.txt").write_text(" ".join(str(7 + i % 20) for i in range(400)))
    (root / "a-file").write_text("not a folder\n")
    return root, folder


def _usage_error(argv, capsys, option: str) -> str:
    """Run ``main(argv)``, expect an argparse exit 2 with one stderr line naming ``option``."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hedgespec ") and f"argument {option}:" in lines[0]
    return lines[0]


def _run_error(argv, capsys) -> str:
    """Run ``main(argv)``, expect status 2 with exactly one ``hedgespec: error:`` line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [ln for ln in err.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith("hedgespec: error: "), err
    return errors[0]


# ---------------------------------------------------------------------- argparse range checks
def _beyond(range_text: str, *values: str) -> list[tuple[str, str]]:
    """Cases of ``values`` out of an option's range: each one's line says
    ``<range_text>, got <value>``."""
    return [(v, f"{range_text}, got {v}") for v in values]


INT1, INT0 = "must be an integer >= 1", "must be an integer >= 0"
THREADS = f"must be an integer in [1, {MAX_THREADS}]"
# command line -> option -> (bad value, what the one error line says)
BAD = {
    "generate --prompt hi": {
        "--max-new-tokens": [*_beyond(INT1, "-5"), ("ten", "expected an integer, got 'ten'")],
        "--temperature": _beyond("must be a finite number >= 0.0", "-1", "nan", "inf", "1e400"),
        "--seed": _beyond("must be an integer in [0, 9223372036854775807]", "-1", str(2**64)),
        "--threads": _beyond(THREADS, "-1", "0", "100000"),
        "--max-train-tokens": _beyond(INT1, "0"), "--ngram-order": _beyond(INT1, "0"),
        "--eagle-steps": _beyond(INT0, "-1"), "--draft-length": _beyond(INT1, "0"),
        "--colour": [("rainbow", "invalid choice")],
        "--domains": [("code,physics", "unknown domain(s) 'physics'"),
                      ("sql,sql", "'sql' given more than once in 'sql,sql'"),
                      ("sql,,code", "empty item in 'sql,,code'"), ("", "empty item in ''"),
                      (",", "empty item in ','")],
    },
    "bench-vllm": {
        "--concurrencies": [("1,1", "given more than once"), ("1,,4", "empty item in '1,,4'"),
                            ("01,1", "given more than once")],
        "--methods": [("plain,plain", "'plain' given more than once"), ("", "empty item in ''")],
        "--k": _beyond(INT1, "0"),
    },
    "train-drafters": {"--domains": [("sql,sql", "given more than once")],
                       "--extra-shards": _beyond(INT0, "-1")},
    "prepare-data": {"--n-prompts": _beyond(INT1, "-1")},
    "bench": {"--queries-per-domain": _beyond(INT1, "0"), "--max-new-tokens": _beyond(INT1, "0"),
              "--draft-length": _beyond(INT1, "-2"), "--preset": [("huge", "invalid choice")]},
    "demo": {"--queries-per-domain": _beyond(INT1, "0"), "--max-new-tokens": _beyond(INT1, "-1"),
             "--threads": _beyond(THREADS, "100000")},
    "quantize": {"--alpha": _beyond("must be a finite number in [0.0, 0.999]", "1", "-0.1",
                                    "nan"),
                 "--budget": _beyond("must be a finite number >= 0.0", "-1"),
                 "--margin": _beyond("must be a finite number in [0.0, 0.999]", "1"),
                 "--ppl-tokens": _beyond("must be an integer >= 64", "10"),
                 "--weight-type": [("Q3", "invalid choice")]},
}
BAD_CASES = [(command, option, value, message) for command, options in BAD.items()
             for option, cases in options.items() for value, message in cases]


@pytest.mark.parametrize(("command", "option", "value", "message"), BAD_CASES,
                         ids=[f"{c} {o} {v}" for c, o, v, _ in BAD_CASES])
def test_bad_option_value_is_one_line(command, option, value, message, capsys):
    assert message in _usage_error([*command.split(), option, value], capsys, option)


TRAIN_HEAD_BAD = [
    ("--steps", "-1", "must be an integer >= 1"), ("--batch-size", "0", ">= 1"),
    ("--seq-len", "1", ">= 2"), ("--lr", "0", "> 0.0"), ("--lr", "nan", "got nan"),
    ("--weight-decay", "-1", ">= 0.0"), ("--warmup", "-1", ">= 0"),
    ("--feature-weight", "-0.5", ">= 0.0"), ("--ce-weight", "inf", "got inf"),
    ("--grad-clip", "0", "> 0.0"), ("--draft-vocab-size", "0", ">= 1"),
    ("--eval-every", "0", ">= 1"), ("--eval-tokens", "1", ">= 2"), ("--eval-top-k", "0", ">= 1"),
    ("--checkpoint-every", "0", ">= 1"), ("--seed", "-1", "in [0, "),
    ("--ttt-steps", "0", ">= 1"), ("--intermediate-size", "0", ">= 1"),
]


@pytest.mark.parametrize(("option", "value", "message"), TRAIN_HEAD_BAD,
                         ids=[f"{o} {v}" for o, v, _ in TRAIN_HEAD_BAD])
def test_train_head_bad_number_is_one_line(option, value, message, tiny, capsys):
    root, _ = tiny
    argv = ["train-head", "--corpus", str(root / "corpus.txt"), "--out", str(root / "head"),
            option, value]
    assert message in _usage_error(argv, capsys, option)


def test_no_option_of_any_command_is_a_bare_int_or_float():
    """Every numeric option goes through a range-checked type (argparse has no public way to
    list a parser's options, hence ``_actions``)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    numeric = 0
    for command, p in sub.choices.items():
        for action in p._actions:
            assert action.type not in (int, float), (command, action.option_strings)
            numeric += getattr(action.type, "__name__", "") == "parse"
    assert numeric >= 40  # the int_arg / float_arg options of the six commands


def test_every_train_config_field_has_a_range():
    from spec_adapters.app.cli.build import TRAIN_HEAD_TYPES
    from spec_adapters.eagle.train import TrainConfig

    numeric = {n for n, f in TrainConfig.__dataclass_fields__.items()
               if not isinstance(f.default, bool)}
    assert numeric == set(TRAIN_HEAD_TYPES)


# ------------------------------------------------------------------------------ path checks
def test_cache_dir_that_is_a_file(tiny, capsys):
    root, _ = tiny
    line = _usage_error(["train-drafters", "--cache-dir", str(root / "a-file")], capsys,
                        "--cache-dir")
    assert "is a file, not a folder" in line


def test_cache_dir_below_a_file(tiny, capsys):
    root, _ = tiny
    line = _usage_error(["generate", "--prompt", "x", "--cache-dir",
                         str(root / "a-file" / "sub")], capsys, "--cache-dir")
    assert "cannot create" in line and "a-file' is a file" in line


def test_cache_dir_from_the_environment_is_checked_too(tiny, capsys, monkeypatch):
    root, _ = tiny
    monkeypatch.setenv("HEDGESPEC_CACHE", str(root / "a-file"))
    _usage_error(["prepare-data"], capsys, "--cache-dir")


@pytest.mark.parametrize("command", ["bench", "demo"])
def test_out_folder_that_is_a_file(command, tiny, capsys):
    root, _ = tiny
    _usage_error([command, "--out", str(root / "a-file")], capsys, "--out")


@pytest.mark.parametrize(("option", "name", "message"),
                         [("--corpus", "nope.txt", "does not exist"),
                          ("--heldout", "nope.txt", "does not exist"),
                          ("--corpus", "", "is not a file"),
                          ("--out", "a-file", "is a file, not a folder")])
def test_train_head_paths(option, name, message, tiny, capsys):
    root, _ = tiny
    argv = {"--corpus": str(root / "corpus.txt"), "--out": str(root / "head")}
    argv[option] = str(root / name)
    flat = ["train-head", *(x for kv in argv.items() for x in kv)]
    assert message in _usage_error(flat, capsys, option)


def test_domains_module_main_checks_its_numbers(capsys):
    with pytest.raises(SystemExit) as e:
        domains_module.main(["--n-prompts", "-1"])
    assert e.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "argument --n-prompts: must be an integer >= 1" in lines[0]


def test_huge_thread_count_does_not_crash_the_process():
    """``torch.set_num_threads(100000)`` used to kill the process with SIGSEGV (exit 139)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "spec_adapters.app.cli", "generate", "--prompt",
                        "hi", "--threads", "100000"], capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"hedgespec generate: error: argument --threads: must be an integer in [1, "
        f"{MAX_THREADS}], got 100000 (see hedgespec generate --help)"]


# ----------------------------------------------------------------------- targets that fail
def _bad_targets(root: Path, good: Path) -> dict[str, Path]:
    bad = root / "bad-targets"
    bad.mkdir(exist_ok=True)
    cfg = bad / "bad-config"
    cfg.mkdir(exist_ok=True)
    (cfg / "config.json").write_text("{not json")
    no_tok = bad / "no-tokenizer"
    no_tok.mkdir(exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        (no_tok / name).write_bytes((good / name).read_bytes())
    text = bad / "text.gguf"
    text.write_text("this is a text file\n")
    rand = bad / "random.gguf"
    rand.write_bytes(os.urandom(4096))
    trunc = bad / "truncated.gguf"
    trunc.write_bytes(b"GGUF\x03\x00\x00\x00\x10")  # magic + version, then a cut-off count
    return {"bad-config": cfg, "no-tokenizer": no_tok, "text": text, "random": rand,
            "truncated": trunc}


@pytest.mark.parametrize("kind", ["bad-config", "no-tokenizer", "text", "random", "truncated"])
def test_target_that_does_not_load_is_one_line_naming_it(kind, tiny, capsys):
    root, good = tiny
    path = _bad_targets(root, good)[kind]
    line = _run_error(["train-drafters", *world_args(tiny, "code", target=path)], capsys)
    assert f"cannot load the target {path}" in line


# ---------------------------------------------------------------------- data-dependent errors
def test_prompt_longer_than_the_context(tiny, capsys):
    prompt = " ".join(["def"] * 12_000)  # the tiny target's context is 512 tokens
    line = _run_error(["generate", *world_args(tiny), "--max-train-tokens", "2000",
                       "--distilled-tokens", "0", "--prompt", prompt, "--colour", "never"],
                      capsys)
    assert line.startswith("hedgespec: error: --prompt: prompt of 12002 tokens is longer than "
                           "the target's context")


def test_train_head_corpus_of_three_tokens(tiny, capsys):
    root, folder = tiny
    (root / "three.txt").write_text("1 2 3")
    line = _run_error(["train-head", "--target", str(folder), "--cache-dir",
                       str(root / "cache"), "--threads", "1", "--corpus",
                       str(root / "three.txt"), "--out", str(root / "head3"), "--no-progress"],
                      capsys)
    assert "corpus has 3 tokens, fewer than seq_len=128" in line
    assert not (root / "head3").exists()


@pytest.mark.parametrize(("command", "loader"), [("prepare-data", "prepare_domains"),
                                                 ("train-drafters", "load_domains")])
def test_corrupt_cache_that_cannot_be_rebuilt(command, loader, tiny, capsys, monkeypatch):
    """A ``CacheError`` from the domain code (a corrupt file in a read-only cache, its source
    gone) is one line naming the file, not a traceback."""
    from spec_adapters.store import CacheError

    root, _ = tiny

    def corrupt(*args, **kwargs):
        raise CacheError(f"{root}/cache/domains/code/train.jsonl does not match its checksum")

    monkeypatch.setattr(domains_module, loader, corrupt)
    line = _run_error([command, *world_args(tiny, "code")], capsys)
    assert line == (f"hedgespec: error: {root}/cache/domains/code/train.jsonl does not match "
                    "its checksum")
