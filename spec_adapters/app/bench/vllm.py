"""``hedgespec bench-vllm``: HedgeSpec inside vLLM against vLLM's own speculation (issue 12).

One run over the benchmark prompts (the domains' held-out prompts, the shuffled mixed stream
of :func:`spec_adapters.app.bench.run.mixed_stream`, chat template applied with the target's
tokenizer), greedy or at a temperature (with top-p 0.9), at most ``max_new_tokens`` per
request. Requests stop at EOS, as users send them; ``stop_at_eos=False`` (``--ignore-eos``)
is a labelled stress setting: past its answer the 135M target mostly repeats itself, which
flatters every drafter exactly where speculation is weakest. Methods (:func:`method_specs`):

``plain``        vLLM without speculation (the reference: outputs and speed);
``plain-sync``   the same with vLLM's asynchronous scheduling off, as vLLM runs every
                 speculative method but EAGLE's (a diagnostic: :data:`ENGINE_VARIANTS`);
``ngram``        vLLM's ``{"method": "ngram", "num_speculative_tokens": K}``;
``suffix``       vLLM's ``{"method": "suffix"}`` with its defaults (SuffixDecoding, up to 24
                 tokens a step, sized by its own scores; needs Arctic Inference in the vLLM
                 environment: ``make vllm-suffix``); ``suffix-k``: at most ``K`` tokens a step;
``hedgespec``    :class:`spec_adapters.vllm.HedgeSpecProposer`, NormalHedge over the experts
                 (drafter, k), cost-aware (``k = 0``: no draft);
``hedgespec-lengths`` / ``-unpriced`` / ``-allscored`` / ``-noconsensus``  HedgeSpec with
                 stop rules, the price of drafting at all, label-efficient scoring, the
                 consensus drafter off (:data:`ABLATIONS`);
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
reached MAT 4.07 that way), and the warm-up request is half a prompt. With ``repeats``
(``--repeats``) every (method, phase) runs that many times, interleaved (every method's run
1, then every method's run 2): phases of one setting a few minutes apart differ by up to ~15%
on a shared 2-core VM (vLLM plain at 8 in flight, T = 0.7: 99.8 and 116.4 tok/s), so a single
pair of phases is a ratio of two moments. One record per (method, phase, run) is appended to
``<out>/records.jsonl`` as soon as its phase ends; a re-run with the same settings skips the
records there (resumable; more runs may be added later), a run with other settings is
refused.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from spec_adapters.app.bench.config import TOP_P
from spec_adapters.app.bench.plots import plot_speedup_vs_repetition
from spec_adapters.app.bench.records import check_settings
from spec_adapters.app.bench.repetition import REPEAT_THRESHOLD
from spec_adapters.app.bench.run import mixed_stream
from spec_adapters.app.bench.vllm_summary import (
    ABLATIONS,
    ENGINE_VARIANTS,
    LEARNERS,
    VllmRecords,
    markdown,
    phase_key,
    plot_vllm,
    repetition_panel,
    summarize_vllm,
)
from spec_adapters.app.log import log
from spec_adapters.app.serve import ROOT, SPEC_CLASS, find_vllm_python, server_env
from spec_adapters.vllm.config import ProposerConfig, config_from_mapping
from spec_adapters.vllm.proposer import HedgeSpecProposer

__all__ = ["PRESETS", "VllmBenchConfig", "drafter_names", "method_specs", "run_bench_vllm",
           "shared_settings"]

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
        Subset of :data:`LEARNERS`, :data:`ABLATIONS`, :data:`ENGINE_VARIANTS` and
        ``fixed:<drafter>``; ``None``: :data:`LEARNERS` and every drafter fixed.
    k : int
        ``num_speculative_tokens`` of every speculating method (K).
    seed : int
        Stream order, arrival times and the proposer's seed.
    stop_at_eos : bool
        ``False``: EOS ignored, every request runs to ``max_new_tokens`` (a stress setting).
    temperature : float
        0: greedy; above, sampled with top-p :data:`TOP_P`.
    seeded : bool
        Sampled requests carry a seed each (``seed + prompt index``, the OpenAI API's
        ``seed``): every method's outputs must then equal ``plain``'s, as greedy ones do.
    arrival_rates : tuple of float
        Requests per second of the arriving-over-time phases.
    proposer : tuple of (key, value)
        More settings of the proposer's methods (keys of ``$HEDGESPEC_VLLM_CONFIG``, e.g.
        ``(("prior_rounds", 0),)``); not those each method sets (:data:`METHOD_KEYS`).
    repeats : int
        Runs of every (method, phase), interleaved: run 1 of every method, then run 2, ...
        (a machine's speed drifts by several per cent over minutes, so one phase each is a
        ratio of two moments); the tables pool them and give each run's ratio to plain.
    """

    queries_per_domain: int = 5
    max_new_tokens: int = 256
    concurrencies: tuple[int, ...] = (1, 4, 16)
    methods: tuple[str, ...] | None = None
    k: int = 4
    seed: int = 0
    stop_at_eos: bool = True
    temperature: float = 0.0
    seeded: bool = False
    arrival_rates: tuple[float, ...] = ()
    proposer: tuple[tuple[str, object], ...] = ()
    repeats: int = 1

    def __post_init__(self) -> None:
        for name in ("queries_per_domain", "max_new_tokens", "k", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        cs = tuple(self.concurrencies)
        if not cs or any(c < 1 for c in cs) or list(cs) != sorted(set(cs)):
            raise ValueError(f"concurrencies must be ascending integers >= 1, got {cs}")
        bad = [m for m in self.methods or () if m not in LEARNERS and m not in ABLATIONS
               and m not in ENGINE_VARIANTS and not m.startswith("fixed:")]
        if bad:
            raise ValueError(f"unknown methods {bad}; expected {LEARNERS}, {tuple(ABLATIONS)}, "
                             f"{tuple(ENGINE_VARIANTS)} or fixed:<drafter>")
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
    # the headline setting (docs/benchmark.md, "Current results"): 3 per domain, 128 tokens,
    # one at a time; vLLM plain, ngram, suffix (its defaults and at K; `make vllm-suffix`) and
    # HedgeSpec
    "headline": VllmBenchConfig(queries_per_domain=3, max_new_tokens=128, concurrencies=(1,),
                                methods=("plain", "ngram", "suffix", "suffix-k", "hedgespec")),
    # issue 26: the load sweep on requests that stop at EOS
    "load": VllmBenchConfig(max_new_tokens=128, concurrencies=(1, 2, 4, 8, 16, 32),
                            arrival_rates=(1.0,), methods=("plain", "ngram", "hedgespec")),
}


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
    if method == "plain" or method in ENGINE_VARIANTS:
        return None, None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k}, None
    if method == "suffix":  # as its users run it: the depth is its own (24) and adaptive
        return {"method": "suffix"}, None
    if method == "suffix-k":
        return {"method": "suffix", "num_speculative_tokens": k}, None
    if method == "hedgespec" or method in ABLATIONS:
        policy, cost_aware = "normalhedge", True
    elif method in ("exp3spec", "ucbspec"):
        policy, cost_aware = method, False
    elif method.startswith("fixed:") and method[6:] in names:
        policy, cost_aware = f"fixed:{names.index(method[6:])}", False
    else:
        raise ValueError(f"unknown method {method!r}; expected {LEARNERS}, {tuple(ABLATIONS)} "
                         f"or fixed:<one of {names}>")
    spec = {"method": "custom_class", "model": SPEC_CLASS, "num_speculative_tokens": k}
    return spec, {"pool": str(pool), "cache_dir": str(cache_dir), "policy": policy, "k": k,
                  "cost_aware": cost_aware, "seed": seed, **ABLATIONS.get(method, {})}


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
        The target's pool folder (:func:`spec_adapters.store.target_pool.pool_folder`), holding
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
           "seed": cfg.seed, "seeded": cfg.seeded,
           "max_model_len": max(len(p["ids"]) for p in prompts) + cfg.max_new_tokens + cfg.k + 8,
           "max_num_seqs": max(cfg.concurrencies)}
    phases = [(c, None) for c in cfg.concurrencies] + \
        [(max(cfg.concurrencies), r) for r in cfg.arrival_rates]
    for run in range(cfg.repeats):  # each run goes through every method: interleaved
        for m in methods:
            todo = [(c, r) for c, r in phases if not records.has(m, phase_key(c, r), run)]
            if not todo:
                continue
            log(f"bench-vllm: {m}, phases {', '.join(phase_key(c, r) for c, r in todo)} "
                f"({len(prompts)} prompts x {cfg.max_new_tokens} tokens"
                + (f"; run {run + 1} of {cfg.repeats})" if cfg.repeats > 1 else ")"))
            spec, settings_m = method_specs(m, names, pool, cache_dir, cfg.k, cfg.seed)
            if settings_m is not None:
                settings_m |= dict(cfg.proposer)
            for c, r in todo:  # a fresh engine per phase: no memory of another phase's answers
                for rec in _run_engine(python, {**job, "method": m, "speculative_config": spec,
                                                "engine_args": ENGINE_VARIANTS.get(m, {}),
                                                "phases": [{"concurrency": c, "rate": r}]},
                                       settings_m, out, threads, run):
                    records.add({**rec, "run": run})
    records_list = list(records.rows.values())
    summary = summarize_vllm(records_list, exact=cfg.temperature == 0 or cfg.seeded,
                             cap=cfg.max_new_tokens)
    summary["settings"] = settings
    (out / "results.json").write_text(json.dumps(
        {**summary, "records": [{**r, "requests": [{k: v for k, v in q.items() if k != "tokens"}
                                                   for q in r["requests"]]}
                                for r in records_list]}, indent=1))
    (out / "tables.md").write_text(markdown(summary))
    plot_vllm(summary, out / "bench_vllm.png")
    if records.has("plain", "1", 0):
        plot_speedup_vs_repetition([repetition_panel(records_list, "1", cfg.k)],
                                   out / "speedup_vs_repetition.png", REPEAT_THRESHOLD)
    return summary


def shared_settings(cfg: VllmBenchConfig) -> dict:
    """What every phase of one results folder shares: the prompts, sizes, K and seed (its
    methods, concurrencies and repeats may be added to by later runs; ``seeded`` only when set, so
    folders written before it existed still resume)."""
    return {k: v for k, v in asdict(cfg).items()
            if k not in ("methods", "concurrencies", "repeats") and (k != "seeded" or v)}


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


def _run_engine(python: Path, job: dict, proposer: dict | None, out: Path, threads: int,
                run: int = 0):
    """Run one engine in a subprocess (its output in ``out/logs/<method>-<phases>.log``,
    ``-run<n>`` added for a repeat); yield the records of the phases it finished, then raise
    ``RuntimeError`` naming the log if it failed (so that the finished phases are kept)."""
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    log_path = logs / (f"{job['method'].replace(':', '_')}-"
                       + "-".join(phase_key(p["concurrency"], p["rate"]).replace("/", "per")
                                  for p in job["phases"]) + (f"-run{run}" if run else "") + ".log")
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
