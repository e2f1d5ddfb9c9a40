"""The benchmark behind docs/benchmark.md: the paper's tables and figures on our pool.

Sections (each a list of *runs*; one run = one method on one prompt, one JSONL record):

``main``      the shuffled mixed stream (``queries_per_domain`` held-out prompts of every
              domain), greedy, and a sampled stream at ``temperature`` on the first
              ``sampled_queries_per_domain`` of those prompts. Methods, all on the same
              prompts: ``target`` (the target alone, ``model.generate``),
              ``hf-prompt-lookup`` (transformers' ``generate(prompt_lookup_num_tokens=K)``,
              lossless when sampling too: a draft token is kept when it equals the target's
              sample), ``hf-static-compiled`` (transformers' static cache and
              ``torch.compile``) and ``hf-static-compiled-lookup`` (its prompt lookup),
              ``target-rows-first`` (the target alone through
              :class:`~spec_adapters.hf.target.TargetModel`, in the layout HedgeSpec
              verifies with, rows-first or transformers' own, whichever measures faster on
              the machine: how much of a speed-up is that layout and not the drafts),
              ``fixed:<drafter>`` for every pool drafter (``fixed=True``; Table 1; the
              generalist, the specialists and the hindsight oracle are read off these), and
              the policies of :data:`POLICIES`: HedgeSpec ``normalhedge`` (the paper's
              acceptance-only loss, ``K`` drafts per round; also ``hedge`` / ``adahedge``),
              HedgeSpec cost-aware ``normalhedge-cost`` (NormalHedge over the experts
              ``(drafter, k)``, ``k = 0 .. K``, with the time-per-token loss of
              :mod:`spec_adapters.selection.experts`; its step costs are measured online and
              kept across the queries of one process; ``normalhedge-cost-consensus`` with
              the pool's majority draft as one more drafter), BanditSpec ``exp3spec`` / ``ucbspec``
              and MetaSD's ``metasd-ucb`` (UCB1 on the chosen drafter's mean gamma over its
              drafted block).
``variant``   router robustness (Table 4 analog): natural variants of the prompts; the router's
              accuracy on every held-out prompt, and MAT of router vs HedgeSpec on a subset.
``poolsize``  Fig. 5b: HedgeSpec / EXP3Spec / UCBSpec MAT as the pool grows to 32 drafters.
``overhead``  Table 2: target step, one drafter step, evaluation of N drafters, learner update.

Per query, learner state is reset (the decoders' default). The records are aggregated by
:mod:`spec_adapters.app.bench.aggregate` (MAT, tokens/s, speed-ups, the derived methods
``generalist`` / ``specialist`` / ``router`` / ``oracle``), written out as Markdown by
:mod:`spec_adapters.app.bench.tables` and drawn by :mod:`spec_adapters.app.bench.plots`.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from spec_adapters.app.bench.aggregate import aggregate
from spec_adapters.app.bench.config import (
    DECODER_POLICIES,
    PRESETS,
    VARIANTS,
    BenchConfig,
)
from spec_adapters.app.bench.measure import TokenClock, median_ms, run_decoder
from spec_adapters.app.bench.plots import plot
from spec_adapters.app.bench.records import Records, check_settings
from spec_adapters.app.bench.replay import replay_fixed
from spec_adapters.app.bench.static_compiled import StaticCompiledTarget
from spec_adapters.app.bench.tables import markdown_tables
from spec_adapters.app.log import log

__all__ = ["PRESETS", "BenchConfig", "mixed_stream", "run_bench", "with_overrides"]

@dataclass
class BenchPrompt:
    """One prompt of a benchmark stream: its id (``<domain>/<i>``, ``~twice`` for a variant),
    domain, text, the section it belongs to and what was measured about it."""

    qid: str
    domain: str
    prompt: str
    section: str = "main"
    meta: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------
# streams
# ------------------------------------------------------------------------------------------
def mixed_stream(domains: dict, per_domain: int, seed: int) -> list[BenchPrompt]:
    """The first ``per_domain`` held-out prompts of every domain, shuffled with ``seed``."""
    qs = [BenchPrompt(f"{d}/{i}", d, dom.prompts[i]) for d, dom in domains.items()
          for i in range(min(per_domain, len(dom.prompts)))]
    random.Random(seed).shuffle(qs)
    return qs


def _subset(stream: list[BenchPrompt], per_domain: int) -> list[BenchPrompt]:
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
               prompt_lookup: int | None = None, cache=None, top_p: float = 1.0) -> dict:
    """The target alone (``model.generate``), or with transformers' prompt lookup, or (``cache``:
    a transformers cache object, emptied first) generating into ``cache``, sampled with
    ``top_p`` above temperature 0; ``token_seconds`` from a
    :class:`~spec_adapters.app.bench.measure.TokenClock` streamer."""
    import torch

    kw = dict(max_new_tokens=max_new_tokens, attention_mask=torch.ones_like(ids))
    if cache is not None:
        kw["cache"] = cache
    if temperature > 0:
        kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    else:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if prompt_lookup:
        kw["prompt_lookup_num_tokens"] = prompt_lookup
    torch.manual_seed(seed)
    counter, clock = _CallCounter(model), TokenClock()
    t = time.perf_counter()
    try:
        with torch.inference_mode():
            if cache is not None:
                cache.reset()
            clock.start()
            out = model.generate(ids, streamer=clock, **kw)
    finally:
        counter.close()
    seconds = time.perf_counter() - t
    new = int(out.shape[1] - ids.shape[1])
    calls = max(1, counter.calls - 1)  # the first call is the prefill
    return {"new_tokens": new, "target_calls": calls if prompt_lookup else new,
            "seconds": seconds, "tokens": out[0, ids.shape[1]:].tolist(),
            "token_seconds": clock.seconds}


def run_target_rows_first(model, ids, max_new_tokens: int, temperature: float, seed: int,
                          compiled: bool = False, top_p: float = 1.0) -> dict:
    """The target alone, one token per step through :class:`TargetModel` (on CPU the
    rows-first twin where it measures faster; compiled with ``compiled``), greedy or sampled
    at ``temperature`` and ``top_p``; stops after EOS as ``generate``. The record names the layout
    (``"layout"``, ``" compiled"`` appended when compiled)."""
    import torch

    from spec_adapters.core.sampling import SamplingConfig
    from spec_adapters.decoding.loop import check_eos
    from spec_adapters.hf.target import TargetModel

    target = TargetModel(model, compiled=compiled)
    sampling = SamplingConfig(temperature, top_p=top_p)  # greedy reads no top_p
    eos = check_eos(model.generation_config.eos_token_id, target.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    t, clock = time.perf_counter(), TokenClock()
    clock.start()
    target.prefill(ids[0])
    new: list[int] = []
    none = torch.zeros(0, dtype=torch.long)
    while len(new) < max_new_tokens and not (new and new[-1] in eos):
        last = new[-1] if new else int(ids[0, -1])
        p = sampling.probs(target.verify(torch.tensor([last]), none))[0]
        nxt = int(p.argmax()) if sampling.greedy else int(torch.multinomial(p, 1, generator=gen))
        new.append(nxt)
        clock.tick()
    return {"new_tokens": len(new), "target_calls": len(new),
            "seconds": time.perf_counter() - t, "tokens": new, "token_seconds": clock.seconds,
            "layout": ("transformers" if target.net is model else "rows-first")
            + (" compiled" if compiled else "")}


# ------------------------------------------------------------------------------------------
# the benchmark
# ------------------------------------------------------------------------------------------
def _decoder(model, drafters, k, method, compiled: bool = False):
    """The single-draft decoder of benchmark method ``method`` (a policy or ``fixed:<i>``),
    verifying through the compiled target with ``compiled``. Drafters that learn from the
    stream (the suffix drafter) are copied: each decoder learns only from the queries it
    decoded itself."""
    from spec_adapters.decoding.chain import HedgeSpecDecoder
    from spec_adapters.hf.target import TargetModel

    policy, cost_aware, carry, consensus = DECODER_POLICIES.get(
        method, (method, False, False, False))
    drafters = [_own(d) for d in drafters]
    return HedgeSpecDecoder(TargetModel(model, compiled=compiled), drafters, draft_length=k,
                            policy=policy, cost_aware=cost_aware, carry_state=carry,
                            consensus=consensus)


def _own(drafter):
    """``drafter``, or a fresh copy of it when it learns from the stream (suffix memory)."""
    import copy

    from spec_adapters.drafters.suffix import SuffixDrafter

    return copy.deepcopy(drafter) if isinstance(drafter, SuffixDrafter) else drafter


def _fixed_drafter(pool, name: str):
    return next(d for d in [*pool.drafters, *pool.baselines] if d.name == name)


def _seed_of(cfg: BenchConfig, qid: str) -> int:
    return (cfg.seed * 1_000_003 + sum(map(ord, qid)) * 7919 + len(qid)) % (2**31)


def _plan(cfg: BenchConfig, pool, stream: list[BenchPrompt]) -> list[tuple]:
    """Every run to do: (section, query, temperature, method, n)."""
    fixed = [f"fixed:{n}" for n in [*pool.names, *(b.name for b in pool.baselines)]] \
        if cfg.fixed else []
    hf = ["hf-prompt-lookup"] if cfg.hf_lookup else []  # transformers as its users run it
    hf += ["hf-static-compiled"] if cfg.hf_static_compiled else []
    hf += ["hf-static-compiled-lookup"] if cfg.hf_static_compiled and cfg.hf_lookup else []
    rows_first = ["target-rows-first"] if cfg.rows_first_target else []
    plan = []
    sampled = _subset(stream, cfg.sampled_queries_per_domain)
    for temp, queries, pols in ((0.0, stream, cfg.policies),
                                (cfg.temperature, sampled, cfg.sampled_policies)):
        own = fixed if temp == 0.0 or cfg.sampled_fixed else []
        for q in queries:
            plan += [("main", q, temp, m, 0)
                     for m in ["target", *hf, *rows_first, *own, *pols]]
    for q in _subset(stream, cfg.variant_queries_per_domain):
        v = BenchPrompt(q.qid + "~twice", q.domain, VARIANTS["twice"].format(p=q.prompt), "variant")
        plan += [("variant", v, 0.0, m, 0) for m in ["router", "normalhedge"]]
    n_total = len(pool.drafters) + len(pool.extras)
    for n in cfg.pool_sizes:
        if n > n_total:
            continue
        for q in _subset(stream, cfg.poolsize_queries_per_domain):
            plan += [("poolsize", q, 0.0, m, n) for m in cfg.poolsize_policies]
    return plan


def _sized_pool(pool, n: int) -> list:
    """The first ``n`` drafters of: generalist, prompt lookup, suffix, specialists, shard
    extras."""
    order = [pool.drafters[pool.generalist], pool.drafters[pool.index("prompt-lookup")],
             pool.drafters[pool.index("suffix")],
             *[pool.drafters[pool.specialist(d)] for d in pool.domain_of.values() if d],
             *pool.extras]
    return order[:n]


def run_bench(model, tokenizer, pool, domains: dict, cfg: BenchConfig, out_dir,
              progress: bool = True) -> dict:
    """Run (or resume) every section into ``out_dir``; return the aggregated summary.

    Parameters
    ----------
    model, tokenizer : the target.
    pool : spec_adapters.app.pool.cache.Pool
    domains : dict name -> Domain (benchmark prompts are taken from ``Domain.prompts``).
    cfg : BenchConfig
    out_dir : path-like
        ``records.jsonl``, ``settings.json``, then ``results.json``, ``tables.md``, PNGs.

    Raises
    ------
    ValueError
        ``out_dir`` holds records of a run with other settings.
    """
    import torch
    from tqdm.auto import tqdm

    from spec_adapters.app.domains import chat_ids

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"bench": asdict(cfg), "pool": pool.names, "extras": len(pool.extras),
                "domains": list(domains), "target": str(model.config.name_or_path)}
    check_settings(out, settings)
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
    static = None  # transformers' static cache + torch.compile twin, built at its first run

    def decoder(drafters, method):  # every decoder of this run: its K, its (un)compiled step
        return _decoder(model, drafters, cfg.draft_length, method, cfg.compile_target)

    bar = tqdm(todo, desc="benchmark", unit="run", disable=not progress)
    for section, q, temp, method, n in bar:
        bar.set_postfix_str(f"{section} {q.qid} t={temp} {method}" + (f" N={n}" if n else ""))
        ids = chat_ids(tokenizer, q.prompt).view(1, -1)
        seed = _seed_of(cfg, q.qid)
        top_p = cfg.top_p if temp > 0 else 1.0
        rec = {"section": section, "qid": q.qid, "domain": q.domain, "temperature": temp,
               "method": method, "n": n, "prompt_tokens": int(ids.shape[1])}
        cpu0 = time.process_time()
        if method == "target":
            rec |= run_target(model, ids, cfg.max_new_tokens, temp, seed, top_p=top_p)
        elif method == "hf-prompt-lookup":
            rec |= run_target(model, ids, cfg.max_new_tokens, temp, seed,
                              prompt_lookup=cfg.draft_length, top_p=top_p)
        elif method.startswith("hf-static-compiled"):
            if static is None:
                static = StaticCompiledTarget(  # room for prompt lookup's last drafts too
                    model, max(len(chat_ids(tokenizer, p.prompt)) for p in stream)
                    + cfg.max_new_tokens + cfg.draft_length + 1,
                    lookup=cfg.draft_length if cfg.hf_lookup else None)
            rec |= run_target(static.model, ids, cfg.max_new_tokens, temp, seed,
                              cache=static.cache, top_p=top_p,
                              prompt_lookup=cfg.draft_length if method.endswith("lookup")
                              else None)
        elif method == "target-rows-first":
            rec |= run_target_rows_first(model, ids, cfg.max_new_tokens, temp, seed,
                                         cfg.compile_target, top_p)
        elif method == "router":
            name = pool.router.predict([q.prompt])[0] if pool.router is not None else None
            i = pool.specialist(name) if name else pool.generalist
            rec |= run_decoder(decoder(pool.drafters, f"fixed:{i}"), ids, cfg.max_new_tokens,
                               temp, seed, top_p=top_p)
            rec["routed_to"] = name
            rec["seconds"] += router_ms.get("per_prompt_s", 0.0)
        elif section == "poolsize":
            rec |= run_decoder(decoder(_sized_pool(pool, n), method), ids, cfg.max_new_tokens,
                               temp, seed, top_p=top_p)
        elif method.startswith("fixed:") and cfg.replay_fixed and temp == 0.0:
            if method not in decoders:  # one drafter per method, kept along the stream
                decoders[method] = _own(_fixed_drafter(pool, method[6:]))
            target = records.rows[("main", q.qid, 0.0, "target", 0)]
            rec |= replay_fixed(decoders[method], ids[0], target["tokens"], cfg.draft_length)
        else:
            if method not in decoders:
                if method.startswith("fixed:"):  # the drafter alone, as a user would run it
                    decoders[method] = decoder([_fixed_drafter(pool, method[6:])], "fixed:0")
                else:
                    decoders[method] = decoder(pool.drafters, method)
            draws = {"generator": torch.Generator().manual_seed(seed)} \
                if cfg.seeded and temp > 0 else {"seed": seed}  # model.generate's, or its own
            rec |= run_decoder(decoders[method], ids, cfg.max_new_tokens, temp, top_p=top_p,
                               **draws)
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


def _routes(pool, stream: list[BenchPrompt], out: Path) -> dict:
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


def with_overrides(cfg: BenchConfig, **kw) -> BenchConfig:
    """``cfg`` with the non-``None`` keyword values replaced."""
    return replace(cfg, **{k: v for k, v in kw.items() if v is not None})
