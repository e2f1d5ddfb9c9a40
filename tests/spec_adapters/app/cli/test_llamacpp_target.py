"""One flag for the model in every engine: ``hedgespec generate --engine llamacpp --target
FILE.gguf`` decodes that GGUF (not the shipped one) over a pool built for it with the options
given (``--distilled-tokens 0``), and its greedy text is llama.cpp's own greedy decoding of the
same file; ``hedgespec quantize --target FILE.gguf`` writes each candidate type, measures it and
says which it keeps."""

from __future__ import annotations

import gguf
import pytest

from spec_adapters.app.cli import main
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf
from tests.spec_adapters.app.cli.tiny_cli import DOMS, tiny_world

pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny CLI world and a tiny Q4_1 GGUF in it: ``(root, gguf path)``."""
    root, _folder = tiny_world(tmp_path_factory, "llamacpp-target")
    path = root / "tiny.gguf"
    write_tiny_gguf(path, hidden=64, heads=1, kv_heads=1, ff=128, seed=5,
                    qtype=gguf.GGMLQuantizationType.Q4_1)
    return root, path


def test_generate_decodes_the_target_gguf_over_its_own_pool(world, capsys):
    from spec_adapters.llamacpp import GGUFTarget, plain_generate

    root, path = world
    argv = ["generate", "--engine", "llamacpp", "--target", str(path), "--cache-dir",
            str(root / "cache"), "--threads", "1", "--domains", DOMS, "--max-train-tokens",
            "2000", "--distilled-tokens", "0", "--prompt", "hello", "--max-new-tokens", "12",
            "--colour", "never"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "tokens in" in err and "Traceback" not in err
    target = GGUFTarget(path, n_ctx=256, n_threads=1)
    ids = target.tokenize(target.chat_prompt([{"role": "user", "content": "hello"}]),
                          add_special=False)
    want = target.detokenize(plain_generate(target, ids, 12))
    target.close()
    shown = "".join(part.split("]", 1)[1] for part in out.strip("\n").split("[") if "]" in part)
    assert shown == want


def test_quantize_measures_each_type_and_keeps_one(world, capsys):
    import json

    root, path = world
    argv = ["quantize", "--target", str(path), "--cache-dir", str(root / "cache"), "--threads",
            "1", "--domains", DOMS, "--ppl-tokens", "64"]
    assert main([*argv, "--types", "Q8_0,Q4_0"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in out if line.startswith("| ") and not line.startswith("| type")]
    assert [r.split(" | ")[0] for r in rows] == ["| source", "| Q8_0", "| Q4_0"]
    assert out[-2].startswith("chosen: ")
    choice = json.loads((root / "cache" / "gguf-types" / "tiny.choice.json").read_text())
    assert out[-1] == choice["path"] and (root / "cache" / "gguf-types" / "tiny.Q4_0.gguf"
                                          ).exists()
    assert {c["name"] for c in choice["candidates"]} == {"source", "Q8_0", "Q4_0"}
    # the written file decodes over its source's pool (same tokenizer): no pool of its own
    written = root / "cache" / "gguf-types" / "tiny.Q4_0.gguf"
    assert main(["generate", "--engine", "llamacpp", "--target", str(written), "--cache-dir",
                 str(root / "cache"), "--threads", "1", "--domains", DOMS, "--max-train-tokens",
                 "2000", "--distilled-tokens", "0", "--prompt", "hello", "--max-new-tokens",
                 "6", "--colour", "never"]) == 0
    assert "its tokenizer and drafter pool are that file's" in capsys.readouterr().err
    assert main([*argv, "--types", "Q8_0,Q3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--types: unknown Q3" in err
