"""``hedgespec serve --engine llamacpp``'s server on a tiny Q4_1 GGUF written by the test, over
real HTTP: completions equal to llama.cpp's own greedy decoding (plain, chat, streamed), the
per-drafter telemetry, and one clear 4xx per bad request."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import gguf
import pytest

from spec_adapters.app.serve_llamacpp import LlamaCppServer, RequestError, parse_request
from spec_adapters.drafters.point import PromptLookup, SuffixDraft
from spec_adapters.llamacpp import GGUFTarget, LlamaCppDecoder, plain_generate
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf

# llama.cpp decodes in a child first: a crash fails these tests, not their worker
pytestmark = pytest.mark.usefixtures("llama_cpp_decodes")

PROMPT = [5, 70, 71, 72, 5, 70, 71, 72, 5, 70]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-q4_1.gguf"
    write_tiny_gguf(path, hidden=64, heads=1, kv_heads=1, ff=128, seed=3,
                    qtype=gguf.GGMLQuantizationType.Q4_1)
    target = GGUFTarget(path, n_ctx=128, n_threads=1, prompt_cache=True)  # as served
    decoder = LlamaCppDecoder(target, [PromptLookup(1), PromptLookup(2), SuffixDraft()],
                              draft_length=3)
    stats = tmp_path_factory.mktemp("stats") / "stats.json"
    server = LlamaCppServer(decoder, ("127.0.0.1", 0), stats_path=stats)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, target, stats
    server.shutdown()
    server.server_close()
    target.close()


def _call(server, path: str, body=None) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    data = None if body is None else (body if isinstance(body, bytes)
                                      else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _events(raw: bytes) -> list:
    lines = [ln[len("data: "):] for ln in raw.decode().split("\n\n") if ln]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_a_greedy_completion_is_llama_cpps_greedy_text_streamed_or_not(served):
    server, target, stats_file = served
    truth = plain_generate(target, PROMPT, 40, stop_at_eog=True)
    status, raw = _call(server, "/v1/completions",
                        {"model": "hedgespec", "prompt": PROMPT, "max_tokens": 40,
                         "temperature": 0})
    assert status == 200
    body = json.loads(raw)
    assert body["choices"][0]["text"] == target.detokenize(truth)
    assert body["usage"]["completion_tokens"] == len(truth)
    # the prompt was cached by plain_generate's prefill: all of it but its last token reused
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": len(PROMPT) - 1}
    assert body["choices"][0]["finish_reason"] == (
        "stop" if target.is_eog(truth[-1]) else "length")
    status, raw = _call(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 40,
                                                    "temperature": 0, "stream": True})
    chunks = _events(raw)
    assert status == 200 and len(chunks) >= 2
    assert "".join(c["choices"][0]["text"] for c in chunks) == target.detokenize(truth)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == body["choices"][0][
        "finish_reason"] and all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    tele = json.loads(_call(server, "/stats")[1])
    assert tele["requests"] >= 2 and tele["prompt_tokens_cached"] >= 2 * (len(PROMPT) - 1)
    assert set(tele["drafters"]) == {"prompt-lookup-1", "prompt-lookup-2", "suffix"}
    assert json.loads(stats_file.read_text())["requests"] == tele["requests"]
    assert all(0 <= d["acceptance"] <= 3 for d in tele["drafters"].values())
    assert sum(d["chosen"] for d in tele["drafters"].values()) <= tele["rounds"]
    assert tele["row_ms"] == (1e3 * server.decoder.row_seconds).round(3).tolist()
    assert len(tele["row_ms"]) == 4 and min(tele["row_ms"]) > 0  # 1 .. K + 1 rows


def test_a_chat_is_templated_by_the_ggufs_own_template(served):
    server, target, _ = served
    messages = [{"role": "user", "content": "hello hello"}]
    ids = target.tokenize(target.chat_prompt(messages))
    assert ids[:1] == target.tokenize("<|im_start|>")
    truth = plain_generate(target, ids, 20)
    status, raw = _call(server, "/v1/chat/completions",
                        {"messages": messages, "max_tokens": 20, "temperature": 0})
    body = json.loads(raw)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant",
                                             "content": target.detokenize(truth)}
    status, raw = _call(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 20,
                                                         "temperature": 0, "stream": True})
    chunks = _events(raw)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == \
        target.detokenize(truth)


def test_a_sampled_request_is_decoded_with_its_own_sampling_settings(served):
    """top_k = 1 keeps the argmax alone: at any temperature the output is greedy's, so a
    setting lost on the way (top_k dropped, the temperature ignored) shows."""
    server, target, _ = served
    truth = target.detokenize(plain_generate(target, PROMPT, 24))
    for temperature in (0.8, 5.0):
        body = json.loads(_call(server, "/v1/completions", {
            "prompt": PROMPT, "max_tokens": 24, "temperature": temperature, "top_k": 1,
            "seed": 3})[1])
        assert body["choices"][0]["text"] == truth
    wild = {json.loads(_call(server, "/v1/completions", {
        "prompt": PROMPT, "max_tokens": 24, "temperature": 5.0, "seed": s})[1])[
        "choices"][0]["text"] for s in range(3)}
    assert truth not in wild  # the same temperature without top_k: not the greedy text


@pytest.mark.parametrize(("path", "body", "status", "says"), [
    ("/v1/completions", b"{not json", 400, "not JSON"),
    ("/v1/completions", {"prompt": "x", "stop": ["\n"]}, 400, r"unsupported fields \['stop'\]"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be"),
    ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature must be"),
    ("/v1/completions", {"prompt": [], "max_tokens": 2}, 400, "prompt must be"),
    ("/v1/completions", {"prompt": [10**6]}, 400, "prompt token ids must lie"),
    ("/v1/completions", {"prompt": list(range(3, 200)) * 3}, 400, "the context holds"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "does not exist"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n must be 1"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "needs a string 'role'"),
    ("/v1/chat/completions", {"prompt": "x"}, 400, "unsupported fields"),
    ("/v1/embeddings", {"input": "x"}, 404, "no endpoint"),
])
def test_a_bad_request_gets_one_clear_error_and_the_server_goes_on(served, path, body,
                                                                    status, says):
    import re

    server, _, _ = served
    before = json.loads(_call(server, "/stats")[1])["requests"]
    got, raw = _call(server, path, body)
    assert got == status and re.search(says, json.loads(raw)["error"]["message"])
    assert json.loads(_call(server, "/stats")[1])["requests"] == before
    assert _call(server, "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200


def test_parse_request_defaults_follow_openai():
    req = parse_request({"prompt": "x"}, chat=False, model="m")
    assert (req["max_tokens"], req["temperature"], req["top_p"], req["stream"]) == \
        (16, 1.0, 1.0, False)
    assert parse_request({"messages": []}, chat=True, model="m")["max_tokens"] is None
    with pytest.raises(RequestError, match="top_p must be in"):
        parse_request({"prompt": "x", "top_p": 0}, chat=False, model="m")


def test_the_command_refuses_vllm_options_and_a_target_llama_cpp_cannot_read(tmp_path, capsys):
    """One flag for the model in every engine: --target, which llama.cpp must read as GGUF."""
    from spec_adapters.app.cli import main

    assert main(["serve", "--engine", "llamacpp", "--", "--enforce-eager"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--engine llamacpp takes none (--enforce-eager)" in err
    (tmp_path / "notes.gguf").write_text("not a model")
    for target, why in ((tmp_path / "none.gguf", "none.gguf does not exist"),
                        (tmp_path, "is a transformers folder: pass the model's .gguf"),
                        (tmp_path / "notes.gguf", "notes.gguf is not one (no GGUF magic")):
        assert main(["serve", "--engine", "llamacpp", "--target", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err, err
