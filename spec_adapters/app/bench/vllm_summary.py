"""What ``hedgespec bench-vllm``'s records mean (:mod:`spec_adapters.app.bench.vllm` runs
them): the methods' names and labels, the issues' targets, a phase's name and the records'
key, then the tables, the targets met, the figures (:func:`summarize_vllm`, :func:`markdown`,
:func:`plot_vllm`, :func:`repetition_panel`). Every figure is defined in
:mod:`spec_adapters.app.bench.vllm`'s docstring."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from spec_adapters.app.bench.config import TOP_P
from spec_adapters.app.bench.records import Records
from spec_adapters.app.bench.repetition import (
    LOOP_SCOPES,
    is_looping,
    prefix_tok_s,
    repeated_share,
)

__all__ = ["ABLATIONS", "ENGINE_VARIANTS", "LEARNERS", "LOAD_TARGETS", "TARGETS", "VLLM_LABELS",
           "VllmRecords", "label", "markdown", "phase_key", "plot_vllm", "repetition_panel",
           "summarize_vllm"]

LEARNERS = ("plain", "ngram", "suffix", "suffix-k", "hedgespec", "exp3spec", "ucbspec")
# HedgeSpec with one of its parts off (the ablation rows): method -> its proposer settings
ABLATIONS = {"hedgespec-lengths": {"stop_rules": [0.0]},
             "hedgespec-unpriced": {"drafting_price": False},
             "hedgespec-allscored": {"feedback_budget": 1.0, "time_budget": 1.0},
             "hedgespec-noconsensus": {"consensus": False}}
# vLLM plain with other engine arguments (a diagnostic row): method -> its LLM(...) arguments;
# "plain-sync": the scheduling every speculative method but EAGLE's runs under (vLLM turns its
# asynchronous scheduling off for them)
ENGINE_VARIANTS = {"plain-sync": {"async_scheduling": False}}
VLLM_LABELS = {"plain": "vLLM plain",
               "plain-sync": "vLLM plain, asynchronous scheduling off (as under speculation)",
               "ngram": "vLLM ngram",
               "suffix": "vLLM suffix (Arctic Inference, its depth 24)",
               "suffix-k": "vLLM suffix", "exp3spec": "EXP3Spec proposer",
               "hedgespec": "HedgeSpec proposer (NormalHedge, cost-aware)",
               "ucbspec": "UCBSpec proposer",
               "hedgespec-lengths": "HedgeSpec, stop rules off ((drafter, k) experts)",
               "hedgespec-unpriced": "HedgeSpec, drafting price off (no c [D > 0], no "
                                     "proposal time)",
               "hedgespec-allscored": "HedgeSpec, label-efficient scoring off (every round "
                                      "scored)",
               "hedgespec-noconsensus": "HedgeSpec without the consensus drafter"}
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


def phase_key(concurrency: int, rate: float | None) -> str:
    """A phase's name: ``"16"`` (16 in flight) or ``"1/s"`` (arriving at 1 request/s)."""
    return str(concurrency) if rate is None else f"{rate:g}/s"


class VllmRecords(Records):
    """The append-only ``records.jsonl`` of :class:`spec_adapters.app.bench.run.Records`, one
    record per (method, phase, run); ``run`` 0 where a record has none."""

    @staticmethod
    def key(r: dict) -> tuple:
        return (r["method"], phase_key(int(r["concurrency"]), r.get("rate")), r.get("run", 0))


def _sum_counts(parts: list[dict]) -> dict:
    """The numbers of ``parts`` (one dict per run) added up; anything else (the proposer's
    step model and per-drafter figures) the last run's."""
    last = parts[-1]
    return {k: sum(p.get(k, 0) for p in parts)
            if isinstance(v, int | float) and not isinstance(v, bool) else v
            for k, v in last.items()}


def pool_runs(runs: list[dict]) -> dict:
    """One (method, phase)'s records of several runs as one: their requests together, their
    seconds, vLLM's counters and the proposer's counters added up (so tok/s is all tokens over
    all the runs' time); a single run unchanged."""
    if len(runs) == 1:
        return runs[0]
    return {**runs[-1], "seconds": sum(r["seconds"] for r in runs),
            "requests": [q for r in runs for q in r["requests"]],
            "counters": _sum_counts([r.get("counters") or {} for r in runs]),
            "proposer": _sum_counts([r.get("proposer") or {} for r in runs])
            if all(r.get("proposer") for r in runs) else {}}


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f} ms"


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
            "drafters": pr.get("drafters"), "step_model": pr.get("step_model")}


def _stats(reqs: list[dict], seconds: float) -> dict:
    """tok/s over ``seconds``, MAT and mean time in flight of some requests."""
    tok = sum(q["new_tokens"] for q in reqs)
    steps = sum(q["new_tokens"] - q["accepted"] for q in reqs)
    return {"tok_s": tok / seconds if seconds > 0 else None,
            "mat": tok / steps if steps > 0 else None,
            "s_per_request": sum(q["seconds"] for q in reqs) / len(reqs) if reqs else None,
            "requests": len(reqs), "new_tokens": tok, "steps": steps,
            "accepted": sum(q["accepted"] for q in reqs)}


def _ratio(a, b):
    return a / b if a is not None and b else None


def summarize_vllm(records: list[dict], exact: bool = True, cap: int | None = None) -> dict:
    """The benchmark's tables from its records (see the module docstring).

    Parameters
    ----------
    records : list of dict
    exact : bool
        Whether outputs are compared with ``plain``'s: greedy, or sampled with a seed per
        request (unseeded sampled outputs differ by chance).
    cap : int, optional
        ``max_new_tokens``: the share of requests that reached it rather than EOS is reported.

    Returns
    -------
    dict
        ``concurrencies`` and ``phases`` (:func:`phase_key`, the concurrencies first);
        ``methods``: method -> phase -> ``tok_s``, ``mat``, ``s_per_request``, ``requests``,
        ``new_tokens``, ``steps``, ``accepted``, ``drafted``, ``seconds``, ``x_plain``,
        ``x_plain_runs`` (each run's ratio to plain's same run where a phase ran several times,
        :func:`pool_runs`; else ``[]``), ``x_ngram``, ``x_suffix``, ``drafted_share``,
        ``steps_drafted_share``, ``overhead``, ``drafters``
        (:func:`_drafting`), ``prefix_tok_s`` / ``prefix_share`` / ``prefix_x_plain``
        (:func:`~spec_adapters.app.bench.repetition.prefix_tok_s` over the requests: tokens/s
        on the loop-free prefix of each output, over each request's own time in flight; the
        share of tokens in those prefixes; its ratio to plain's; ``None`` without per-token
        times), ``cap_share`` (requests that reached ``cap`` rather than EOS;
        ``None`` without ``cap``), ``repeated_share`` (the mean share of an output inside
        repeated 5-grams), ``loops`` (with a ``plain`` record: :data:`LOOP_SCOPES` -> the
        stats and ``x_plain`` of the requests whose plain output does not loop / loops),
        ``identical`` (``exact``: every output
        equals ``plain``'s in that phase; ``None`` without a ``plain`` record or unseeded
        sampled),
        ``mismatched`` (those qids) and ``domains``: domain -> ``tok_s`` (over the time in
        flight of its requests), ``mat``, ``x_plain``; ``domains``; ``targets``: issue 12's
        goals (:data:`TARGETS`) that the records can answer, each ``name``, ``value``,
        ``goal``, ``met``.
    """
    runs: dict = defaultdict(dict)  # (method, phase) -> run -> record
    for r in records:
        m, c, run = VllmRecords.key(r)
        runs[(m, c)][run] = r
    by = {mc: pool_runs([rs[n] for n in sorted(rs)]) for mc, rs in runs.items()}
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
        row["prefix_tok_s"], row["prefix_share"] = prefix_tok_s(r["requests"])
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
        if plain is not None and exact:
            ref = {q["qid"]: q["tokens"] for q in plain["requests"]}
            row["mismatched"] = [q["qid"] for q in r["requests"]
                                 if ref.get(q["qid"]) != q["tokens"]]
            row["identical"] = not row["mismatched"]
        else:
            row["mismatched"], row["identical"] = [], None
        methods[m][c] = row
    for m, rows in methods.items():
        for c, row in rows.items():
            base = {ref: methods.get(ref, {}).get(c) for ref in ("plain", "ngram", "suffix")}
            for ref, b in base.items():
                row[f"x_{ref}"] = _ratio(row["tok_s"], b["tok_s"]) if b else None
            row["x_plain_runs"] = _run_ratios(runs.get((m, c), {}), runs.get(("plain", c), {}))
            row["prefix_x_plain"] = (_ratio(row["prefix_tok_s"], base["plain"]["prefix_tok_s"])
                                     if base["plain"] else None)
            for key in ("domains", "loops"):
                for d, dr in row.get(key, {}).items():
                    b = (base["plain"] or {}).get(key, {}).get(d)
                    dr["x_plain"] = _ratio(dr["tok_s"], b["tok_s"]) if b else None
    domains = sorted({d for rows in methods.values() for row in rows.values()
                      for d in row["domains"]})
    return {"concurrencies": [int(c) for c in phases if not c.endswith("/s")],
            "phases": phases, "methods": dict(methods), "domains": domains,
            "targets": _targets(methods)}


def _run_ratios(runs: dict, plain: dict) -> list[float]:
    """Each run's tok/s over plain's in the same run, for the runs both have; ``[]`` for a
    single run (the pooled ``x_plain`` says it all)."""
    both = sorted(set(runs) & set(plain))
    if len(both) < 2:
        return []
    return [_stats(runs[n]["requests"], runs[n]["seconds"])["tok_s"]
            / _stats(plain[n]["requests"], plain[n]["seconds"])["tok_s"] for n in both]


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
    """Per phase the speed table (tok/s, x plain (all runs pooled, each run's beside it where
    there are several; by whether plain's output loops; on the loop-free prefixes), x ngram,
    MAT, s / request, the share of request-steps that drafted, the proposer's share of a step,
    outputs equal to plain) and the per-domain speed-up table, then the targets."""
    st = summary.get("settings", {}).get("bench_vllm", {})
    k, temp = st.get("k"), st.get("temperature", 0.0)
    how = ("greedy" if not temp else f"T = {temp:g}, top-p {TOP_P}"
           + (", a seed per request" if st.get("seeded") else "")) + (
        ", EOS ignored (stress setting)" if st.get("stop_at_eos") is False else
        ", requests stop at EOS")
    lines = []
    for c in summary.get("phases", [str(c) for c in summary["concurrencies"]]):
        rows = [(m, v[c]) for m, v in summary["methods"].items() if c in v]
        lines += [f"### vLLM, {_phase(c)} ({how})", "",
                  "| method | tok/s | x plain | x plain, not looping / looping | "
                  "x plain, loop-free prefix (its share) | x ngram | MAT | "
                  "s / request | drafted steps | proposer time | repeated 5-grams | at cap | "
                  "outputs = plain |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m, r in rows:
            same = {None: "–", True: "yes"}.get(r["identical"], f"no ({len(r['mismatched'])})")
            loops = r.get("loops", {})
            split = " / ".join(f"{_f(loops[s]['x_plain'])} ({loops[s]['requests']})"
                               if s in loops else "–" for s in LOOP_SCOPES)
            prefix = ("–" if r.get("prefix_x_plain") is None else
                      f"{r['prefix_x_plain']:.2f} ({r['prefix_share']:.0%})")
            runs = r.get("x_plain_runs") or []
            x_plain = _f(r["x_plain"]) + (" (runs " + ", ".join(f"{x:.2f}" for x in runs) + ")"
                                          if runs else "")
            lines.append(f"| {label(m, k)} | {_f(r['tok_s'], '{:.1f}')} | {x_plain} | "
                         f"{split} | {prefix} | {_f(r['x_ngram'])} | {_f(r['mat'])} | "
                         f"{_f(r['s_per_request'], '{:.1f}')} | "
                         f"{_f(r.get('drafted_share'), '{:.0%}')} | "
                         f"{_f(r.get('overhead'), '{:.1%}')} | "
                         f"{_f(r.get('repeated_share'), '{:.0%}')} | "
                         f"{_f(r.get('cap_share'), '{:.0%}')} | {same} |")
        lines += [f"\n{label(m, k)}'s step model (fitted as it ran): a step {_ms(sm['step_s'])}, "
                  f"a row {_ms(sm['row_s'])}, a drafted token {_ms(sm['draft_s'])}, "
                  f"speculating at all {_ms(sm['spec_s'])}"
                  for m, r in rows if (sm := r.get("step_model"))]
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
    method's speed-up over ``plain`` on it (tokens over time in flight), from the first run.

    Raises
    ------
    ValueError
        The phase has no ``plain`` record.
    """
    by = {VllmRecords.key(r)[:2]: r for r in records if r.get("run", 0) == 0}
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
