"""``hedgespec serve --engine llamacpp``: an OpenAI-compatible HTTP server over
:class:`~spec_adapters.llamacpp.LlamaCppDecoder`.

Endpoints (the OpenAI wire format, as vLLM and llama.cpp's server answer it)::

    GET  /v1/models             the one model served
    POST /v1/completions        {"prompt": text or token ids, "max_tokens": 16, ...}
    POST /v1/chat/completions   {"messages": [{"role", "content"}, ...], "max_tokens": ...}
    GET  /stats                 per-drafter telemetry (below); /health: {"status": "ok"}

Sampling fields: ``temperature`` (default 1, 0 = greedy), ``top_p`` (1), ``top_k`` (off),
``seed`` (a fresh one per request when absent), ``stream`` (server-sent events, one chunk per
round of speculation, then ``data: [DONE]``). Any other field but ``model``, ``user``, ``n``
(1) and ``stream_options`` is refused with a 400 that names it, as is a bad value: a request
is never served with settings it did not ask for. A chat is templated by the GGUF's own chat
template (:meth:`~spec_adapters.llamacpp.GGUFTarget.chat_prompt`, llama.cpp's
``llama_chat_apply_template``); no system message is added.

One llama.cpp context holds one sequence, so requests are decoded one at a time in arrival
order (a lock); the HTTP side is a thread per connection (``ThreadingHTTPServer``). What was
reused: llama.cpp's chat templating and the OpenAI format; llama-cpp-python's own server
(``llama_cpp.server``) was not, as it needs FastAPI and uvicorn and drives its high-level
``Llama.generate``, which has no place for a learner choosing the drafter per round.

Telemetry (``GET /stats``, and the ``--stats`` file rewritten atomically after each request)::

    {"requests", "new_tokens", "rounds", "seconds", "tok_s", "mean_accepted_tokens",
     "non_target_share": the part of the decoding time outside llama_decode,
     "row_ms": one llama_decode of 1 .. K + 1 rows, as the decoder priced them at load,
     "prompt_tokens_cached": prompt tokens the target's prompt cache held (a chat template's
                             system prompt: decoded once, not per request),
     "drafters": {name: {"chosen": rounds it drafted, "chosen_share": of all rounds,
                         "acceptance": mean tokens its K-token draft would have had accepted
                                       (counterfactual, over every evaluated round)}}}
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from spec_adapters.llamacpp.decoder import LlamaCppDecoder, LlamaOutput

__all__ = ["LlamaCppServer", "RequestError", "ServedStats", "parse_request"]

_SAMPLING = {"max_tokens", "temperature", "top_p", "top_k", "seed", "stream"}
_IGNORED = {"model", "user", "n", "stream_options"}


class RequestError(ValueError):
    """A request the server refuses: ``status`` (400, 404) and the message sent back."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def parse_request(body: dict, chat: bool, model: str) -> dict:
    """The decoding settings of one request body (see the module docstring), checked:
    ``{"prompt" | "messages", "max_tokens", "temperature", "top_p", "top_k", "seed",
    "stream"}``; :class:`RequestError` names the first bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    field = "messages" if chat else "prompt"
    unknown = set(body) - _SAMPLING - _IGNORED - {field}
    if unknown:
        raise RequestError(f"unsupported fields {sorted(unknown)}; this server reads {field}, "
                           f"{', '.join(sorted(_SAMPLING))}")
    if body.get("model", model) != model:
        raise RequestError(f"the model {body['model']!r} does not exist; this server serves "
                           f"{model!r}", 404)
    if body.get("n", 1) != 1:
        raise RequestError("n must be 1 (one choice per request)")
    if field not in body:
        raise RequestError(f"the request needs {field!r}")
    req = {field: body[field],
           "max_tokens": body.get("max_tokens", None if chat else 16),
           "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
           "top_k": body.get("top_k"), "seed": body.get("seed"),
           "stream": body.get("stream", False)}
    p = req[field]
    if not chat and not (isinstance(p, str) or (isinstance(p, list) and p and all(
            isinstance(t, int) and not isinstance(t, bool) for t in p))):
        raise RequestError("prompt must be a string or a non-empty list of token ids")

    def number(name: str, lo: float, hi: float, integer: bool = False) -> None:
        v = req[name]
        ok = isinstance(v, int if integer else (int, float)) and not isinstance(v, bool)
        if not ok or not lo <= v <= hi:
            raise RequestError(f"{name} must be {'an integer' if integer else 'a number'} in "
                               f"[{lo}, {hi}], got {v!r}")

    if req["max_tokens"] is not None:
        number("max_tokens", 1, 2**31, integer=True)
    number("temperature", 0.0, 100.0)
    number("top_p", 0.0, 1.0)
    if req["top_p"] == 0:
        raise RequestError("top_p must be in (0, 1], got 0 (nothing kept)")
    if req["top_k"] is not None:
        number("top_k", 1, 2**31, integer=True)
    if req["seed"] is not None:
        number("seed", 0, 2**63 - 1, integer=True)
    if not isinstance(req["stream"], bool):
        raise RequestError(f"stream must be true or false, got {req['stream']!r}")
    return req


class ServedStats:
    """The telemetry of the module docstring, summed over the requests served (read and added
    to under a lock of its own: ``/stats`` is answered while a request decodes)."""

    def __init__(self, names: list[str], path: Path | None = None,
                 row_ms: list[float] | None = None) -> None:
        self.names, self.path, self.row_ms = list(names), path, row_ms
        self._lock = threading.Lock()
        self.requests = self.new_tokens = self.rounds = self.evaluated = 0
        self.prompt_reused = 0
        self.seconds = self.target_seconds = 0.0
        self.chosen = np.zeros(len(names), np.int64)
        self.accepted = np.zeros(len(names))

    def add(self, stats: dict) -> None:
        """One request's :class:`~spec_adapters.llamacpp.decoder.LlamaOutput` stats."""
        with self._lock:
            self._add(stats)
            if self.path is not None:
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_text(json.dumps(self._as_dict()))
                os.replace(tmp, self.path)  # a reader never sees half a file

    def as_dict(self) -> dict:
        with self._lock:
            return self._as_dict()

    def _add(self, stats: dict) -> None:
        self.requests += 1
        self.new_tokens += stats["new_tokens"]
        self.rounds += stats["target_calls"]
        self.prompt_reused += stats["prompt_reused"]
        self.seconds += stats["total_seconds"]
        self.target_seconds += stats["target_seconds"] + stats["prefill_seconds"]
        for i, k in zip(stats["chosen"], stats["lengths"], strict=True):
            self.chosen[i] += k > 0
        self.evaluated += stats["evaluated_rounds"]
        self.accepted += np.asarray(stats["counterfactual_accepted"]) * stats["evaluated_rounds"]

    def _as_dict(self) -> dict:
        rounds = max(self.rounds, 1)
        return {"requests": self.requests, "new_tokens": self.new_tokens,
                "rounds": self.rounds, "seconds": self.seconds,
                "tok_s": self.new_tokens / self.seconds if self.seconds else None,
                "mean_accepted_tokens": self.new_tokens / rounds if self.rounds else None,
                "non_target_share": (1 - self.target_seconds / self.seconds
                                     if self.seconds else None),
                "row_ms": self.row_ms, "prompt_tokens_cached": self.prompt_reused,
                "drafters": {n: {"chosen": int(self.chosen[j]),
                                 "chosen_share": self.chosen[j] / rounds,
                                 "acceptance": (self.accepted[j] / self.evaluated
                                                if self.evaluated else None)}
                             for j, n in enumerate(self.names)}}


class LlamaCppServer(ThreadingHTTPServer):
    """The HTTP server: ``LlamaCppServer(decoder, ("127.0.0.1", 8000)).serve_forever()``.

    Parameters
    ----------
    decoder : LlamaCppDecoder
        Its learner carries over from request to request (a stream of queries).
    address : tuple of (str, int)
        Port 0 picks a free port (``server_address`` says which).
    model_name : str, default "hedgespec"
        The model id clients send and ``/v1/models`` lists.
    stats_path : Path, optional
        Where the telemetry is rewritten after each request.
    """

    daemon_threads = True

    def __init__(self, decoder: LlamaCppDecoder, address: tuple[str, int],
                 model_name: str = "hedgespec", stats_path: Path | None = None) -> None:
        super().__init__(address, _Handler)
        self.decoder, self.model_name = decoder, model_name
        self.stats = ServedStats(decoder.names, stats_path,
                                 (1e3 * decoder.row_seconds).round(3).tolist())
        self.lock = threading.Lock()  # one sequence in the llama.cpp context at a time

    def complete(self, req: dict, chat: bool) -> Iterator[tuple[str, str | None, dict | None]]:
        """Decode one parsed request as it goes: ``(text delta, None, None)`` per round (a
        round whose tokens end inside a UTF-8 character waits for the next), then ``("",
        finish reason, usage)`` (``"stop"``: an end-of-generation token, ``"length"``:
        ``max_tokens`` or the context's end). The decoding runs in a thread of its own, in
        arrival order (the lock), and hands each round over a queue."""
        target = self.decoder.target
        text = target.chat_prompt(req["messages"]) if chat else req["prompt"]
        prompt = target.tokenize(text) if isinstance(text, str) else list(text)
        room = target.n_ctx - len(prompt)
        if room < 1:
            raise RequestError(f"the prompt has {len(prompt)} tokens; the context holds "
                               f"{target.n_ctx}")
        seed = req["seed"] if req["seed"] is not None else secrets.randbits(63)
        rounds: queue.Queue = queue.Queue()

        def decode() -> None:
            try:
                with self.lock:
                    out = self.decoder.generate(
                        prompt, min(req["max_tokens"] or room, room),
                        temperature=req["temperature"], top_k=req["top_k"],
                        top_p=req["top_p"], seed=seed, on_round=lambda r: rounds.put(r.tokens))
                    self.stats.add(out.stats)
                rounds.put(out)
            except Exception as err:  # handed to the request's thread, raised there
                rounds.put(err)

        threading.Thread(target=decode, daemon=True).start()
        done: list[int] = []
        shown = ""
        while not isinstance(item := rounds.get(), LlamaOutput):
            if isinstance(item, Exception):
                raise item
            done += item
            now = target.detokenize(done)
            if not now.endswith("\ufffd"):
                yield now[len(shown):], None, None
                shown = now
        stop = bool(item.tokens) and target.is_eog(item.tokens[-1])
        yield target.detokenize(done)[len(shown):], "stop" if stop else "length", {
            "prompt_tokens": len(prompt), "completion_tokens": len(item.tokens),
            "total_tokens": len(prompt) + len(item.tokens),
            "prompt_tokens_details": {"cached_tokens": item.stats["prompt_reused"]},
            "mean_accepted_tokens": item.stats["mean_accepted_tokens"]}


class _Handler(BaseHTTPRequestHandler):
    server: LlamaCppServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:
        pass  # quiet: one line per request on stderr is noise for a benchmark

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "owned_by": "hedgespec"}]})
        elif self.path == "/stats":
            self._json(200, self.server.stats.as_dict())
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._json(404, _error(f"no endpoint {self.path}", 404))

    def do_POST(self) -> None:
        chat = self.path == "/v1/chat/completions"
        try:
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                raise RequestError(f"no endpoint {self.path}", 404)
            size = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(size) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise RequestError(f"the request body is not JSON ({err})") from None
            req = parse_request(body, chat, self.server.model_name)
            pieces = self.server.complete(req, chat)
            first = next(pieces)  # decodes the request: an error is still a 4xx
        except RequestError as err:
            return self._json(err.status, _error(str(err), err.status))
        except ValueError as err:  # a chat llama.cpp cannot template, a token id out of range
            return self._json(400, _error(str(err), 400))
        except Exception as err:  # the engine failed: say so, keep serving
            return self._json(500, _error(f"{type(err).__name__}: {err}", 500))
        head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
                "created": int(time.time()), "model": self.server.model_name}
        if not req["stream"]:
            text, reason, usage = first
            for more, reason, usage in pieces:  # noqa: B007 (the last one's are the answer's)
                text += more
            choice = ({"message": {"role": "assistant", "content": text}} if chat
                      else {"text": text, "logprobs": None})
            return self._json(200, {**head, "object": "chat.completion" if chat
                                    else "text_completion", "usage": usage,
                                    "choices": [{"index": 0, **choice,
                                                 "finish_reason": reason}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"
        for j, (text, reason, usage) in enumerate([first, *pieces]):
            delta = ({"delta": {"content": text, **({"role": "assistant"} if j == 0 else {})}}
                     if chat else {"text": text, "logprobs": None})
            chunk = {**head, "object": kind,
                     "choices": [{"index": 0, **delta, "finish_reason": reason}]}
            if reason is not None:
                chunk["usage"] = usage
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _error(message: str, status: int) -> dict:
    kind = {404: "NotFoundError", 500: "InternalServerError"}.get(status, "BadRequestError")
    return {"error": {"message": message, "type": kind, "code": status}}
