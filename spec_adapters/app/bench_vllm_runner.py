"""One method of ``hedgespec bench-vllm`` in one vLLM engine: the engine side of
:mod:`spec_adapters.app.bench_vllm`, run by the vLLM environment's interpreter.

``python -m spec_adapters.app.bench_vllm_runner JOB.json OUT.jsonl``. The job holds ``model``
(a folder), ``method``, ``prompts`` (``{"qid", "domain", "ids"}``, chat template applied),
``max_tokens``, ``concurrencies``, ``max_model_len``, ``max_num_seqs``, ``warmup_tokens`` and
``speculative_config`` (``null``: no speculation). The proposer's settings come, as when
serving, from ``$HEDGESPEC_VLLM_CONFIG``.

One engine (greedy, float32, eager, no prefix caching, so that every phase prefills the same
prompts) runs an untimed warm-up request, then one phase per concurrency ``c``:
:func:`closed_loop` keeps ``c`` requests in flight, starting the next prompt as soon as one
finishes. Each phase appends one JSON line to ``OUT.jsonl`` as soon as it is done (so an
interrupted method keeps its finished phases): the phase's wall time, per request its tokens,
time in flight and vLLM's own speculative counts (``per_request_spec_decode_metrics``:
accepted and drafted tokens), and the change of vLLM's engine-wide counters
(``LLM.get_metrics()``) over the phase.

Only :func:`_main` imports vLLM; the rest imports anywhere (tests drive :func:`closed_loop`
with a fake engine).
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

__all__ = ["COUNTERS", "closed_loop", "counter_totals"]

# vLLM's engine-wide Prometheus counters read around each phase
COUNTERS = ("vllm:generation_tokens", "vllm:spec_decode_num_drafts",
            "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")


def closed_loop(engine, prompts: list[dict], make_params: Callable[[], object],
                concurrency: int, tag: str, clock: Callable[[], float] = time.perf_counter
                ) -> tuple[list[dict], float]:
    """Run every prompt with ``concurrency`` requests in flight (the next one is added as soon
    as one finishes), in ``prompts`` order.

    Parameters
    ----------
    engine
        Has ``add_request(request_id, {"prompt_token_ids": ids}, params)`` and ``step() ->``
        finished outputs with ``request_id``, ``finished`` and ``outputs[0].token_ids`` /
        ``.spec_decode_metrics`` (vLLM's ``LLMEngine`` with final-only outputs).
    prompts : list of dict
        ``{"qid", "domain", "ids"}``.
    make_params : callable
        A fresh ``SamplingParams`` per request.
    concurrency : int
        Requests in flight (>= 1).
    tag : str
        Prefix of the request ids (unique per phase).

    Returns
    -------
    (requests, seconds)
        Per prompt, in order: ``qid``, ``domain``, ``tokens``, ``new_tokens``, ``seconds`` (added
        to finished), ``accepted`` / ``drafted`` draft tokens (0 without speculation); and the
        wall time from the first request added to the last finished.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    waiting = deque(enumerate(prompts))
    in_flight: dict[str, tuple[int, float]] = {}
    done: dict[int, dict] = {}
    start = clock()
    while waiting or in_flight:
        while waiting and len(in_flight) < concurrency:
            i, p = waiting.popleft()
            rid = f"{tag}-{i}"
            engine.add_request(rid, {"prompt_token_ids": list(p["ids"])}, make_params())
            in_flight[rid] = (i, clock())
        for out in engine.step():
            if not out.finished or out.request_id not in in_flight:
                continue
            i, t_add = in_flight.pop(out.request_id)
            seq = out.outputs[0]
            spec = getattr(seq, "spec_decode_metrics", None)
            accepted = (sum(j * n for j, n in enumerate(spec.histogram))
                        if spec is not None else 0)
            done[i] = {"qid": prompts[i]["qid"], "domain": prompts[i]["domain"],
                       "tokens": list(seq.token_ids), "new_tokens": len(seq.token_ids),
                       "seconds": clock() - t_add, "accepted": int(accepted),
                       "drafted": int(spec.num_draft_tokens) if spec is not None else 0}
    return [done[i] for i in range(len(prompts))], clock() - start


def counter_totals(metrics) -> dict[str, int]:
    """The :data:`COUNTERS` in a ``LLM.get_metrics()`` snapshot, summed over their labels."""
    out = dict.fromkeys(COUNTERS, 0)
    for m in metrics:
        if m.name in out and hasattr(m, "value"):
            out[m.name] += int(m.value)
    return out


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
              **({"per_request_spec_decode_metrics": "summary"} if spec else {}))
    start_s = time.perf_counter() - t
    engine = llm.llm_engine

    def params(max_tokens: int = job["max_tokens"]) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                              detokenize=False, output_kind=RequestOutputKind.FINAL_ONLY)

    first = job["prompts"][0]  # warm-up on half a prompt: its output is no request's answer
    warm = {**first, "ids": first["ids"][:max(1, len(first["ids"]) // 2)]}
    closed_loop(engine, [warm], lambda: params(job["warmup_tokens"]), 1, "warmup")
    for c in job["concurrencies"]:
        before = counter_totals(llm.get_metrics())
        requests, seconds = closed_loop(engine, job["prompts"], params, c, f"c{c}")
        after = counter_totals(llm.get_metrics())
        rec = {"method": job["method"], "concurrency": c, "seconds": seconds,
               "engine_start_s": start_s, "requests": requests,
               "counters": {k: after[k] - before[k] for k in COUNTERS}}
        with open(out_path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    _main(*sys.argv[1:3])
