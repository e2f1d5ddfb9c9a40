"""Aggregation of the benchmark's records (:mod:`spec_adapters.app.bench.run`) into its tables.

MAT (mean accepted tokens per target call, bonus token included) and tokens/s are aggregated
over queries as ``sum(new tokens) / sum(target calls)`` and ``sum(new tokens) / sum(seconds)``
(wall clock of the whole call, prefill included). Speed-ups are ratios of tokens/s on the same
prompts: ``speedup_target`` against ``target``, ``speedup_hf_lookup`` against
``hf-prompt-lookup``. The non-target time of a round is everything but the verification pass
(select + draft + evaluate + update, from the decoders' per-step ``*_seconds``):
``non_target_ms_per_round = sum(those seconds) / sum(rounds)`` (a round is a target call) and
``non_target_per_verify = sum(those seconds) / sum(verify seconds)``; the prefill is in
neither.

Beside the mixed stream and the domains, each method is aggregated over the prompts whose
target output does not loop and those whose output does (``LOOP_SCOPES`` and ``is_looping``
of :mod:`spec_adapters.app.bench.repetition`), and every aggregate carries the mean
share of its outputs inside repeated 5-grams and the share that reached the token cap: how
much of a speed-up comes from the target repeating itself. ``prefix_tok_s`` is tokens/s on the
loop-free prefix of each output (:func:`~spec_adapters.app.bench.repetition.prefix_tok_s`,
from the per-token arrival times), ``prefix_share`` the share of new tokens in those prefixes
and ``prefix_speedup_target`` its ratio to the target's: the speed-up with every loop cut off.

Derived methods (no extra decoding): ``generalist`` = ``fixed:ngram-general``; ``specialist``
= the fixed run of the query's own domain drafter; ``router`` = the fixed run of the drafter
the router picks (its embedding time added); ``oracle`` = per query, the fixed run with the
best MAT in hindsight. With a fixed seed a fixed-policy run is deterministic, so these are
exactly what those methods would have produced.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from spec_adapters.app.bench.repetition import (
    LOOP_SCOPES,
    is_looping,
    prefix_tok_s,
    repeated_share,
)

if TYPE_CHECKING:
    from spec_adapters.app.bench.config import BenchConfig

__all__ = ["aggregate", "regret_curves"]

NON_TARGET_STEPS = ("select", "draft", "eval", "update")


def _agg(rows: Sequence[dict], cap: int | None = None) -> dict:
    """MAT, tokens/s and (decoder runs: all ``rows`` have ``timing``) the verify and non-target
    time per round, pooled over ``rows`` (see the module docstring); the mean share of an
    output inside repeated 5-grams (rows with their tokens) and, given the ``cap`` on new
    tokens, the share of outputs that reached it."""
    tok = sum(r["new_tokens"] for r in rows)
    outputs = [r["tokens"] for r in rows if "tokens" in r]
    calls = sum(r["target_calls"] for r in rows)
    sec = sum(r["seconds"] for r in rows)
    sec = sec if np.isfinite(sec) else 0.0  # replayed rows are not timed
    cpu = sum(np.nan if r.get("replayed") else r.get("cpu_seconds", np.nan) for r in rows)
    prefix, prefix_share = prefix_tok_s(rows)
    out = {"mat": tok / calls if calls else None, "tok_s": tok / sec if sec else None,
           "prefix_tok_s": prefix, "prefix_share": prefix_share,
           "tok_cpu_s": tok / cpu if cpu and np.isfinite(cpu) else None,
           "queries": len(rows), "new_tokens": tok, "rounds": calls,
           "repeated_share": (float(np.mean([repeated_share(t) for t in outputs]))
                              if outputs else None),
           "cap_share": (float(np.mean([r["new_tokens"] >= cap for r in rows]))
                         if cap and rows else None),
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
    """Add ``speedup_target`` / ``speedup_hf_lookup`` (tokens/s ratios) and
    ``prefix_speedup_target`` (loop-free prefixes) to every method and scope (mixed, each
    domain) of one temperature's ``table`` (method -> scope -> agg)."""
    for v in table.values():
        for scope, a in v.items():
            for key, ref, rate in (("speedup_target", "target", "tok_s"),
                                   ("speedup_hf_lookup", "hf-prompt-lookup", "tok_s"),
                                   ("prefix_speedup_target", "target", "prefix_tok_s")):
                base = table.get(ref, {}).get(scope, {}).get(rate)
                a[key] = a[rate] / base if base and a.get(rate) is not None else None


def _derived(rows_q: dict[str, dict], domain: str, pool, router_rows: dict) -> dict:
    """generalist / specialist / oracle (/ router) runs of one query from its fixed runs."""
    out = {}
    fixed = {m[6:]: r for m, r in rows_q.items() if m.startswith("fixed:")}
    if f"ngram-{domain}" in fixed:
        out["specialist"] = fixed[f"ngram-{domain}"]
    if "ngram-general" in fixed:
        out["generalist"] = fixed["ngram-general"]
    members = {n: fixed[n] for n in pool.names if n in fixed}  # not the baselines
    if members and len(members) == len(pool.names):
        best = max(members, key=lambda n: (members[n]["new_tokens"]
                                           / max(1, members[n]["target_calls"]),
                                           -np.nan_to_num(members[n]["seconds"], nan=0.0)))
        out["oracle"] = {**members[best], "oracle_choice": best}
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
    per_loop: dict = defaultdict(lambda: defaultdict(list))  # (temp, method) -> LOOP_SCOPES
    for (qid, temp), rows_q in by_q.items():
        domain = next(iter(rows_q.values()))["domain"]
        all_rows = dict(rows_q)
        all_rows |= _derived(rows_q, domain, pool, routes.get(qid, {}))
        ref = rows_q.get("target", {}).get("tokens")
        for m, r in all_rows.items():
            per_method[(temp, m)][domain].append(r)
            if ref is not None:
                per_loop[(temp, m)][LOOP_SCOPES[is_looping(ref)]].append(r)
    cap = cfg.max_new_tokens
    for (temp, m), doms in per_method.items():
        t = main.setdefault(str(temp), {})
        t[m] = {"mixed": _agg([r for rs in doms.values() for r in rs], cap),
                **{d: _agg(rs, cap) for d, rs in doms.items()},
                **{scope: _agg(rs, cap) for scope, rs in per_loop[(temp, m)].items()}}
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
                                      "oracle", "fixed:ngram-union", "fixed:prompt-lookup")}
            if mix.get("oracle", {}).get("mat") and mix.get("generalist", {}).get("mat"):
                ratios[temp]["oracle/generalist"] = mix["oracle"]["mat"] / mix["generalist"]["mat"]
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
            "stream_thirds": stream_thirds(records), "drafters": pool.names,
            "greedy_identical": identical(by_q, greedy=True),
            **({"sampled_identical": identical(by_q, greedy=False)} if cfg.seeded else {})}


def identical(by_q: dict, greedy: bool) -> dict[str, list[int]]:
    """Per method of the greedy (or sampled) main stream: ``[queries whose output equals the
    target's (``model.generate``) token for token, queries compared]``."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (_qid, temp), rows_q in by_q.items():
        ref = rows_q.get("target", {}).get("tokens")
        if (temp == 0.0) != greedy or ref is None:
            continue
        for m, r in rows_q.items():
            if m != "target" and "tokens" in r:
                out[m][0] += r["tokens"] == ref
                out[m][1] += 1
    return dict(out)


def stream_thirds(records: list[dict],
                  methods=("fixed:suffix", "fixed:suffix-no-memory", "normalhedge",
                           "normalhedge-carry")) -> dict:
    """MAT over the first and the last third of the greedy mixed stream (queries in stream
    order), per method: what a drafter or learner that keeps state along the stream gains
    from it."""
    out = {}
    for m in methods:
        rows = [r for r in records if r["section"] == "main" and r["temperature"] == 0.0
                and r["method"] == m]
        n = len(rows) // 3
        if n:
            out[m] = {"first_third": _agg(rows[:n])["mat"], "last_third": _agg(rows[-n:])["mat"],
                      "queries_per_third": n}
    return out


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
            fixed = [rq[f"fixed:{n}"] for n in pool.names if f"fixed:{n}" in rq]
            if m not in rq or not fixed:
                continue
            best = max(v["new_tokens"] / max(1, v["target_calls"]) for v in fixed)
            for a in rq[m].get("accepted", []):
                total += best - (a + 1)
                acc.append(round(total, 4))
        curves[m] = acc
    return curves
