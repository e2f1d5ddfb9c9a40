"""One method of ``hedgespec bench-vllm`` in one vLLM engine: the engine side of
:mod:`spec_adapters.app.bench.vllm`, run by the vLLM environment's interpreter.

``python -m spec_adapters.app.bench.vllm_worker JOB.json OUT.jsonl``. The job holds ``model``
(a folder), ``method``, ``prompts`` (``{"qid", "domain", "ids"}``, chat template applied),
``max_tokens``, ``stop_at_eos``, ``temperature`` (with ``top_p`` when > 0), ``phases``
(``{"concurrency", "rate"}``), ``max_model_len``, ``max_num_seqs``, ``warmup_tokens``,
``seed``, ``stats`` (the proposer's stats file, or ``null``), ``speculative_config``
(``null``: no speculation) and ``engine_args`` (more ``LLM`` arguments, optional). The
proposer's settings come, as when serving, from ``$HEDGESPEC_VLLM_CONFIG``.

One engine (float32, eager, no prefix caching, so that every phase prefills the same prompts)
runs an untimed warm-up request, then its phases: :func:`run_requests` keeps at most
``concurrency`` requests in flight, starting the next prompt as soon as one finishes
(``rate`` null: every prompt is waiting at the start) or once it has arrived (``rate``
requests/s: Poisson arrivals, seeded). Each phase appends one JSON line to ``OUT.jsonl`` as
soon as it is done (so an interrupted method keeps its finished phases): the phase's wall
time, per request its tokens, time in flight and the engine steps that returned its tokens
(so its accepted drafts), the change of vLLM's
engine-wide counters (``LLM.get_metrics()``) over the phase, and the proposer's telemetry
(:mod:`spec_adapters.vllm.telemetry`, its counters' change over the phase).

Only :func:`_main` imports vLLM; the rest imports anywhere (tests drive :func:`run_requests`
with a fake engine).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

__all__ = ["COUNTERS", "STATS_COUNTERS", "arrival_times", "counter_totals", "run_requests"]

# vLLM's engine-wide Prometheus counters read around each phase
COUNTERS = ("vllm:generation_tokens", "vllm:spec_decode_num_drafts",
            "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
# the proposer's telemetry counters differenced over a phase
STATS_COUNTERS = ("steps", "steps_drafted", "rows", "rows_drafted", "drafted_tokens",
                  "propose_s", "step_s", "evaluation_s", "evaluated")


def arrival_times(n: int, rate: float | None, seed: int) -> list[float] | None:
    """Seconds after a phase's start at which each of ``n`` requests arrives: a Poisson process
    of ``rate`` requests/s (exponential gaps, ``seed``), the first at 0; ``None`` without a
    rate (all waiting at the start)."""
    if rate is None:
        return None
    if not rate > 0:
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate!r}")
    import numpy as np

    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]).tolist()


def run_requests(engine, prompts: list[dict], make_params: Callable[[int], object],
                 concurrency: int, tag: str, arrivals: list[float] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[list[dict], float]:
    """Run every prompt with at most ``concurrency`` requests in flight, in ``prompts`` order:
    the next one is added as soon as one finishes and (``arrivals``) its arrival time has come.

    Parameters
    ----------
    engine
        Has ``add_request(request_id, {"prompt_token_ids": ids}, params)`` and ``step() ->``
        outputs with ``request_id``, ``finished`` and ``outputs[0].token_ids`` (all tokens so
        far) (vLLM's ``LLMEngine`` with cumulative outputs).
    prompts : list of dict
        ``{"qid", "domain", "ids"}``.
    make_params : callable
        A fresh ``SamplingParams`` per request, from its index in ``prompts``.
    concurrency : int
        Requests in flight (>= 1).
    tag : str
        Prefix of the request ids (unique per phase).
    arrivals : list of float, optional
        Seconds after the start at which each prompt arrives (:func:`arrival_times`); an idle
        engine waits for the next arrival.

    Returns
    -------
    (requests, seconds)
        Per prompt, in order: ``qid``, ``domain``, ``tokens``, ``new_tokens``, ``seconds`` (added
        to finished), ``token_seconds`` (per new token, the time from added to the step that
        returned it), ``steps`` (the engine steps that returned tokens to it: its prefill's
        and one per verification) and ``accepted`` (``new_tokens - steps``: the drafted tokens
        it kept; 0 without speculation); and the wall time from the first request added to
        the last finished. Counted from the outputs, not from vLLM's per-request
        speculation metrics (``per_request_spec_decode_metrics``), which cost a speculative
        engine ~4% of its speed at 16 concurrent requests here and plain nothing.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    waiting = deque(enumerate(prompts))
    in_flight: dict[str, tuple[int, float, list[float]]] = {}
    steps: Counter[str] = Counter()  # per request, the steps that returned tokens to it
    done: dict[int, dict] = {}
    start = clock()
    while waiting or in_flight:
        if not in_flight and arrivals is not None:  # idle: wait for the next request
            sleep(max(0.0, arrivals[waiting[0][0]] - (clock() - start)))
        while waiting and len(in_flight) < concurrency and (
                arrivals is None or arrivals[waiting[0][0]] <= clock() - start):
            i, p = waiting.popleft()
            rid = f"{tag}-{i}"
            engine.add_request(rid, {"prompt_token_ids": list(p["ids"])}, make_params(i))
            in_flight[rid] = (i, clock(), [])
        for out in engine.step():
            if out.request_id not in in_flight:
                continue
            i, t_add, arrived = in_flight[out.request_id]
            seq = out.outputs[0]
            new = len(seq.token_ids) - len(arrived)
            arrived += [round(clock() - t_add, 5)] * new
            steps[out.request_id] += new > 0
            if not out.finished:
                continue
            del in_flight[out.request_id]
            done[i] = {"qid": prompts[i]["qid"], "domain": prompts[i]["domain"],
                       "tokens": list(seq.token_ids), "new_tokens": len(seq.token_ids),
                       "seconds": clock() - t_add, "token_seconds": arrived,
                       "steps": steps[out.request_id],
                       "accepted": len(seq.token_ids) - steps[out.request_id]}
    return [done[i] for i in range(len(prompts))], clock() - start


def counter_totals(metrics) -> dict[str, int]:
    """The :data:`COUNTERS` in a ``LLM.get_metrics()`` snapshot, summed over their labels."""
    out = dict.fromkeys(COUNTERS, 0)
    for m in metrics:
        if m.name in out and hasattr(m, "value"):
            out[m.name] += int(m.value)
    return out


def _stats(path: str | None) -> dict:
    """The proposer's telemetry file (``{}`` without one, or before its first write)."""
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def _stats_change(before: dict, after: dict) -> dict:
    """The :data:`STATS_COUNTERS` of ``after`` less ``before``'s, with ``after``'s step model
    and per-drafter figures (``{}`` without telemetry)."""
    if not after:
        return {}
    out = {k: after[k] - before.get(k, 0) for k in STATS_COUNTERS}
    return {**out, "step_model": after["step_model"], "drafters": after["drafters"]}


def _main(job_path: str, out_path: str) -> None:
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    job = json.loads(Path(job_path).read_text())
    spec = job["speculative_config"]
    t = time.perf_counter()
    llm = LLM(model=job["model"], skip_tokenizer_init=True, enforce_eager=True,
              dtype="float32", max_model_len=job["max_model_len"],
              max_num_seqs=job["max_num_seqs"], seed=0, speculative_config=spec,
              enable_prefix_caching=False, disable_log_stats=False,
              **job.get("engine_args", {}))
    start_s = time.perf_counter() - t
    engine = llm.llm_engine
    sampled = {"temperature": job["temperature"]} | (
        {"top_p": job["top_p"]} if job["temperature"] > 0 else {})

    def params(i: int, max_tokens: int = job["max_tokens"]) -> SamplingParams:
        seed = {"seed": job["seed"] + i} if job.get("seeded") and job["temperature"] > 0 else {}
        return SamplingParams(**sampled, **seed, max_tokens=max_tokens,
                              ignore_eos=not job["stop_at_eos"], detokenize=False,
                              output_kind=RequestOutputKind.CUMULATIVE)

    first = job["prompts"][0]  # warm-up on half a prompt: its output is no request's answer
    warm = {**first, "ids": first["ids"][:max(1, len(first["ids"]) // 2)]}
    run_requests(engine, [warm], lambda i: params(i, job["warmup_tokens"]), 1, "warmup")
    for n, phase in enumerate(job["phases"]):
        c, rate = phase["concurrency"], phase["rate"]
        before, stats_before = counter_totals(llm.get_metrics()), _stats(job["stats"])
        requests, seconds = run_requests(
            engine, job["prompts"], params, c, f"p{n}",
            arrival_times(len(job["prompts"]), rate, job["seed"]))
        after = counter_totals(llm.get_metrics())
        rec = {"method": job["method"], "concurrency": c, "rate": rate, "seconds": seconds,
               "engine_start_s": start_s, "requests": requests,
               "counters": {k: after[k] - before[k] for k in COUNTERS},
               "proposer": _stats_change(stats_before, _stats(job["stats"]))}
        with open(out_path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    _main(*sys.argv[1:3])
