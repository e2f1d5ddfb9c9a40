"""The benchmark's figures (PNG, matplotlib): tokens/s per method, each query's speed-up against
its repetition, Fig. 5a regret, Fig. 5b pool size, Table 1 heat map."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spec_adapters.app.bench.repetition import REPEAT_THRESHOLD, repeated_share
from spec_adapters.app.bench.tables import LABELS

__all__ = ["plot", "plot_speedup_vs_repetition", "repetition_panels"]


def _save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` (PNG, 120 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_speedup_vs_repetition(panels: list[tuple[str, list[float], dict[str, list[float]]]],
                               path: Path, threshold: float) -> Path:
    """Each prompt's speed-up over plain against the share of plain's output inside repeated
    5-grams (:func:`~spec_adapters.app.bench.repetition.repeated_share`), one panel per
    ``(title, repeated shares, {method label: speed-ups})``, one colour per method, the
    looping ``threshold`` dotted (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False,
                             sharey=True)
    for ax, (title, repeated, speedups) in zip(axes[0], panels, strict=True):
        for label, xs in speedups.items():
            ax.scatter(repeated, xs, s=14, label=label, alpha=0.75)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axvline(threshold, color="grey", lw=0.8, ls=":")
        ax.set_title(title)
        ax.set_xlabel("plain output: share in repeated 5-grams")
    axes[0][0].set_ylabel("speed-up over plain (per prompt)")
    axes[0][-1].legend(fontsize=7)
    return _save(fig, path)


def repetition_panels(records: list[dict]) -> list[tuple[str, list[float], dict[str, list[float]]]]:
    """Per temperature of the mixed stream, what :func:`plot_speedup_vs_repetition` draws:
    each query's share of the target's own output inside repeated 5-grams and every timed
    method's speed-up over the target on it (tokens/s over ``target``'s); temperatures with
    no timed method besides the target are left out."""
    runs: dict = {}
    for r in records:
        timed = r.get("seconds") is not None and np.isfinite(r["seconds"]) and r["seconds"] > 0
        if r["section"] == "main" and timed and r.get("tokens") is not None:
            runs.setdefault(float(r["temperature"]), {}).setdefault(r["method"], {})[
                r["qid"]] = r
    panels = []
    for temp, by_method in sorted(runs.items()):
        target = by_method.get("target", {})
        qids = sorted(target)
        speedups = {LABELS.get(m, m): [(rs[q]["new_tokens"] / rs[q]["seconds"])
                                       / (target[q]["new_tokens"] / target[q]["seconds"])
                                       for q in qids]
                    for m, rs in by_method.items() if m != "target" and set(rs) >= set(qids)}
        if qids and speedups:
            panels.append((f"temperature {temp:g}",
                           [repeated_share(target[q]["tokens"]) for q in qids], speedups))
    return panels


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
    """speed.png, speedup_vs_repetition.png, fig5a_regret.png, fig5b_poolsize.png,
    table1_heatmap.png (those with data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    timed = {temp: {m: v["mixed"]["tok_s"] for m, v in t.items() if v["mixed"].get("tok_s")}
             for temp, t in summary.get("main", {}).items()}
    if any(len(v) > 1 for v in timed.values()):
        written.append(_speed_bars(out / "speed.png", timed))
    panels = repetition_panels(records)
    if panels:
        written.append(plot_speedup_vs_repetition(panels, out / "speedup_vs_repetition.png",
                                                  REPEAT_THRESHOLD))
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


def _speed_bars(path: Path, timed: dict[str, dict[str, float]]) -> Path:
    """Horizontal bars: tokens/s on the mixed stream per timed method, one panel per
    temperature, each bar labelled with its speed-up over the target alone."""
    import matplotlib.pyplot as plt

    temps = [t for t, v in timed.items() if len(v) > 1]
    fig, axes = plt.subplots(1, len(temps), figsize=(6.5 * len(temps), 0.5 + 0.42 * max(
        len(timed[t]) for t in temps)), squeeze=False)
    for ax, temp in zip(axes[0], temps, strict=True):
        rows = sorted(timed[temp].items(), key=lambda kv: kv[1])
        base = timed[temp].get("target")
        ax.barh([LABELS.get(m, m) for m, _ in rows], [v for _, v in rows], color="#4477aa")
        for i, (_m, v) in enumerate(rows):
            ax.text(v, i, f" {v:.1f}" + (f" ({v / base:.2f}x)" if base else ""),
                    va="center", fontsize=8)
        ax.set_xlabel("tokens/s (mixed stream, wall clock)")
        ax.set_title(f"temperature {temp}")
        ax.set_xlim(0, 1.3 * max(v for _, v in rows))
    return _save(fig, path)
