"""``hedgespec serve`` end to end: vLLM's OpenAI server with the HedgeSpec proposer on
127.0.0.1 under a mixed load through the ``openai`` client (greedy, seeded and unseeded
sampled requests at once, streams dropped by the client), outputs equal to a plain
(non-speculative) engine, then a clean stop by SIGTERM. Every wait is bounded (hang guards,
not speed goals); two engine starts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from spec_adapters.app.serve import wait_ready
from spec_adapters.vllm.config import ENV_VAR
from tests.vllm.engine_run import ROOT, run_engine, tiny_llama, tiny_tokenizer, vllm_env

V, MAX_TOKENS, START_S = 512, 32, 240.0  # START_S: a hang guard, not a speed goal
CHAT = {"temperature": 0.7, "top_p": 0.9}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def test_serve_under_a_mixed_concurrent_load_answers_like_plain_vllm(tmp_path):
    """The user's $HEDGESPEC_VLLM_CONFIG (a trace, policy hedge) merged with --k 3, --threads
    1 and --stats; 16 concurrent chat completions (8 greedy, 4 seeded and 4 unseeded at
    T = 0.7, top-p 0.9) beside 4 streams the client drops after two chunks; then 4 greedy
    requests. Greedy and seeded answers equal vLLM plain's; the stats file holds every
    drafter's figures; a clean stop by SIGTERM."""
    from openai import OpenAI

    model = tiny_tokenizer(tiny_llama(tmp_path / "tiny", vocab_size=V, logit_scale=20.0),
                           vocab_size=V)
    rng = np.random.default_rng(0)

    def text() -> str:
        words = rng.integers(3, V, size=int(rng.integers(3, 8)))
        return " ".join(f"t{t}" for t in np.tile(words, 3))  # repeats: prompt lookup drafts

    greedy, seeded, unseeded, late = ([text() for _ in range(n)] for n in (8, 4, 4, 4))
    dropped = [text() for _ in range(4)]
    user_cfg = tmp_path / "user.json"
    user_cfg.write_text(json.dumps({"policy": "hedge", "trace": str(tmp_path / "trace.jsonl"),
                                    "pool": None}))
    port, log = _free_port(), tmp_path / "server.log"
    cmd = [sys.executable, "-m", "spec_adapters.app.cli", "serve", "--target", str(model),
           "--port", str(port), "--cache-dir", str(tmp_path / "cache"), "--k", "3",
           "--threads", "1", "--stats", str(tmp_path / "stats.json"), "--", "--enforce-eager",
           "--dtype", "float32", "--max-model-len", "512"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=vllm_env({ENV_VAR: str(user_cfg)}),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(proc, port, log, START_S)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=180,
                        max_retries=0)

        def ask(job: tuple[str, dict]) -> dict:
            content, sampling = job
            return client.chat.completions.create(
                model="hedgespec", messages=[{"role": "user", "content": content}],
                max_tokens=MAX_TOKENS, **sampling,
                extra_body={"ignore_eos": True, "return_token_ids": True}).model_dump()

        def drop(content: str) -> int:
            stream = client.chat.completions.create(
                model="hedgespec", messages=[{"role": "user", "content": content}],
                max_tokens=MAX_TOKENS, temperature=0.0, stream=True,
                extra_body={"ignore_eos": True})
            got = 0
            for _chunk in stream:
                got += 1
                if got == 2:
                    break
            stream.close()  # the client goes away mid-answer
            return got

        jobs = ([(t, {"temperature": 0.0}) for t in greedy]
                + [(t, {**CHAT, "seed": i + 1}) for i, t in enumerate(seeded)]
                + [(t, CHAT) for t in unseeded])
        with ThreadPoolExecutor(20) as pool:
            drops = pool.map(drop, dropped, timeout=300)
            replies = list(pool.map(ask, jobs, timeout=300))
            assert list(drops) == [2] * 4
        replies += [ask((t, {"temperature": 0.0})) for t in late]
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
    served = log.read_text().split("[shutdown]")[0]  # vLLM's abort at shutdown logs one
    assert "Traceback" not in served and served.count("200 OK") == 1 + 16 + 4 + 4 + 1

    prompts = [r["prompt_token_ids"] for r in replies]
    assert prompts[0][:3] == [int(w[1:]) for w in greedy[0].split()[:3]]
    sampling = [s for _t, s in jobs] + [{"temperature": 0.0}] * len(late)
    plain = run_engine({"model": str(model), "prompts": prompts, "max_tokens": MAX_TOKENS,
                        "sampling": sampling}, tmp_path, timeout=300)
    answers = [r["choices"][0]["token_ids"] for r in replies]
    compared = [i for i, s in enumerate(sampling) if s.get("temperature") == 0 or "seed" in s]
    assert len(compared) == 16
    assert [answers[i] for i in compared] == [plain["tokens"][i] for i in compared]
    assert all(len(a) == MAX_TOKENS for a in answers)
    # the user's file reached the proposer (its trace), merged with --k 3
    trace = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert trace and max(r["k"] for r in trace) <= 3 and drafted > 0
    # --stats: per drafter, its counterfactual acceptance and the share of rows it drafted for
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["steps"] > 0 and stats["drafters"]
    assert sum(d["chosen"] for d in stats["drafters"].values()) > 0
    assert all(0 <= d["chosen_share"] <= 1 and d["acceptance"] >= 0
               for d in stats["drafters"].values())
