"""Markdown tables of an aggregated benchmark summary, and the display names of its methods.

The summary is the output of :func:`spec_adapters.app.bench.aggregate.aggregate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from spec_adapters.app.bench.repetition import LOOP_SCOPES

__all__ = ["LABELS", "MAIN_ORDER", "markdown_tables", "speed_tables"]

LABELS = {"target": "target alone", "generalist": "generalist (n-gram, mix)",
          "specialist": "own-domain specialist", "router": "router (MiniLM + logreg)",
          "exp3spec": "EXP3Spec", "ucbspec": "UCBSpec", "metasd-ucb": "MetaSD-UCB",
          "normalhedge": "HedgeSpec (NormalHedge)",
          "normalhedge-cost": "HedgeSpec cost-aware (NormalHedge, (drafter, k))",
          "normalhedge-cost-consensus": "HedgeSpec cost-aware with the consensus drafter",
          "hedge": "HedgeSpec (Hedge)", "adahedge": "HedgeSpec (AdaHedge)",
          "normalhedge-carry": "HedgeSpec (NormalHedge, carried across the stream)",
          "oracle": "hindsight oracle", "hf-prompt-lookup": "HF prompt lookup",
          "hf-static-compiled": "HF static cache + torch.compile",
          "hf-static-compiled-lookup": "HF static cache + torch.compile, prompt lookup",
          "target-rows-first": "target alone, our step (layout measured; compiled where set)",
          "fixed:ngram-union": "union n-gram (all domains)", "fixed:suffix": "suffix drafter",
          "fixed:prompt-lookup": "prompt lookup (ours)",
          "fixed:suffix-no-memory": "suffix drafter without the stream memory"}
MAIN_ORDER = ("target", "hf-static-compiled", "target-rows-first", "hf-prompt-lookup",
              "hf-static-compiled-lookup",
              "fixed:prompt-lookup", "fixed:suffix", "fixed:suffix-no-memory",
              "fixed:ngram-union", "generalist", "specialist", "router", "exp3spec", "ucbspec",
              "metasd-ucb", "normalhedge", "normalhedge-carry", "hedge", "adahedge",
              "normalhedge-cost", "normalhedge-cost-consensus", "oracle")


def _domains(table: dict) -> list[str]:
    """The domain scopes of one temperature's table (not the mixed stream, not the loop
    scopes)."""
    return sorted({d for v in table.values() for d in v if d != "mixed" and d not in LOOP_SCOPES})


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def _prefix(a: dict) -> str:
    """``x (share)``: the loop-free-prefix speed-up and the share of tokens it covers."""
    if a.get("prefix_speedup_target") is None:
        return "–"
    return f"{a['prefix_speedup_target']:.2f} ({a['prefix_share']:.0%})"


def speed_tables(summary: dict, methods: Sequence[str] = MAIN_ORDER) -> list[str]:
    """Markdown lines: per temperature and scope (mixed stream, the prompts whose target output
    does not loop and those whose output does, then each domain), tokens/s, speed-ups against
    the target and HF prompt lookup, MAT, the non-target time per round and its share of the
    verification time, the share of the outputs in repeated 5-grams and at the token cap, and
    the speed-up against the target on the loop-free prefix of each output (with the share of
    the new tokens in those prefixes), for ``methods`` then the fixed drafters."""
    lines = []
    top_p = summary.get("settings", {}).get("bench", {}).get("top_p", 1.0)
    for temp, t in summary["main"].items():
        warp = f", top-p {top_p}" if float(temp) > 0 and top_p < 1 else ""
        rows = [m for m in methods if m in t] + sorted(m for m in t if m.startswith("fixed:")
                                                        and m not in methods)
        loops = [s for s in LOOP_SCOPES if any(s in v for v in t.values())]
        scopes = ["mixed", *loops, *_domains(t)]
        for scope in scopes:
            n = max((t[m][scope]["queries"] for m in rows if scope in t[m]), default=0)
            lines += [f"### Speed, temperature {temp}{warp}, {scope}"
                      + (" stream" if scope == "mixed" else " prompts") + f" ({n})", "",
                      "| method | tok/s | x target | x HF lookup | MAT | non-target ms / round "
                      "| non-target / verify | repeated 5-grams | at cap "
                      "| x target, loop-free prefix (its share) |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for m in rows:
                a = t[m].get(scope)
                if a is None:
                    continue
                lines.append(f"| {LABELS.get(m, m)} | {_f(a['tok_s'], '{:.1f}')} | "
                             f"{_f(a.get('speedup_target'))} | "
                             f"{_f(a.get('speedup_hf_lookup'))} | {_f(a['mat'])} | "
                             f"{_f(a.get('non_target_ms_per_round'), '{:.1f}')} | "
                             f"{_f(a.get('non_target_per_verify'))} | "
                             f"{_f(a.get('repeated_share'), '{:.0%}')} | "
                             f"{_f(a.get('cap_share'), '{:.0%}')} | "
                             f"{_prefix(a)} |")
            lines.append("")
    return lines


def markdown_tables(summary: dict, methods: Sequence[str] = MAIN_ORDER) -> str:
    """The main table per temperature (mixed stream + per domain), the speed tables
    (:func:`speed_tables`), ratios, Table 1."""
    lines = []
    for temp, t in summary["main"].items():
        domains = _domains(t)
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
    for key, what in (("greedy_identical", "Greedy output"),
                      ("sampled_identical", "Sampled output (seeded, the same draws)")):
        if summary.get(key):
            lines += [f"{what} identical to `model.generate` (queries): "
                      + ", ".join(f"{LABELS.get(m, m)} {a}/{n}"
                                  for m, (a, n) in summary[key].items()), ""]
    if summary.get("ratios"):
        keys = list(dict.fromkeys(k for r in summary["ratios"].values() for k in r))
        lines += ["### HedgeSpec (NormalHedge) ratios on the mixed stream", "",
                  "| temperature | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        for temp, r in summary["ratios"].items():
            lines.append(f"| {temp} | " + " | ".join(_f(r.get(k)) for k in keys) + " |")
        lines.append("")
    if summary.get("stream_thirds"):
        lines += ["### Along the stream: MAT over its first and last third, greedy", "",
                  "| method | first third | last third |", "|---|---|---|"]
        for m, v in summary["stream_thirds"].items():
            lines.append(f"| {LABELS.get(m, m)} | {_f(v['first_third'])} | "
                         f"{_f(v['last_third'])} |")
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
