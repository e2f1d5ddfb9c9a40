"""The benchmark behind docs/benchmark.md: the paper's tables and figures on our pool.

Sections (each a list of *runs*; one run = one method on one prompt, one JSONL record):

``main``      the shuffled mixed stream (``queries_per_domain`` held-out prompts of every
              domain), greedy, and a sampled stream at ``temperature`` on the first
              ``sampled_queries_per_domain`` of those prompts. Methods, all on the same
              prompts: ``target`` (the target alone, ``model.generate``),
              ``hf-prompt-lookup`` (transformers' ``generate(prompt_lookup_num_tokens=K)``,
              lossless when sampling too: a draft token is kept when it equals the target's
              sample), ``fixed:<drafter>`` for every pool drafter (``fixed=True``; Table 1; the
              generalist, the specialists and the hindsight oracle are read off these), and
              the policies of :data:`POLICIES`: HedgeSpec ``normalhedge`` (the paper's
              acceptance-only loss, ``K`` drafts per round; also ``hedge`` / ``adahedge``),
              HedgeSpec cost-aware ``normalhedge-cost`` (NormalHedge over the experts
              ``(drafter, k)``, ``k = 0 .. K``, with the time-per-token loss of
              :mod:`spec_adapters.core.draft_cost`; its step costs are measured online and
              kept across the queries of one process), BanditSpec ``exp3spec`` / ``ucbspec``
              and MetaSD's ``metasd-ucb`` (UCB1 on the chosen drafter's mean gamma over its
              drafted block).
``variant``   router robustness (Table 4 analog): natural variants of the prompts; the router's
              accuracy on every held-out prompt, and MAT of router vs HedgeSpec on a subset.
``poolsize``  Fig. 5b: HedgeSpec / EXP3Spec / UCBSpec MAT as the pool grows to 32 drafters.
``overhead``  Table 2: target step, one drafter step, evaluation of N drafters, learner update.

Derived methods (no extra decoding): ``generalist`` = ``fixed:ngram-general``; ``specialist``
= the fixed run of the query's own domain drafter; ``router`` = the fixed run of the drafter
the router picks (its embedding time added); ``oracle`` = per query, the fixed run with the
best MAT in hindsight. With a fixed seed a fixed-policy run is deterministic, so these are
exactly what those methods would have produced.

MAT (mean accepted tokens per target call, bonus token included) and tokens/s are aggregated
over queries as ``sum(new tokens) / sum(target calls)`` and ``sum(new tokens) / sum(seconds)``
(wall clock of the whole call, prefill included). Speed-ups are ratios of tokens/s on the same
prompts: ``speedup_target`` against ``target``, ``speedup_hf_lookup`` against
``hf-prompt-lookup``. The non-target time of a round is everything but the verification pass
(select + draft + evaluate + update, from the decoders' per-step ``*_seconds``):
``non_target_ms_per_round = sum(those seconds) / sum(rounds)`` (a round is a target call) and
``non_target_per_verify = sum(those seconds) / sum(verify seconds)``; the prefill is in
neither. Per query, learner state is reset (the decoders' default).

Presets (:data:`PRESETS`) and the commands that run them::

    hedgespec bench --preset speed --threads 2           # the speed comparison, ~10 min
    hedgespec bench --preset speed --fixed --threads 2   # ... with every fixed drafter
    hedgespec bench --preset full --threads 2            # every section, greedy and 0.7

Resumable: every finished run is appended to ``<out>/records.jsonl`` at once; a re-run with the
same settings skips the runs already there. Outputs: ``results.json`` (settings, every raw
record, the aggregated tables), ``tables.md`` and PNG figures.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from spec_adapters.app.log import log
from spec_adapters.app.measure import median_ms, run_decoder

__all__ = ["PRESETS", "BenchConfig", "aggregate", "markdown_tables", "plot", "run_bench",
           "speed_tables"]

POLICIES = ("normalhedge", "normalhedge-cost", "hedge", "adahedge", "exp3spec", "ucbspec",
            "metasd-ucb")
# a benchmark method name -> (the decoder's policy, cost_aware)
DECODER_POLICIES = {m: (m, False) for m in POLICIES} | {"normalhedge-cost": ("normalhedge", True)}
NON_TARGET_STEPS = ("select", "draft", "eval", "update")
VARIANTS = {
    "prefix": "You are a careful assistant. Read the request below and reply helpfully.\n\n{p}",
    "twice": "{p}\n\nAnswer twice and pick the better answer.",
}


@dataclass
class BenchConfig:
    """Sizes and settings of one benchmark run (see :data:`PRESETS`).

    Attributes
    ----------
    queries_per_domain : int
        Greedy mixed stream: held-out prompts per domain.
    sampled_queries_per_domain : int
        Sampled stream (``temperature``): prompts per domain (the first ones of the greedy
        stream); 0 skips it.
    max_new_tokens, draft_length : int
    temperature : float
    policies : tuple of str
        Learners to run greedy (subset of :data:`POLICIES`).
    sampled_policies, poolsize_policies : tuple of str
        Learners of the sampled stream and of the pool-size sweep.
    hf_lookup : bool
        Also transformers' prompt lookup decoding (``K`` tokens), greedy and sampled.
    fixed : bool
        Also every pool drafter fixed (Table 1, and the generalist / specialist / router /
        oracle rows and the regret curves, which are read off those runs).
    variant_queries_per_domain : int
        Router robustness: prompts per domain decoded in their "twice" variant (0 skips);
        ``router_accuracy_prompts`` per domain are only classified.
    pool_sizes : tuple of int
        Fig. 5b pool sizes (needs shard-trained extras in the pool for N > base pool).
    poolsize_queries_per_domain : int
    overhead : bool
        Table 2 micro-measurements.
    seed : int
        Stream order and per-query seeds.
    """

    queries_per_domain: int = 2
    sampled_queries_per_domain: int = 1
    max_new_tokens: int = 64
    draft_length: int = 4
    temperature: float = 0.7
    policies: tuple[str, ...] = POLICIES
    sampled_policies: tuple[str, ...] = ("normalhedge", "exp3spec", "ucbspec")
    hf_lookup: bool = True
    fixed: bool = True
    variant_queries_per_domain: int = 1
    router_accuracy_prompts: int = 30
    pool_sizes: tuple[int, ...] = (2, 8, 32)
    poolsize_queries_per_domain: int = 1
    poolsize_policies: tuple[str, ...] = ("normalhedge", "exp3spec")
    overhead: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [p for p in (*self.policies, *self.sampled_policies, *self.poolsize_policies)
               if p not in POLICIES]
        if bad:
            raise ValueError(f"unknown policies {bad}; expected a subset of {POLICIES}")
        if self.queries_per_domain < 1 or self.max_new_tokens < 1 or self.draft_length < 1:
            raise ValueError("queries_per_domain, max_new_tokens and draft_length must be >= 1")
        self.policies = tuple(self.policies)
        self.sampled_policies = tuple(self.sampled_policies)
        self.poolsize_policies = tuple(self.poolsize_policies)
        self.pool_sizes = tuple(int(n) for n in self.pool_sizes)


PRESETS: dict[str, BenchConfig] = {
    # make demo: the comparison table on one prompt per domain, minutes on 2 cores
    "demo": BenchConfig(queries_per_domain=1, sampled_queries_per_domain=0, max_new_tokens=40,
                        policies=("normalhedge", "exp3spec"), hf_lookup=False,
                        variant_queries_per_domain=0, router_accuracy_prompts=0,
                        pool_sizes=(), overhead=False),
    # every section, smallest sizes: ~1 hour on a busy 2-core machine
    "small": BenchConfig(queries_per_domain=1, max_new_tokens=40),
    # the speed comparison on 2 CPU cores in ~10 min with the default target and pool: target,
    # HF prompt lookup and every learner (not the fixed drafters: --fixed adds them), greedy
    "speed": BenchConfig(queries_per_domain=2, sampled_queries_per_domain=0, max_new_tokens=128,
                         policies=("normalhedge-cost", "normalhedge", "exp3spec", "ucbspec",
                                   "metasd-ucb"), fixed=False, variant_queries_per_domain=0,
                         router_accuracy_prompts=0, pool_sizes=(), overhead=False),
    # every method and section: 5 prompts per domain, greedy and 0.7 on the same prompts, 256
    # new tokens (or EOS)
    "full": BenchConfig(queries_per_domain=5, sampled_queries_per_domain=5,
                        max_new_tokens=256, sampled_policies=POLICIES,
                        variant_queries_per_domain=2, router_accuracy_prompts=100,
                        pool_sizes=(1, 2, 4, 8, 16, 32), poolsize_queries_per_domain=2,
                        poolsize_policies=("normalhedge", "exp3spec", "ucbspec")),
}


@dataclass
class Query:
    qid: str
    domain: str
    prompt: str
    section: str = "main"
    meta: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------
# streams
# ------------------------------------------------------------------------------------------
def mixed_stream(domains: dict, per_domain: int, seed: int) -> list[Query]:
    """The first ``per_domain`` held-out prompts of every domain, shuffled with ``seed``."""
    qs = [Query(f"{d}/{i}", d, dom.prompts[i]) for d, dom in domains.items()
          for i in range(min(per_domain, len(dom.prompts)))]
    random.Random(seed).shuffle(qs)
    return qs


def _subset(stream: list[Query], per_domain: int) -> list[Query]:
    seen: dict[str, int] = defaultdict(int)
    out = []
    for q in stream:
        if seen[q.domain] < per_domain:
            seen[q.domain] += 1
            out.append(q)
    return out


# ------------------------------------------------------------------------------------------
# single runs
# ------------------------------------------------------------------------------------------
class _CallCounter:
    """Counts forward calls of a module (for transformers' own speculative decoding)."""

    def __init__(self, module) -> None:
        self.calls = 0
        self._h = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1

    def close(self):
        self._h.remove()


def run_target(model, ids, max_new_tokens: int, temperature: float, seed: int,
               prompt_lookup: int | None = None) -> dict:
    """The target alone (``model.generate``), or with transformers' prompt lookup."""
    import torch

    kw = dict(max_new_tokens=max_new_tokens, attention_mask=torch.ones_like(ids))
    if temperature > 0:
        kw.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
    else:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if prompt_lookup:
        kw["prompt_lookup_num_tokens"] = prompt_lookup
    torch.manual_seed(seed)
    counter = _CallCounter(model)
    t = time.perf_counter()
    try:
        with torch.inference_mode():
            out = model.generate(ids, **kw)
    finally:
        counter.close()
    seconds = time.perf_counter() - t
    new = int(out.shape[1] - ids.shape[1])
    calls = max(1, counter.calls - 1)  # the first call is the prefill
    return {"new_tokens": new, "target_calls": calls if prompt_lookup else new,
            "seconds": seconds, "tokens": out[0, ids.shape[1]:].tolist()}


# ------------------------------------------------------------------------------------------
# the record store (resumable)
# ------------------------------------------------------------------------------------------
class Records:
    """Append-only JSONL of finished runs, keyed by (section, query, temperature, method)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.rows: dict[tuple, dict] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut by an interruption: that run is simply redone
                self.rows[self.key(r)] = r

    @staticmethod
    def key(r: dict) -> tuple:
        return (r["section"], r["qid"], float(r["temperature"]), r["method"], r.get("n", 0))

    def has(self, *key) -> bool:
        return tuple(key) in self.rows

    def add(self, r: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(r) + "\n")
            fh.flush()
        self.rows[self.key(r)] = r

    def select(self, **match) -> list[dict]:
        return [r for r in self.rows.values() if all(r.get(k) == v for k, v in match.items())]


# ------------------------------------------------------------------------------------------
# the benchmark
# ------------------------------------------------------------------------------------------
def _decoder(model, drafters, k, method):
    """The single-draft decoder of benchmark method ``method`` (a policy or ``fixed:<i>``)."""
    from spec_adapters.decoding.chain import HedgeSpecDecoder

    policy, cost_aware = DECODER_POLICIES.get(method, (method, False))
    return HedgeSpecDecoder(model, drafters, draft_length=k, policy=policy,
                            cost_aware=cost_aware)


def _seed_of(cfg: BenchConfig, qid: str) -> int:
    return (cfg.seed * 1_000_003 + sum(map(ord, qid)) * 7919 + len(qid)) % (2**31)


def _plan(cfg: BenchConfig, pool, stream: list[Query]) -> list[tuple]:
    """Every run to do: (section, query, temperature, method, n)."""
    fixed = [f"fixed:{n}" for n in pool.names] if cfg.fixed else []
    lookup = ["hf-prompt-lookup"] if cfg.hf_lookup else []
    plan = []
    sampled = _subset(stream, cfg.sampled_queries_per_domain)
    for temp, queries, pols in ((0.0, stream, cfg.policies),
                                (cfg.temperature, sampled, cfg.sampled_policies)):
        for q in queries:
            plan += [("main", q, temp, m, 0) for m in ["target", *lookup, *fixed, *pols]]
    for q in _subset(stream, cfg.variant_queries_per_domain):
        v = Query(q.qid + "~twice", q.domain, VARIANTS["twice"].format(p=q.prompt), "variant")
        plan += [("variant", v, 0.0, m, 0) for m in ["router", "normalhedge"]]
    n_total = len(pool.drafters) + len(pool.extras)
    for n in cfg.pool_sizes:
        if n > n_total:
            continue
        for q in _subset(stream, cfg.poolsize_queries_per_domain):
            plan += [("poolsize", q, 0.0, m, n) for m in cfg.poolsize_policies]
    return plan


def _sized_pool(pool, n: int) -> list:
    """The first ``n`` drafters of: generalist, prompt lookup, specialists, shard extras."""
    order = [pool.drafters[pool.generalist], pool.drafters[pool.index("prompt-lookup")],
             *[pool.drafters[pool.specialist(d)] for d in pool.domain_of.values() if d],
             *pool.extras]
    return order[:n]


def run_bench(model, tokenizer, pool, domains: dict, cfg: BenchConfig, out_dir,
              progress: bool = True) -> dict:
    """Run (or resume) every section into ``out_dir``; return the aggregated summary.

    Parameters
    ----------
    model, tokenizer : the target.
    pool : spec_adapters.app.pool.Pool
    domains : dict name -> Domain (benchmark prompts are taken from ``Domain.prompts``).
    cfg : BenchConfig
    out_dir : path-like
        ``records.jsonl``, ``settings.json``, then ``results.json``, ``tables.md``, PNGs.

    Raises
    ------
    ValueError
        ``out_dir`` holds records of a run with other settings.
    """
    from tqdm.auto import tqdm

    from spec_adapters.app.domains import chat_ids

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"bench": asdict(cfg), "pool": pool.names, "extras": len(pool.extras),
                "domains": list(domains), "target": str(model.config.name_or_path)}
    sfile = out / "settings.json"
    if sfile.is_file() and (out / "records.jsonl").is_file():
        old = json.loads(sfile.read_text())
        if old != json.loads(json.dumps(settings)):
            raise ValueError(f"{out} holds results of a run with other settings; pass another "
                             "--out folder (or delete that one) to start afresh")
    sfile.write_text(json.dumps(settings, indent=1))
    records = Records(out / "records.jsonl")
    stream = mixed_stream(domains, cfg.queries_per_domain, cfg.seed)
    plan = _plan(cfg, pool, stream)
    todo = [p for p in plan if not records.has(p[0], p[1].qid, float(p[2]), p[3], p[4])]
    if len(todo) < len(plan):
        log(f"resuming: {len(plan) - len(todo)} of {len(plan)} runs already in "
             f"{records.path}")
    router_ms, routes = {}, {}
    if pool.router is not None:
        if cfg.router_accuracy_prompts:
            router_ms = _router_section(pool, domains, cfg, out)
        routes = _routes(pool, stream, out)
    decoders: dict = {}
    bar = tqdm(todo, desc="benchmark", unit="run", disable=not progress)
    for section, q, temp, method, n in bar:
        bar.set_postfix_str(f"{section} {q.qid} t={temp} {method}" + (f" N={n}" if n else ""))
        ids = chat_ids(tokenizer, q.prompt).view(1, -1)
        seed = _seed_of(cfg, q.qid)
        rec = {"section": section, "qid": q.qid, "domain": q.domain, "temperature": temp,
               "method": method, "n": n, "prompt_tokens": int(ids.shape[1])}
        cpu0 = time.process_time()
        if method == "target":
            rec |= run_target(model, ids, cfg.max_new_tokens, temp, seed)
        elif method == "hf-prompt-lookup":
            rec |= run_target(model, ids, cfg.max_new_tokens, temp, seed,
                              prompt_lookup=cfg.draft_length)
        elif method == "router":
            name = pool.router.predict([q.prompt])[0] if pool.router is not None else None
            i = pool.specialist(name) if name else pool.generalist
            rec |= run_decoder(_decoder(model, pool.drafters, cfg.draft_length, f"fixed:{i}"),
                               ids, cfg.max_new_tokens, temp, seed)
            rec["routed_to"] = name
            rec["seconds"] += router_ms.get("per_prompt_s", 0.0)
        elif section == "poolsize":
            rec |= run_decoder(_decoder(model, _sized_pool(pool, n), cfg.draft_length, method),
                               ids, cfg.max_new_tokens, temp, seed)
        else:
            if method not in decoders:
                spec = method
                if method.startswith("fixed:"):
                    spec = f"fixed:{pool.index(method[6:])}"
                decoders[method] = _decoder(model, pool.drafters, cfg.draft_length, spec)
            rec |= run_decoder(decoders[method], ids, cfg.max_new_tokens, temp, seed)
        rec["cpu_seconds"] = time.process_time() - cpu0
        records.add(rec)
    overhead = _overheads(model, tokenizer, pool, domains, cfg, out) if cfg.overhead else {}
    summary = aggregate(list(records.rows.values()), pool, cfg, routes)
    summary["overhead"] = overhead
    summary["router"] = router_ms or _read_json(out / "router.json")
    summary["settings"] = settings
    (out / "results.json").write_text(json.dumps(
        {**summary, "records": [_slim(r) for r in records.rows.values()]}, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "tables.md").write_text(markdown_tables(summary))
    plot(summary, list(records.rows.values()), out)
    return summary


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _slim(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "tokens"}


# ------------------------------------------------------------------------------------------
# router robustness and overheads
# ------------------------------------------------------------------------------------------
def _router_section(pool, domains, cfg: BenchConfig, out: Path) -> dict:
    """Router accuracy on held-out prompts, original and with each natural variant."""
    f = out / "router.json"
    if f.is_file():
        return json.loads(f.read_text())
    res: dict = {"accuracy": {}, "per_domain": {}}
    prompts = [(d, p) for d, dom in domains.items()
               for p in dom.prompts[:cfg.router_accuracy_prompts]]
    variants = {"original": "{p}", **VARIANTS}
    t = time.perf_counter()
    for v, tmpl in variants.items():
        pred = pool.router.predict([tmpl.format(p=p) for _, p in prompts]) if prompts else []
        ok = [a == d for (d, _), a in zip(prompts, pred, strict=True)]
        res["accuracy"][v] = float(np.mean(ok)) if ok else None
        per: dict = defaultdict(list)
        for (d, _), good in zip(prompts, ok, strict=True):
            per[d].append(good)
        res["per_domain"][v] = {d: float(np.mean(x)) for d, x in per.items()}
    n = len(prompts) * len(variants)
    res["per_prompt_s"] = (time.perf_counter() - t) / max(n, 1)
    res["prompts"] = len(prompts)
    f.write_text(json.dumps(res, indent=1))
    return res


def _routes(pool, stream: list[Query], out: Path) -> dict:
    """The router's pick for every query of the main stream (+ its per-prompt time)."""
    f = out / "routes.json"
    if f.is_file():
        return json.loads(f.read_text())
    t = time.perf_counter()
    picks = pool.router.predict([q.prompt for q in stream])
    s = (time.perf_counter() - t) / max(1, len(stream))
    routes = {q.qid: {"routed": f"ngram-{d}", "predicted": d, "s": s}
              for q, d in zip(stream, picks, strict=True)}
    f.write_text(json.dumps(routes, indent=1))
    return routes


def _overheads(model, tokenizer, pool, domains, cfg: BenchConfig, out: Path) -> dict:
    """Table 2: medians of a target step, a (K+1)-token verification, one n-gram drafter step
    (propose K and extend K), evaluation of all N drafters on K tokens, one learner update."""
    import torch

    from onlinelearn.delayed import QPMD
    from onlinelearn.normalhedge import NormalHedge
    from spec_adapters.app.domains import chat_ids
    from spec_adapters.core.proposal import warp
    from spec_adapters.core.sampling import SamplingConfig
    from spec_adapters.hf.target import TargetModel

    f = out / "overhead.json"
    if f.is_file():
        return json.loads(f.read_text())
    d0 = next(iter(domains))
    ids = chat_ids(tokenizer, domains[d0].prompts[0])
    K = cfg.draft_length
    tm = TargetModel(model)
    greedy = SamplingConfig(0.0)

    tm.prefill(ids)
    L = tm.cached_length
    drafts = ids[-K:]

    def step():
        tm.verify(ids[-1:], drafts[:0])
        tm.crop(L)

    def verify():
        tm.verify(ids[-1:], drafts)
        tm.crop(L)

    res = {"draft_length": K, "target_step_ms": median_ms(step),
           "verify_ms": median_ms(verify)}
    dr = pool.drafters[0]
    dr.start(ids)
    res["drafter_propose_ms"] = median_ms(lambda: dr.propose(K, greedy, None))
    res["drafter_extend_ms"] = median_ms(lambda: dr.extend(drafts), 5,
                                         after=lambda: dr.start(ids))
    for n, ds in (("pool", pool.drafters), ("pool32", _sized_pool(pool, 32))):
        for d in ds:
            d.start(ids)
        res[f"eval_{n}_ms"] = median_ms(lambda ds=ds: [warp(d.extend(drafts), greedy) for d in ds],
                                        3, after=lambda ds=ds: [d.start(ids) for d in ds])
        res[f"eval_{n}_n"] = len(ds)
    rng = np.random.default_rng(0)
    N = len(pool.drafters)
    pol = QPMD(NormalHedge(N))
    losses, played = iter(rng.random((50, N))), [pol.play(rng)[0]]
    res["learner_update_ms"] = median_ms(lambda: pol.feed(played.pop(), next(losses)), 50,
                                         after=lambda: played.append(pol.play(rng)[0]))
    res["threads"] = torch.get_num_threads()
    f.write_text(json.dumps(res, indent=1))
    return res


# ------------------------------------------------------------------------------------------
# aggregation, tables, figures
# ------------------------------------------------------------------------------------------
def _agg(rows: Sequence[dict]) -> dict:
    """MAT, tokens/s and (decoder runs: all ``rows`` have ``timing``) the verify and non-target
    time per round, pooled over ``rows`` (see the module docstring)."""
    tok = sum(r["new_tokens"] for r in rows)
    calls = sum(r["target_calls"] for r in rows)
    sec = sum(r["seconds"] for r in rows)
    cpu = sum(r.get("cpu_seconds", np.nan) for r in rows)
    out = {"mat": tok / calls if calls else None, "tok_s": tok / sec if sec else None,
           "tok_cpu_s": tok / cpu if cpu and np.isfinite(cpu) else None,
           "queries": len(rows), "new_tokens": tok, "rounds": calls,
           "verify_ms_per_round": None, "non_target_ms_per_round": None,
           "non_target_per_verify": None}
    if rows and calls and all("timing" in r for r in rows):
        verify = sum(r["timing"]["verify"] for r in rows)
        other = sum(r["timing"][s] for r in rows for s in NON_TARGET_STEPS)
        out |= {"verify_ms_per_round": 1e3 * verify / calls,
                "non_target_ms_per_round": 1e3 * other / calls,
                "non_target_per_verify": other / verify if verify else None}
    return out


def _speedups(table: dict) -> None:
    """Add ``speedup_target`` / ``speedup_hf_lookup`` (tokens/s ratios) to every method and
    scope (mixed, each domain) of one temperature's ``table`` (method -> scope -> agg)."""
    for v in table.values():
        for scope, a in v.items():
            for key, ref in (("speedup_target", "target"),
                             ("speedup_hf_lookup", "hf-prompt-lookup")):
                base = table.get(ref, {}).get(scope, {}).get("tok_s")
                a[key] = a["tok_s"] / base if base and a["tok_s"] is not None else None


def _derived(rows_q: dict[str, dict], domain: str, pool, router_rows: dict) -> dict:
    """generalist / specialist / oracle (/ router) runs of one query from its fixed runs."""
    out = {}
    fixed = {m[6:]: r for m, r in rows_q.items() if m.startswith("fixed:")}
    if f"ngram-{domain}" in fixed:
        out["specialist"] = fixed[f"ngram-{domain}"]
    if "ngram-general" in fixed:
        out["generalist"] = fixed["ngram-general"]
    if fixed and len(fixed) == len(pool.names):
        best = max(fixed, key=lambda n: (fixed[n]["new_tokens"] / max(1, fixed[n]["target_calls"]),
                                         -fixed[n]["seconds"]))
        out["oracle"] = {**fixed[best], "oracle_choice": best}
    if router_rows and router_rows.get("routed") in fixed:
        r = fixed[router_rows["routed"]]
        out["router"] = {**r, "seconds": r["seconds"] + router_rows.get("s", 0.0),
                         "cpu_seconds": r.get("cpu_seconds", np.nan) + router_rows.get("s", 0.0)}
    return out


def aggregate(records: list[dict], pool, cfg: BenchConfig, routes: dict | None = None) -> dict:
    """Tables from raw records: Table 1, the main table (mixed stream and per domain, per
    temperature), router robustness, pool-size sweep, regret curves."""
    by_q: dict = defaultdict(dict)
    for r in records:
        if r["section"] == "main":
            by_q[(r["qid"], r["temperature"])][r["method"]] = r
    routes = routes or {}
    main: dict = {}
    table1: dict = defaultdict(dict)
    per_method: dict = defaultdict(lambda: defaultdict(list))  # (temp, method) -> domain -> rows
    for (qid, temp), rows_q in by_q.items():
        domain = next(iter(rows_q.values()))["domain"]
        all_rows = dict(rows_q)
        all_rows |= _derived(rows_q, domain, pool, routes.get(qid, {}))
        for m, r in all_rows.items():
            per_method[(temp, m)][domain].append(r)
    for (temp, m), doms in per_method.items():
        t = main.setdefault(str(temp), {})
        t[m] = {"mixed": _agg([r for rs in doms.values() for r in rs]),
                **{d: _agg(rs) for d, rs in doms.items()}}
        if temp == 0.0 and m.startswith("fixed:"):
            for d, rs in doms.items():
                table1[m[6:]][d] = _agg(rs)["mat"]
    for t in main.values():
        _speedups(t)
    ratios = {}
    for temp, t in main.items():
        mix = {m: v["mixed"] for m, v in t.items()}
        hs = mix.get("normalhedge", {}).get("mat")
        if hs:
            ratios[temp] = {f"normalhedge/{m}": (hs / mix[m]["mat"] if mix.get(m, {}).get("mat")
                                                 else None)
                            for m in ("generalist", "exp3spec", "ucbspec", "metasd-ucb",
                                      "oracle")}
            for key in ("tok_s", "tok_cpu_s"):
                if mix.get("target", {}).get(key) and mix["normalhedge"].get(key):
                    ratios[temp][f"{key} normalhedge/target"] = \
                        mix["normalhedge"][key] / mix["target"][key]
    variant = defaultdict(dict)
    for r in records:
        if r["section"] == "variant":
            variant[r["method"]][r["qid"]] = r
    variant_tab = {m: _agg(list(v.values())) for m, v in variant.items()}
    variant_tab["routed_correctly"] = (
        float(np.mean([r.get("routed_to") == r["domain"] for r in variant["router"].values()]))
        if variant.get("router") else None)
    sizes = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["section"] == "poolsize":
            sizes[r["method"]][r["n"]].append(r)
    poolsize = {m: {str(n): _agg(rs) for n, rs in sorted(v.items())} for m, v in sizes.items()}
    return {"main": main, "table1": table1, "ratios": ratios, "variant": variant_tab,
            "poolsize": poolsize, "regret": regret_curves(records, pool, cfg),
            "drafters": pool.names}


def regret_curves(records: list[dict], pool, cfg: BenchConfig,
                  methods=("normalhedge", "exp3spec", "ucbspec", "metasd-ucb")) -> dict:
    """Cumulative regret in tokens against the per-query hindsight-best fixed drafter, over the
    rounds of the greedy mixed stream (queries in stream order):
    ``R(t) = sum_{rounds s <= t} (MAT*_q(s) - (accepted_s + 1))``, ``MAT*_q`` the best fixed
    drafter's MAT on the query that round ``s`` belongs to."""
    by = defaultdict(dict)
    order = []
    for r in records:
        if r["section"] == "main" and r["temperature"] == 0.0:
            by[r["qid"]][r["method"]] = r
            if r["qid"] not in order:
                order.append(r["qid"])
    curves = {}
    for m in methods:
        acc, total = [], 0.0
        for qid in order:
            rq = by[qid]
            fixed = [v for k, v in rq.items() if k.startswith("fixed:")]
            if m not in rq or not fixed:
                continue
            best = max(v["new_tokens"] / max(1, v["target_calls"]) for v in fixed)
            for a in rq[m].get("accepted", []):
                total += best - (a + 1)
                acc.append(round(total, 4))
        curves[m] = acc
    return curves


LABELS = {"target": "target alone", "generalist": "generalist (n-gram, mix)",
          "specialist": "own-domain specialist", "router": "router (MiniLM + logreg)",
          "exp3spec": "EXP3Spec", "ucbspec": "UCBSpec", "metasd-ucb": "MetaSD-UCB",
          "normalhedge": "HedgeSpec (NormalHedge)",
          "normalhedge-cost": "HedgeSpec cost-aware (NormalHedge, (drafter, k))",
          "hedge": "HedgeSpec (Hedge)", "adahedge": "HedgeSpec (AdaHedge)",
          "oracle": "hindsight oracle", "hf-prompt-lookup": "HF prompt lookup"}
MAIN_ORDER = ("target", "hf-prompt-lookup", "generalist", "specialist", "router", "exp3spec",
              "ucbspec", "metasd-ucb", "normalhedge", "hedge", "adahedge", "normalhedge-cost",
              "oracle")


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def speed_tables(summary: dict, methods: Sequence[str] = MAIN_ORDER) -> list[str]:
    """Markdown lines: per temperature and scope (mixed stream, then each domain), tokens/s,
    speed-ups against the target and HF prompt lookup, MAT, and the non-target time per round
    and its share of the verification time, for ``methods`` then the fixed drafters."""
    lines = []
    for temp, t in summary["main"].items():
        rows = [m for m in methods if m in t] + sorted(m for m in t if m.startswith("fixed:"))
        scopes = ["mixed", *sorted({d for v in t.values() for d in v if d != "mixed"})]
        for scope in scopes:
            lines += [f"### Speed, temperature {temp}, {scope}"
                      + (" stream" if scope == "mixed" else " prompts"), "",
                      "| method | tok/s | x target | x HF lookup | MAT | non-target ms / round "
                      "| non-target / verify |", "|---|---|---|---|---|---|---|"]
            for m in rows:
                a = t[m].get(scope)
                if a is None:
                    continue
                lines.append(f"| {LABELS.get(m, m)} | {_f(a['tok_s'], '{:.1f}')} | "
                             f"{_f(a.get('speedup_target'))} | "
                             f"{_f(a.get('speedup_hf_lookup'))} | {_f(a['mat'])} | "
                             f"{_f(a.get('non_target_ms_per_round'), '{:.1f}')} | "
                             f"{_f(a.get('non_target_per_verify'))} |")
            lines.append("")
    return lines


def markdown_tables(summary: dict, methods: Sequence[str] = MAIN_ORDER) -> str:
    """The main table per temperature (mixed stream + per domain), the speed tables
    (:func:`speed_tables`), ratios, Table 1."""
    lines = []
    for temp, t in summary["main"].items():
        domains = sorted({d for v in t.values() for d in v if d != "mixed"})
        lines += [f"### Mixed stream and per domain, temperature {temp}", "",
                  "| method | mixed MAT | tok/s (wall) | tok/s (CPU) | "
                  + " | ".join(f"{d} MAT" for d in domains) + " |",
                  "|---|---|---|---|" + "---|" * len(domains)]
        for m in [m for m in methods if m in t]:
            v = t[m]
            lines.append(f"| {LABELS.get(m, m)} | {_f(v['mixed']['mat'])} | "
                         f"{_f(v['mixed']['tok_s'], '{:.1f}')} | "
                         f"{_f(v['mixed'].get('tok_cpu_s'), '{:.1f}')} | "
                         + " | ".join(_f(v.get(d, {}).get("mat")) for d in domains) + " |")
        lines.append("")
    lines += speed_tables(summary, methods)
    if summary.get("ratios"):
        lines += ["### HedgeSpec (NormalHedge) ratios on the mixed stream", "",
                  "| temperature | " + " | ".join(next(iter(summary["ratios"].values())))
                  + " |", "|---|" + "---|" * len(next(iter(summary["ratios"].values())))]
        for temp, r in summary["ratios"].items():
            lines.append(f"| {temp} | " + " | ".join(_f(x) for x in r.values()) + " |")
        lines.append("")
    if summary.get("table1"):
        t1 = summary["table1"]
        domains = sorted({d for v in t1.values() for d in v})
        lines += ["### Table 1 analog: MAT of every drafter (fixed) on every domain, greedy", "",
                  "| drafter | " + " | ".join(domains) + " |", "|---|" + "---|" * len(domains)]
        for n, v in t1.items():
            best = {d: max(t1[x].get(d) or 0 for x in t1) for d in domains}
            cells = [("**" + _f(v.get(d)) + "**") if v.get(d) == best[d] else _f(v.get(d))
                     for d in domains]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` (PNG, 120 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _lines(path: Path, curves: dict, xlabel: str, ylabel: str, title: str, *,
           log2_x: bool = False, marker: str | None = None) -> Path:
    """One line per method (``curves``: method -> (x, y)), labelled by :data:`LABELS`."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for m, (x, y) in curves.items():
        ax.plot(x, y, marker=marker, label=LABELS.get(m, m))
    if log2_x:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)


def plot(summary: dict, records: list[dict], out: Path) -> list[Path]:
    """fig5a_regret.png, fig5b_poolsize.png, table1_heatmap.png (those with data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    curves = {m: (np.arange(1, len(c) + 1), c) for m, c in summary.get("regret", {}).items()
              if c}
    if curves:
        written.append(_lines(out / "fig5a_regret.png", curves, "round (mixed stream, greedy)",
                              "cumulative regret (tokens)",
                              "Fig. 5a analog: regret vs hindsight-best drafter"))
    ps = summary.get("poolsize") or {}
    if ps:
        sizes = {m: sorted(int(n) for n in v) for m, v in ps.items()}
        written.append(_lines(out / "fig5b_poolsize.png",
                              {m: (ns, [ps[m][str(n)]["mat"] for n in ns])
                               for m, ns in sizes.items()},
                              "pool size N", "MAT", "Fig. 5b analog: MAT vs pool size",
                              log2_x=True, marker="o"))
    t1 = summary.get("table1") or {}
    if t1:
        names = list(t1)
        domains = sorted({d for v in t1.values() for d in v})
        M = np.array([[t1[n].get(d) or np.nan for d in domains] for n in names])
        fig, ax = plt.subplots(figsize=(1 + 0.9 * len(domains), 1 + 0.45 * len(names)))
        im = ax.imshow(M, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(domains)), domains, rotation=30, ha="right")
        ax.set_yticks(range(len(names)), names)
        for i in range(len(names)):
            for j in range(len(domains)):
                if not np.isnan(M[i, j]):
                    ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="w")
        fig.colorbar(im, ax=ax, label="MAT")
        ax.set_title("Table 1 analog: MAT (greedy)")
        written.append(_save(fig, out / "table1_heatmap.png"))
    return written


def with_overrides(cfg: BenchConfig, **kw) -> BenchConfig:
    """``cfg`` with the non-``None`` keyword values replaced."""
    return replace(cfg, **{k: v for k, v in kw.items() if v is not None})
