"""``hedgespec bench-vllm``: HedgeSpec inside vLLM against vLLM's own speculation (issue 12).

One run over the benchmark prompts (the domains' held-out prompts, the shuffled mixed stream
of :func:`spec_adapters.app.bench.run.mixed_stream`, chat template applied with the target's
tokenizer), greedy or at a temperature (with top-p 0.9), at most ``max_new_tokens`` per
request. Requests stop at EOS, as users send them; ``stop_at_eos=False`` (``--ignore-eos``)
is a labelled stress setting: past its answer the 135M target mostly repeats itself, which
flatters every drafter exactly where speculation is weakest. Methods (:func:`method_specs`):

``plain``        vLLM without speculation (the reference: outputs and speed);
``ngram``        vLLM's ``{"method": "ngram", "num_speculative_tokens": K}``;
``suffix``       vLLM's ``{"method": "suffix"}`` with its defaults (SuffixDecoding, up to 24
                 tokens a step, sized by its own scores; needs Arctic Inference in the vLLM
                 environment: ``make vllm-suffix``); ``suffix-k``: at most ``K`` tokens a step;
``hedgespec``    :class:`spec_adapters.vllm.HedgeSpecProposer`, NormalHedge over the experts
                 (drafter, k), cost-aware (``k = 0``: no draft);
``exp3spec`` / ``ucbspec``  the same proposer with BanditSpec's learners over the drafters
                 (``K`` tokens every step, as published);
``fixed:<name>`` the proposer with one drafter always (every prompt-lookup size and every
                 n-gram drafter of the target's pool).

Phases: at most ``c`` requests in flight for each ``c`` of ``concurrencies`` (the next prompt
starts as soon as one finishes), and for each rate of ``arrival_rates`` requests arriving
over time (Poisson, that many per second, at most ``max(concurrencies)`` in flight), phase
``"<rate>/s"``. Each (method, phase) is one fresh vLLM engine in a
subprocess of the vLLM environment's interpreter (:func:`spec_adapters.app.serve.find_vllm_python`,
the environment of :func:`spec_adapters.app.serve.server_env`;
:mod:`spec_adapters.app.bench.vllm_worker`): the suffix drafter's memory of the stream must not
hold an earlier phase's answers to the same prompts (in one engine, the 4-concurrent phase
reached MAT 4.07 that way), and the warm-up request is half a prompt. One record per (method,
phase) is appended to ``<out>/records.jsonl`` as soon as its phase ends; a re-run with
the same settings skips the records there (resumable), a run with other settings is refused.

Per (method, concurrency) (:func:`summarize_vllm`): tokens/s = all new tokens / the phase's wall
time; MAT = new tokens / target steps, a request's steps being its new tokens minus its
accepted draft tokens (each step yields the accepted drafts + one token; vLLM's per-request
speculative counts); seconds per request (mean time in flight); speed-ups against ``plain``
and ``ngram`` in the same phase; per domain, tokens/s over the domain's requests' time in
flight; the share of request-steps that drafted (vLLM's counters: drafts / (generated tokens -
accepted tokens)); for the proposer, the share of engine steps in which any row drafted and its
own time's share of a step (its telemetry, :mod:`spec_adapters.vllm.telemetry`); and, greedy,
whether every output equals ``plain``'s token for token. Written to ``results.json``,
``tables.md``, ``bench_vllm.png`` and, one at a time, ``speedup_vs_repetition.png`` (each
prompt's speed-up against its plain output's repetition, :func:`repetition_panel`).

Presets (:data:`PRESETS`)::

    hedgespec bench-vllm --preset quick   # 2 prompts per domain, 64 tokens, c = 1, 4;
                                          # plain, ngram, hedgespec (~4 min on 2 cores)
    hedgespec bench-vllm --preset targets # 5 per domain, 256 tokens, c = 1, 4, 16; plain,
                                          # ngram, hedgespec: issue 12's targets
    hedgespec bench-vllm --preset load    # 5 per domain, 128 tokens, c = 1 .. 32 and 1
                                          # request/s arriving; plain, ngram, hedgespec
                                          # (add --temperature 0.7 for the chat setting)
    hedgespec bench-vllm --preset full    # the same sizes, every method (hours)
    hedgespec bench-vllm --preset demo    # make demo's stream: 1 per domain, c = 1
    hedgespec bench-vllm --preset headline  # 3 per domain, 128 tokens, c = 1; plain, ngram,
                                            # suffix, suffix-k, hedgespec (~15 min)
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from spec_adapters.app.bench.config import TOP_P
from spec_adapters.app.bench.plots import plot_speedup_vs_repetition
from spec_adapters.app.bench.records import Records, check_settings
from spec_adapters.app.bench.repetition import (
    LOOP_SCOPES,
    REPEAT_THRESHOLD,
    is_looping,
    repeated_share,
)
from spec_adapters.app.bench.run import mixed_stream
from spec_adapters.app.log import log
from spec_adapters.app.serve import ROOT, SPEC_CLASS, find_vllm_python, server_env
from spec_adapters.vllm.config import ProposerConfig, config_from_mapping
from spec_adapters.vllm.proposer import HedgeSpecProposer

__all__ = ["PRESETS", "VLLM_LABELS", "VllmBenchConfig", "drafter_names", "label", "markdown",
           "method_specs", "plot_vllm", "repetition_panel", "run_bench_vllm", "shared_settings",
           "summarize_vllm"]

LEARNERS = ("plain", "ngram", "suffix", "suffix-k", "hedgespec", "exp3spec", "ucbspec")
VLLM_LABELS = {"plain": "vLLM plain", "ngram": "vLLM ngram",
               "suffix": "vLLM suffix (Arctic Inference, its depth 24)",
               "suffix-k": "vLLM suffix", "exp3spec": "EXP3Spec proposer",
          "hedgespec": "HedgeSpec proposer (NormalHedge, cost-aware)",
          "ucbspec": "UCBSpec proposer"}
# issue 12's targets: (name, method, reference, concurrency; None = per domain, c = 1), goal
TARGETS = (("one at a time, x vLLM ngram", "hedgespec", "ngram", 1, 1.25),
           ("one at a time, x vLLM plain", "hedgespec", "plain", 1, 1.6),
           ("one at a time, x vLLM suffix", "hedgespec", "suffix", 1, 1.0),
           ("16 concurrent, x vLLM plain", "hedgespec", "plain", 16, 1.0),
           ("one at a time, worst domain x vLLM plain", "hedgespec", "plain", None, 0.97))
# issue 26's, over a concurrency sweep: (name, key, goal, the goal is a ceiling)
LOAD_TARGETS = (("every concurrency, worst x vLLM plain", "x_plain", 1.0, False),
                ("every concurrency, worst x vLLM ngram", "x_ngram", 1.1, False),
                ("proposer's share of a step at the highest concurrency", "overhead", 0.03,
                 True))
WARMUP_TOKENS = 8
# the proposer settings every method sets itself (method_specs, the telemetry file)
METHOD_KEYS = ("pool", "cache_dir", "policy", "k", "cost_aware", "seed", "stats")


@dataclass(frozen=True)
class VllmBenchConfig:
    """Sizes of one vLLM benchmark run (see :data:`PRESETS`).

    Attributes
    ----------
    queries_per_domain : int
        Held-out prompts per domain in the mixed stream.
    max_new_tokens : int
    concurrencies : tuple of int
        Requests in flight, one phase each (ascending).
    methods : tuple of str or None
        Subset of :data:`LEARNERS` and ``fixed:<drafter>``; ``None``: :data:`LEARNERS` and every
        drafter fixed.
    k : int
        ``num_speculative_tokens`` of every speculating method (K).
    seed : int
        Stream order, arrival times and the proposer's seed.
    stop_at_eos : bool
        ``False``: EOS ignored, every request runs to ``max_new_tokens`` (a stress setting).
    temperature : float
        0: greedy; above, sampled with top-p :data:`TOP_P`.
    arrival_rates : tuple of float
        Requests per second of the arriving-over-time phases.
    proposer : tuple of (key, value)
        More settings of the proposer's methods (keys of ``$HEDGESPEC_VLLM_CONFIG``, e.g.
        ``(("prior_rounds", 0),)``); not those each method sets (:data:`METHOD_KEYS`).
    """

    queries_per_domain: int = 5
    max_new_tokens: int = 256
    concurrencies: tuple[int, ...] = (1, 4, 16)
    methods: tuple[str, ...] | None = None
    k: int = 4
    seed: int = 0
    stop_at_eos: bool = True
    temperature: float = 0.0
    arrival_rates: tuple[float, ...] = ()
    proposer: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        for name in ("queries_per_domain", "max_new_tokens", "k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        cs = tuple(self.concurrencies)
        if not cs or any(c < 1 for c in cs) or list(cs) != sorted(set(cs)):
            raise ValueError(f"concurrencies must be ascending integers >= 1, got {cs}")
        bad = [m for m in self.methods or () if m not in LEARNERS and not m.startswith("fixed:")]
        if bad:
            raise ValueError(f"unknown methods {bad}; expected {LEARNERS} or fixed:<drafter>")
        object.__setattr__(self, "concurrencies", cs)
        rates = tuple(self.arrival_rates)
        if any(not r > 0 for r in rates) or list(rates) != sorted(set(rates)):
            raise ValueError(f"arrival_rates must be ascending numbers > 0, got {rates}")
        object.__setattr__(self, "arrival_rates", rates)
        if not 0 <= self.temperature < float("inf"):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        extra = dict(self.proposer)
        taken = sorted(set(extra) & set(METHOD_KEYS))
        if taken:
            raise ValueError(f"proposer settings {taken} are set by each method; give others")
        config_from_mapping({**extra, "pool": None}, source="bench-vllm --proposer-settings")
        object.__setattr__(self, "proposer", tuple(sorted(extra.items())))
        if self.methods is not None:
            object.__setattr__(self, "methods", tuple(self.methods))


PRESETS: dict[str, VllmBenchConfig] = {
    "quick": VllmBenchConfig(queries_per_domain=2, max_new_tokens=64, concurrencies=(1, 4),
                             methods=("plain", "ngram", "hedgespec")),
    "full": VllmBenchConfig(),
    # the targets only: the benchmark prompts at full size, plain / ngram / HedgeSpec
    "targets": VllmBenchConfig(methods=("plain", "ngram", "hedgespec")),
    # make demo: the demo's mixed stream through vLLM, one request at a time
    "demo": VllmBenchConfig(queries_per_domain=1, max_new_tokens=40, concurrencies=(1,),
                            methods=("plain", "ngram", "hedgespec")),
    # one headline per engine (docs/benchmark.md): 3 per domain, 128 tokens, one at a time;
    # vLLM plain, ngram, suffix (its defaults and at K; `make vllm-suffix`) and HedgeSpec
    "headline": VllmBenchConfig(queries_per_domain=3, max_new_tokens=128, concurrencies=(1,),
                                methods=("plain", "ngram", "suffix", "suffix-k", "hedgespec")),
    # issue 26: the load sweep on requests that stop at EOS
    "load": VllmBenchConfig(max_new_tokens=128, concurrencies=(1, 2, 4, 8, 16, 32),
                            arrival_rates=(1.0,), methods=("plain", "ngram", "hedgespec")),
}


def phase_key(concurrency: int, rate: float | None) -> str:
    """A phase's name: ``"16"`` (16 in flight) or ``"1/s"`` (arriving at 1 request/s)."""
    return str(concurrency) if rate is None else f"{rate:g}/s"


class VllmRecords(Records):
    """The append-only ``records.jsonl`` of :class:`spec_adapters.app.bench.run.Records`, one
    record per (method, phase)."""

    @staticmethod
    def key(r: dict) -> tuple:
        return (r["method"], phase_key(int(r["concurrency"]), r.get("rate")))


# ------------------------------------------------------------------------------------------
# methods
# ------------------------------------------------------------------------------------------
def drafter_names(pool: Path, vocab_size: int) -> list[str]:
    """The proposer's drafters over ``pool`` (``fixed:<i>`` indexes this list), read off the
    proposer itself: prompt lookup, then the pool's n-gram drafters.

    Raises
    ------
    ValueError
        ``pool`` holds no complete n-gram pool of ``hedgespec train-drafters``' settings.
    """
    return HedgeSpecProposer.standalone(ProposerConfig(pool=str(pool)), vocab_size=vocab_size,
                                        max_k=1, max_model_len=2).names


def method_specs(method: str, names: list[str], pool: Path, cache_dir: Path, k: int,
                 seed: int) -> tuple[dict | None, dict | None]:
    """``(speculative_config, proposer settings)`` of one method (``None``: not used).

    Raises
    ------
    ValueError
        An unknown method or a fixed drafter not in ``names``.
    """
    if method == "plain":
        return None, None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k}, None
    if method == "suffix":  # as its users run it: the depth is its own (24) and adaptive
        return {"method": "suffix"}, None
    if method == "suffix-k":
        return {"method": "suffix", "num_speculative_tokens": k}, None
    if method == "hedgespec":
        policy, cost_aware = "normalhedge", True
    elif method in ("exp3spec", "ucbspec"):
        policy, cost_aware = method, False
    elif method.startswith("fixed:") and method[6:] in names:
        policy, cost_aware = f"fixed:{names.index(method[6:])}", False
    else:
        raise ValueError(f"unknown method {method!r}; expected {LEARNERS} or fixed:<one of "
                         f"{names}>")
    spec = {"method": "custom_class", "model": SPEC_CLASS, "num_speculative_tokens": k}
    return spec, {"pool": str(pool), "cache_dir": str(cache_dir), "policy": policy, "k": k,
                  "cost_aware": cost_aware, "seed": seed}


def _methods(cfg: VllmBenchConfig, names: list[str]) -> list[str]:
    return list(cfg.methods) if cfg.methods is not None else \
        [*LEARNERS, *(f"fixed:{n}" for n in names)]


# ------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------
def run_bench_vllm(target: Path, tokenizer, domains: dict, pool: Path, cfg: VllmBenchConfig,
                   out_dir, *, cache_dir, threads: int = 2) -> dict:
    """Run (or resume) every (method, concurrency) into ``out_dir``; return the summary.

    Parameters
    ----------
    target : Path
        The served model's folder (transformers format, what vLLM loads).
    tokenizer
        The target's tokenizer (chat template).
    domains : dict name -> Domain
        The benchmark prompts are ``Domain.prompts``.
    pool : Path
        The target's pool folder (:func:`spec_adapters.vllm.target_pool.pool_folder`), holding
        the pool ``hedgespec train-drafters`` builds by default.
    cfg : VllmBenchConfig
    out_dir : path-like
        ``records.jsonl``, ``settings.json``, ``logs/<method>.log``, then ``results.json``,
        ``tables.md``, ``bench_vllm.png``, ``speedup_vs_repetition.png``.
    cache_dir : path-like
    threads : int
        ``OMP_NUM_THREADS`` of the engine.

    Raises
    ------
    ValueError
        ``pool`` holds no complete n-gram pool (:func:`drafter_names`), ``out_dir`` holds
        records of other settings, or ``suffix`` is asked for without Arctic Inference.
    RuntimeError
        An engine failed (the message names its log); finished records are kept.
    FileNotFoundError
        No vLLM environment.
    """
    from transformers import AutoConfig

    from spec_adapters.app.domains import chat_ids

    pool, cache_dir = Path(pool).resolve(), Path(cache_dir).resolve()
    if not pool.is_dir():
        raise ValueError(f"no drafter pool for {target} in {pool}: run `hedgespec "
                         "train-drafters` (with the same --target and --cache-dir) first")
    vocab_size = AutoConfig.from_pretrained(str(target), local_files_only=True).vocab_size
    names = drafter_names(pool, vocab_size)
    methods = _methods(cfg, names)
    for m in methods:
        method_specs(m, names, pool, cache_dir, cfg.k, cfg.seed)  # unknown: fail now
    stream = mixed_stream(domains, cfg.queries_per_domain, cfg.seed)
    prompts = [{"qid": q.qid, "domain": q.domain, "ids": chat_ids(tokenizer, q.prompt).tolist()}
               for q in stream]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"bench_vllm": shared_settings(cfg), "target": str(Path(target).resolve()),
                "pool": str(pool), "drafters": names, "threads": threads,
                "prompts": [p["qid"] for p in prompts]}
    check_settings(out, settings)
    records = VllmRecords(out / "records.jsonl")
    python = find_vllm_python()
    if {"suffix", "suffix-k"} & set(methods):
        _check_suffix(python)
    job = {"model": str(Path(target).resolve()), "prompts": prompts,
           "max_tokens": cfg.max_new_tokens, "warmup_tokens": WARMUP_TOKENS,
           "stop_at_eos": cfg.stop_at_eos, "temperature": cfg.temperature, "top_p": TOP_P,
           "seed": cfg.seed,
           "max_model_len": max(len(p["ids"]) for p in prompts) + cfg.max_new_tokens + cfg.k + 8,
           "max_num_seqs": max(cfg.concurrencies)}
    phases = [(c, None) for c in cfg.concurrencies] + \
        [(max(cfg.concurrencies), r) for r in cfg.arrival_rates]
    for m in methods:
        todo = [(c, r) for c, r in phases if not records.has(m, phase_key(c, r))]
        if not todo:
            continue
        log(f"bench-vllm: {m}, phases {', '.join(phase_key(c, r) for c, r in todo)} "
            f"({len(prompts)} prompts x {cfg.max_new_tokens} tokens)")
        spec, settings_m = method_specs(m, names, pool, cache_dir, cfg.k, cfg.seed)
        if settings_m is not None:
            settings_m |= dict(cfg.proposer)
        for c, r in todo:  # a fresh engine per phase: no memory of another phase's answers
            for rec in _run_engine(python, {**job, "method": m, "speculative_config": spec,
                                            "phases": [{"concurrency": c, "rate": r}]},
                                   settings_m, out, threads):
                records.add(rec)
    records_list = list(records.rows.values())
    summary = summarize_vllm(records_list, greedy=cfg.temperature == 0, cap=cfg.max_new_tokens)
    summary["settings"] = settings
    (out / "results.json").write_text(json.dumps(
        {**summary, "records": [{**r, "requests": [{k: v for k, v in q.items() if k != "tokens"}
                                                   for q in r["requests"]]}
                                for r in records_list]}, indent=1))
    (out / "tables.md").write_text(markdown(summary))
    plot_vllm(summary, out / "bench_vllm.png")
    if records.has("plain", "1"):
        plot_speedup_vs_repetition([repetition_panel(records_list, "1", cfg.k)],
                                   out / "speedup_vs_repetition.png", REPEAT_THRESHOLD)
    return summary


def shared_settings(cfg: VllmBenchConfig) -> dict:
    """What every phase of one results folder shares: the prompts, sizes, K and seed (its
    methods and concurrencies may be added to by later runs)."""
    return {k: v for k, v in asdict(cfg).items() if k not in ("methods", "concurrencies")}


def _check_suffix(python: Path) -> None:
    """Raise ``ValueError`` unless vLLM's ``suffix`` method can run: Arctic Inference's
    suffix tree imports in the vLLM environment ``python``."""
    rc = subprocess.run([str(python), "-c", "import arctic_inference.suffix_decoding"],
                        capture_output=True, check=False).returncode
    if rc != 0:
        raise ValueError(f"vLLM's suffix method needs Arctic Inference's suffix tree in "
                         f"{python.parent.parent}, and it does not import: run `make "
                         "vllm-suffix` (builds arctic-inference 0.3.0 against the pinned CPU "
                         "torch)")


def _run_engine(python: Path, job: dict, proposer: dict | None, out: Path, threads: int):
    """Run one engine in a subprocess (its output in ``out/logs/<method>.log``); yield the
    records of the phases it finished, then raise ``RuntimeError`` naming the log if it
    failed (so that the finished phases are kept)."""
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    log_path = logs / (f"{job['method'].replace(':', '_')}-"
                       + "-".join(phase_key(p["concurrency"], p["rate"]).replace("/", "per")
                                  for p in job["phases"]) + ".log")
    with tempfile.TemporaryDirectory(prefix="hedgespec-bench-vllm-") as tmp:
        job_path, res_path, cfg_path, stats_path = (
            Path(tmp) / n for n in ("job.json", "out.jsonl", "proposer.json", "stats.json"))
        if proposer is not None:  # the proposer's telemetry, read by the runner per phase
            proposer = {**proposer, "stats": str(stats_path)}
        job_path.write_text(json.dumps({**job, "stats": proposer and str(stats_path)}))
        cfg_path.write_text(json.dumps(proposer or {}))
        env = server_env(python, cfg_path, threads=threads)
        env["OMP_NUM_THREADS"] = str(threads)
        with open(log_path, "w") as fh:
            rc = subprocess.run([str(python), "-m", "spec_adapters.app.bench.vllm_worker",
                                 str(job_path), str(res_path)], cwd=ROOT, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, check=False).returncode
        lines = res_path.read_text().splitlines() if res_path.is_file() else []
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue  # a line cut by a killed engine: that phase is simply redone
    if rc != 0:
        raise RuntimeError(f"the vLLM engine of {job['method']} failed (exit status {rc}); "
                           f"see {log_path}")


# ------------------------------------------------------------------------------------------
# aggregation, tables, plot
# ------------------------------------------------------------------------------------------
def _drafting(r: dict) -> dict:
    """How much a phase drafted: the share of request-steps that drafted (vLLM's counters),
    and from the proposer's telemetry the share of engine steps in which any row drafted and
    its own time's share of the steps (``None`` where not known)."""
    cn = r.get("counters") or {}
    steps = cn.get("vllm:generation_tokens", 0) - cn.get("vllm:spec_decode_num_accepted_tokens",
                                                         0)
    pr = r.get("proposer") or {}
    return {"drafted_share": cn.get("vllm:spec_decode_num_drafts", 0) / steps if steps > 0
            else None,
            "steps_drafted_share": pr["steps_drafted"] / pr["steps"] if pr.get("steps")
            else None,
            "overhead": pr["propose_s"] / pr["step_s"] if pr.get("step_s") else None,
            "drafters": pr.get("drafters")}


def _stats(reqs: list[dict], seconds: float) -> dict:
    """tok/s over ``seconds``, MAT and mean time in flight of some requests."""
    tok = sum(q["new_tokens"] for q in reqs)
    steps = sum(q["new_tokens"] - q["accepted"] for q in reqs)
    return {"tok_s": tok / seconds if seconds > 0 else None,
            "mat": tok / steps if steps > 0 else None,
            "s_per_request": sum(q["seconds"] for q in reqs) / len(reqs) if reqs else None,
            "requests": len(reqs), "new_tokens": tok, "steps": steps,
            "accepted": sum(q["accepted"] for q in reqs),
            "drafted": sum(q["drafted"] for q in reqs)}


def _ratio(a, b):
    return a / b if a is not None and b else None


def summarize_vllm(records: list[dict], greedy: bool = True, cap: int | None = None) -> dict:
    """The benchmark's tables from its records (see the module docstring).

    Parameters
    ----------
    records : list of dict
    greedy : bool
        Whether outputs are compared with ``plain``'s (sampled outputs differ by chance).
    cap : int, optional
        ``max_new_tokens``: the share of requests that reached it rather than EOS is reported.

    Returns
    -------
    dict
        ``concurrencies`` and ``phases`` (:func:`phase_key`, the concurrencies first);
        ``methods``: method -> phase -> ``tok_s``, ``mat``, ``s_per_request``, ``requests``,
        ``new_tokens``, ``steps``, ``accepted``, ``drafted``, ``seconds``, ``x_plain``,
        ``x_ngram``, ``x_suffix``, ``drafted_share``, ``steps_drafted_share``, ``overhead``,
        ``drafters``
        (:func:`_drafting`), ``cap_share`` (requests that reached ``cap`` rather than EOS;
        ``None`` without ``cap``), ``repeated_share`` (the mean share of an output inside
        repeated 5-grams), ``loops`` (with a ``plain`` record: :data:`LOOP_SCOPES` -> the
        stats and ``x_plain`` of the requests whose plain output does not loop / loops),
        ``identical`` (greedy: every output
        equals ``plain``'s in that phase; ``None`` without a ``plain`` record or sampled),
        ``mismatched`` (those qids) and ``domains``: domain -> ``tok_s`` (over the time in
        flight of its requests), ``mat``, ``x_plain``; ``domains``; ``targets``: issue 12's
        goals (:data:`TARGETS`) that the records can answer, each ``name``, ``value``,
        ``goal``, ``met``.
    """
    by = {VllmRecords.key(r): r for r in records}
    phases = sorted({c for _m, c in by}, key=lambda c: (c.endswith("/s"), float(c.split("/")[0])))
    methods: dict = defaultdict(dict)
    for (m, c), r in sorted(by.items(), key=lambda x: (_order(x[0][0]), phases.index(x[0][1]))):
        row = {**_stats(r["requests"], r["seconds"]), "seconds": r["seconds"], **_drafting(r),
               "cap_share": None if cap is None else
               sum(q["new_tokens"] >= cap for q in r["requests"]) / max(len(r["requests"]), 1)}
        per: dict = defaultdict(list)
        for q in r["requests"]:
            per[q["domain"]].append(q)
        row["domains"] = {d: _stats(qs, sum(q["seconds"] for q in qs))
                          for d, qs in sorted(per.items())}
        row["repeated_share"] = (float(np.mean([repeated_share(q["tokens"])
                                                for q in r["requests"]]))
                                 if r["requests"] else None)
        plain = by.get(("plain", c))
        if plain is not None:  # the requests whose plain output loops, and the others
            loops = {q["qid"]: is_looping(q["tokens"]) for q in plain["requests"]}
            split: dict = defaultdict(list)
            for q in r["requests"]:
                if q["qid"] in loops:
                    split[LOOP_SCOPES[loops[q["qid"]]]].append(q)
            row["loops"] = {s: _stats(qs, sum(q["seconds"] for q in qs))
                            for s, qs in split.items()}
        if plain is not None and greedy:
            ref = {q["qid"]: q["tokens"] for q in plain["requests"]}
            row["mismatched"] = [q["qid"] for q in r["requests"]
                                 if ref.get(q["qid"]) != q["tokens"]]
            row["identical"] = not row["mismatched"]
        else:
            row["mismatched"], row["identical"] = [], None
        methods[m][c] = row
    for rows in methods.values():
        for c, row in rows.items():
            base = {ref: methods.get(ref, {}).get(c) for ref in ("plain", "ngram", "suffix")}
            for ref, b in base.items():
                row[f"x_{ref}"] = _ratio(row["tok_s"], b["tok_s"]) if b else None
            for key in ("domains", "loops"):
                for d, dr in row.get(key, {}).items():
                    b = (base["plain"] or {}).get(key, {}).get(d)
                    dr["x_plain"] = _ratio(dr["tok_s"], b["tok_s"]) if b else None
    domains = sorted({d for rows in methods.values() for row in rows.values()
                      for d in row["domains"]})
    return {"concurrencies": [int(c) for c in phases if not c.endswith("/s")],
            "phases": phases, "methods": dict(methods), "domains": domains,
            "targets": _targets(methods)}


def _order(method: str) -> tuple:
    return (LEARNERS.index(method), "") if method in LEARNERS else (len(LEARNERS), method)


def _targets(methods: dict) -> list[dict]:
    """Issue 12's goals (:data:`TARGETS`) and, over a sweep of two or more concurrencies, issue
    26's (:data:`LOAD_TARGETS`) that the records can answer."""
    out = []
    for name, m, ref, c, goal in TARGETS:
        row = methods.get(m, {}).get(str(c or 1))
        if row is None:
            continue
        if c is None:
            ratios = [dr["x_plain"] for dr in row["domains"].values()]
            value = min(ratios) if ratios and None not in ratios else None
        else:
            value = row[f"x_{ref}"]
        if value is not None:
            out.append({"name": name, "value": value, "goal": goal, "met": value >= goal})
    rows = {c: r for c, r in methods.get("hedgespec", {}).items() if not c.endswith("/s")}
    if len(rows) < 2:
        return out
    for name, key, goal, at_most in LOAD_TARGETS:
        if key == "overhead":
            values = [rows[max(rows, key=int)]["overhead"]]
        else:
            values = [r[key] for r in rows.values()]
        if values and None not in values:
            value = max(values) if at_most else min(values)
            out.append({"name": name, "value": value, "goal": goal,
                        "met": value <= goal if at_most else value >= goal})
    return out


def label(method: str, k: int | None = None) -> str:
    """Display name of a method (``k``: shown for vLLM ngram and suffix-k)."""
    if method.startswith("fixed:"):
        return f"fixed {method[6:]}"
    return VLLM_LABELS[method] + (f" (K = {k})" if method in ("ngram", "suffix-k") and k
                                  else "")


def _f(x, fmt: str = "{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def _phase(c: str) -> str:
    if c.endswith("/s"):
        return f"requests arriving at {c} (Poisson)"
    return "one request at a time" if c == "1" else f"{c} concurrent requests"


def markdown(summary: dict) -> str:
    """Per phase the speed table (tok/s, x plain, x ngram, MAT, s / request, the share of
    request-steps that drafted, the proposer's share of a step, outputs equal to plain) and
    the per-domain speed-up table, then the targets."""
    st = summary.get("settings", {}).get("bench_vllm", {})
    k, temp = st.get("k"), st.get("temperature", 0.0)
    how = ("greedy" if not temp else f"T = {temp:g}, top-p {TOP_P}") + (
        ", EOS ignored (stress setting)" if st.get("stop_at_eos") is False else
        ", requests stop at EOS")
    lines = []
    for c in summary.get("phases", [str(c) for c in summary["concurrencies"]]):
        rows = [(m, v[c]) for m, v in summary["methods"].items() if c in v]
        lines += [f"### vLLM, {_phase(c)} ({how})", "",
                  "| method | tok/s | x plain | x plain, not looping / looping | x ngram | MAT | "
                  "s / request | drafted steps | proposer time | repeated 5-grams | at cap | "
                  "outputs = plain |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m, r in rows:
            same = {None: "–", True: "yes"}.get(r["identical"], f"no ({len(r['mismatched'])})")
            loops = r.get("loops", {})
            split = " / ".join(f"{_f(loops[s]['x_plain'])} ({loops[s]['requests']})"
                               if s in loops else "–" for s in LOOP_SCOPES)
            lines.append(f"| {label(m, k)} | {_f(r['tok_s'], '{:.1f}')} | {_f(r['x_plain'])} | "
                         f"{split} | {_f(r['x_ngram'])} | {_f(r['mat'])} | "
                         f"{_f(r['s_per_request'], '{:.1f}')} | "
                         f"{_f(r.get('drafted_share'), '{:.0%}')} | "
                         f"{_f(r.get('overhead'), '{:.1%}')} | "
                         f"{_f(r.get('repeated_share'), '{:.0%}')} | "
                         f"{_f(r.get('cap_share'), '{:.0%}')} | {same} |")
        lines += ["", f"### vLLM per domain, tok/s x vLLM plain, {_phase(c)}", "",
                  "| method | " + " | ".join(summary["domains"]) + " |",
                  "|---|" + "---|" * len(summary["domains"])]
        for m, r in rows:
            lines.append(f"| {label(m, k)} | " + " | ".join(
                _f(r["domains"].get(d, {}).get("x_plain")) for d in summary["domains"]) + " |")
        lines.append("")
    if summary["targets"]:
        lines += ["### Targets (HedgeSpec proposer)", "",
                  "| target | value | goal | met |", "|---|---|---|---|"]
        lines += [f"| {t['name']} | {t['value']:.3g} | {t['goal']:.3g} | "
                  f"{'yes' if t['met'] else 'no'} |" for t in summary["targets"]]
        lines.append("")
    return "\n".join(lines)


def repetition_panel(records: list[dict], phase: str = "1", k: int | None = None
                     ) -> tuple[str, list[float], dict[str, list[float]]]:
    """What :func:`~spec_adapters.app.bench.plots.plot_speedup_vs_repetition` draws for one
    phase: per prompt the share of ``plain``'s output inside repeated 5-grams and each other
    method's speed-up over ``plain`` on it (tokens over time in flight).

    Raises
    ------
    ValueError
        The phase has no ``plain`` record.
    """
    by = {VllmRecords.key(r): r for r in records}
    if ("plain", phase) not in by:
        raise ValueError(f"no plain record in phase {phase!r}: nothing to compare with")
    plain = {q["qid"]: q for q in by["plain", phase]["requests"]}
    qids = list(plain)

    def tok_s(q: dict) -> float:
        return q["new_tokens"] / q["seconds"]

    speedups = {}
    for (m, c), r in sorted(by.items(), key=lambda x: _order(x[0][0])):
        mine = {q["qid"]: q for q in r["requests"]}
        if c == phase and m != "plain" and set(mine) >= set(qids):
            speedups[label(m, k)] = [tok_s(mine[q]) / tok_s(plain[q]) for q in qids]
    return (_phase(phase), [repeated_share(plain[q]["tokens"]) for q in qids], speedups)


def plot_vllm(summary: dict, path: Path) -> Path:
    """``path`` (PNG): tokens/s, speed-up over vLLM plain and the share of request-steps that
    drafted against the concurrency, one line per method (the fixed drafters thin and grey)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = summary.get("settings", {}).get("bench_vllm", {})
    k, temp = st.get("k"), st.get("temperature", 0.0)
    cs = summary["concurrencies"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for m, rows in summary["methods"].items():
        fixed = m.startswith("fixed:")
        style = {"color": "0.7", "lw": 0.8} if fixed else {"marker": "o", "label": label(m, k)}
        have = [c for c in cs if str(c) in rows]
        for ax, key in zip(axes, ("tok_s", "x_plain", "drafted_share"), strict=True):
            ys = [rows[str(c)].get(key) for c in have]
            ax.plot(have, [float("nan") if y is None else y for y in ys], **style)
    for ax, ylabel in zip(axes, ("tokens / s", "x vLLM plain", "share of request-steps "
                                 "that drafted"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cs, [str(c) for c in cs])
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(ylabel)
    axes[1].axhline(1.0, color="k", lw=0.6, ls="--")
    axes[0].legend(fontsize=7)
    fig.suptitle("HedgeSpec in vLLM vs vLLM's own speculation ("
                 + ("greedy" if not temp else f"T = {temp:g}") + ")")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
