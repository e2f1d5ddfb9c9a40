"""The vLLM proposer's own time per engine step at B requests in flight, offline (no vLLM).

:class:`~spec_adapters.vllm.HedgeSpecProposer` (standalone, the real pool) is driven as vLLM's
runner drives it: each step it gets every in-flight row's tokens and last sampled tokens, its
drafts are verified greedily against a known continuation, a finished request is replaced by
the next. The continuations are the pool's own distilled answers (``answers-*.npz``: text the
n-gram drafters were trained on, so drafts are accepted more often than on held-out prompts):
a timing harness, not an acceptance measure. An engine step is ``a + b B + d D`` ms of
:func:`engine_work` (matrix products streaming 16 MB of weights, so that the proposer starts
each step with the caches a forward pass left, as in the engine: its small numpy calls cost
10-20x their warm time then; after a sleep, more),
``D`` the tokens drafted in it (the step model the proposer fitted under load on the 2-core
EPYC: a ~ 41 ms, b ~ 2.6 ms a row; ``d``, a drafted token's price, 0 by default: every draft
then pays, so every row drafts; 16 in flight in the engine fitted ``35, 3.3, 2.8``, where most
rows abstain), so the proposer's clocks, prices and feedback budget see steps of the right
length. Prints, per
B, the proposer's ms a step, its share of the step, and where it goes (ms a step)::

    .venv/bin/python benchmarks/proposer_load.py --pool .cache/pool/<target id>

``--records results/<folder>/records.jsonl`` continues vLLM plain's outputs of a
``bench-vllm`` run instead (held-out answers: drafts accepted as in the benchmark, most rows
abstaining at high load, as they do there).
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import numpy as np

SECTIONS = ("_match", "_feed", "_gains", "_draft", "_forget_idle")
HEAD = [1, 2, 3]  # a prompt's first tokens (a chat template's), before 40 answer tokens


def continuations(pool: Path, length: int = 180, per_domain: int = 12) -> list[list[int]]:
    """The last ``per_domain`` answers of at least ``length`` tokens of each domain, cut there."""
    out = []
    for path in sorted(pool.glob("answers-*.npz")):
        data = np.load(path)
        ids, off = data["ids"].astype(np.int64), data["offsets"]
        answers = [ids[off[j]:off[j + 1]] for j in range(len(off) - 1)]
        out += [HEAD + a[:length].tolist() for a in answers if len(a) >= length][-per_domain:]
    if not out:
        raise SystemExit(f"{pool} holds no distilled answers (answers-*.npz): pass a pool "
                         "folder built by `make demo` or `hedgespec train-drafters`")
    return out


def served_outputs(records: Path, length: int = 80) -> list[list[int]]:
    """vLLM plain's outputs of at least ``length`` tokens in a ``bench-vllm`` results folder's
    ``records.jsonl`` (its first record of plain): held-out answers, so the drafts are accepted
    as often as in the benchmark, and most rows abstain under load as they do there."""
    for line in records.read_text().splitlines():
        rec = json.loads(line)
        if rec["method"] == "plain":
            return [HEAD + q["tokens"] for q in rec["requests"] if len(q["tokens"]) >= length]
    raise SystemExit(f"{records} holds no record of vLLM plain")


_WEIGHTS = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)


def engine_work(seconds: float) -> None:
    """Matrix products of 4 rows with a 2048 x 2048 float32 matrix for ``seconds``: a
    forward pass's effect on the caches, standing in for the engine's step."""
    rows, end = np.ones((4, 2048), np.float32), time.perf_counter() + seconds
    while time.perf_counter() < end:
        rows @ _WEIGHTS


def run(prop, streams: list[list[int]], batch: int, steps: int, step_s: float,
        clock: collections.Counter, draft_s: float = 0.0) -> dict:
    """``steps`` engine steps with at most ``batch`` requests in flight, each
    :func:`engine_work` of ``step_s`` plus ``draft_s`` per drafted token."""
    queue, live = list(range(len(streams))), []  # live: [stream, tokens, last sampled]
    spent = calls = tokens = slept = drafted = 0
    clock.clear()
    for _ in range(steps):
        while len(live) < batch and queue:
            s = streams[queue.pop(0)]
            live.append([s, s[:len(HEAD) + 41], [s[len(HEAD) + 40]]])
        if not live:
            break
        rows = np.zeros((len(live), max(len(t) for _, t, _ in live) + 8), np.int64)
        for r, (_, t, _) in enumerate(live):
            rows[r, :len(t)] = t
        start = time.perf_counter()
        drafts = prop.propose([sampled for _, _, sampled in live],
                              np.array([len(t) for _, t, _ in live]), rows)
        spent += time.perf_counter() - start
        calls += 1
        pause = step_s + draft_s * sum(len(d) for d in drafts)
        engine_work(pause)
        slept += pause
        drafted += sum(len(d) for d in drafts)
        kept = []
        for (s, t, _), d in zip(live, drafts, strict=True):
            n, a = len(t), 0
            while a < len(d) and n + a < len(s) and d[a] == s[n + a]:
                a += 1
            new = s[n:n + a + 1]
            tokens += len(new)
            if n + len(new) < len(s) - 1:
                kept.append([s, t + new, new])
        live = kept
    return {"batch": batch, "step_ms": 1e3 * slept / calls, "proposer_ms": 1e3 * spent / calls,
            "share": spent / slept, "tokens_per_step": tokens / calls,
            "drafted_per_step": drafted / calls,
            "sections_ms": {k: round(1e3 * v / calls, 3) for k, v in clock.items()}}


def timed(obj, name: str, clock: collections.Counter) -> None:
    """Replace ``obj.name`` by a wrapper adding its seconds to ``clock[name]``."""
    f = getattr(obj, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            clock[name] += time.perf_counter() - start

    setattr(obj, name, wrapper)


def main() -> None:
    from spec_adapters.vllm.config import ProposerConfig
    from spec_adapters.vllm.proposer import HedgeSpecProposer

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", type=Path, required=True, help="a drafter pool folder")
    p.add_argument("--records", type=Path, default=None,
                   help="continue vLLM plain's outputs in this bench-vllm records.jsonl "
                        "instead of the pool's distilled answers")
    p.add_argument("--batches", default="1,4,16,32", help="requests in flight, one run each")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--step-ms", default="41,2.6,0",
                   help="a, b[, d]: an engine step is a + b B + d D ms (D tokens drafted)")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--vocab-size", type=int, default=49152, help="the target's (SmolLM2's)")
    p.add_argument("--out", type=Path, default=None, help="a JSON file for the results")
    args = p.parse_args()
    a, b, d = ([float(x) for x in args.step_ms.split(",")] + [0.0])[:3]
    streams = served_outputs(args.records) if args.records else continuations(args.pool)
    results = []
    for batch in (int(x) for x in args.batches.split(",")):
        prop = HedgeSpecProposer.standalone(
            ProposerConfig(pool=str(args.pool), cache_dir=None, k=args.k, idle_steps=1),
            vocab_size=args.vocab_size, max_k=args.k, max_model_len=4096)
        clock: collections.Counter = collections.Counter()
        for name in SECTIONS:
            timed(prop, name, clock)
        step_s = (a + b * batch) / 1e3
        run(prop, streams, batch, 40, step_s, clock, d / 1e3)  # warm: numba, the model's fit
        r = run(prop, streams, batch, args.steps, step_s, clock, d / 1e3)
        results.append(r)
        print(f"B = {batch:2d}: proposer {r['proposer_ms']:.2f} ms a step, {r['share']:.1%} "
              f"of a {r['step_ms']:.0f} ms step ({r['tokens_per_step']:.1f} tokens, "
              f"{r['drafted_per_step']:.1f} drafted a step); "
              + ", ".join(f"{k.strip('_')} {v:.2f}" for k, v in r["sections_ms"].items()),
              flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
