"""``hedgespec serve`` end to end: vLLM's OpenAI server with the HedgeSpec proposer on
127.0.0.1, four concurrent chat completions through the ``openai`` client, outputs equal to a
plain (non-speculative) greedy engine, then a clean stop by SIGTERM. Every wait is bounded; the
whole test takes ~45 s here (two engine starts)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tests.vllm.engine_run import ROOT, run_engine, tiny_llama, tiny_tokenizer, vllm_env

V, MAX_TOKENS, START_S = 512, 32, 240.0  # START_S: a hang guard, not a speed goal


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(proc: subprocess.Popen, port: int, log) -> None:
    import urllib.request

    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited ({proc.returncode}):\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"server not ready after {START_S} s:\n{log.read_text()}")


def _counter(port: int, name: str) -> float:
    """One counter of the server's Prometheus ``/metrics``."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serve_answers_concurrent_chat_completions_like_plain_greedy(tmp_path):
    from openai import OpenAI

    model = tiny_tokenizer(tiny_llama(tmp_path / "tiny", vocab_size=V), vocab_size=V)
    rng = np.random.default_rng(0)
    texts = [" ".join(f"t{t}" for t in rng.integers(3, V, size=int(rng.integers(5, 30))))
             for _ in range(4)]
    port, log = _free_port(), tmp_path / "server.log"
    cmd = [sys.executable, "-m", "spec_adapters.app.cli", "serve", "--target", str(model),
           "--port", str(port), "--cache-dir", str(tmp_path / "cache"), "--",
           "--enforce-eager", "--dtype", "float32", "--max-model-len", "512"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=vllm_env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_ready(proc, port, log)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120,
                        max_retries=0)

        def ask(text: str) -> dict:
            return client.chat.completions.create(
                model="hedgespec", messages=[{"role": "user", "content": text}],
                max_tokens=MAX_TOKENS, temperature=0.0,
                extra_body={"ignore_eos": True, "return_token_ids": True}).model_dump()

        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(ask, texts, timeout=180))
        drafted = _counter(port, "vllm:spec_decode_num_draft_tokens_total")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, log.read_text()
        deadline = time.monotonic() + 10  # vLLM's engine processes go with it
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid), "server processes left after SIGTERM"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more

    prompts = [r["prompt_token_ids"] for r in replies]
    assert prompts[0][:5] == [int(w[1:]) for w in texts[0].split()[:5]]
    plain = run_engine({"model": str(model), "prompts": prompts, "max_tokens": MAX_TOKENS},
                       tmp_path, timeout=300)
    assert [r["choices"][0]["token_ids"] for r in replies] == plain["tokens"]
    assert drafted > 0  # the proposer drafted (the tiny model repeats itself: prompt lookup)
