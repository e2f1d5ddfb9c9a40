"""``hedgespec bench --engine llamacpp``: HedgeSpec on llama.cpp against llama.cpp's own ways to
decode the same GGUF, in one run, on the same prompts (issue 24).

The prompts are the benchmark's held-out mixed stream
(:func:`spec_adapters.app.bench.run.mixed_stream`, chat template applied); each cell (new
tokens ``n``, temperature ``T``) runs every method on every prompt, the methods interleaved
per prompt so that a drift of the machine touches them alike, after one untimed warm-up
prompt. Methods (:data:`METHODS`):

``plain``       llama.cpp one token per ``llama_decode`` with the last row's logits, our loop
                (:func:`spec_adapters.llamacpp.plain_generate`; sampled: the same draw per
                token as HedgeSpec's, so a seed gives both the same tokens): the reference;
                with ``prompt_cache`` (default) it keeps the prompt prefix its cache holds
                from the stream's previous request, as ``Llama.generate`` does (HedgeSpec on a
                target of its own alike, so both see the same cache);
``cpp-plain``   llama.cpp's own ``llama-completion``, greedy or sampled (its C++ sampler),
                the prompt in one batch as ours: the C++ reference for outputs and speed;
``lcp-plain``   llama-cpp-python's ``Llama.generate`` (its C sampler chain);
``lcp-lookup``  the same with ``LlamaPromptLookupDecoding`` (K draft tokens; its draft-model
                mode computes every position's logits);
``cpp-lookup``  llama.cpp's own C++ n-gram speculation, ``llama-lookup`` (it decodes the
                prompt but its last token, then that token alone); both programs built from
                the sources vendored in llama-cpp-python's sdist (``make llama-cpp-tools``),
                their seconds their own logs' (the model load excluded);
``hedgespec``   :class:`spec_adapters.llamacpp.LlamaCppDecoder` over the model-free pool
                (:func:`spec_adapters.app.pool.point_pool.point_pool`), cost-aware (k = 0
                allowed), learning across the cell's stream (its suffix memory too), fresh per
                cell.

Per cell and method: tokens/s (all new tokens / all seconds), the speed-up over ``plain`` (also
on the loop-free prefix of each output, for the methods our loops time token by token:
``plain`` and ``hedgespec``), MAT where known, the share of generated tokens inside repeats (a
5-gram seen earlier in the same output) and of outputs that hit the token cap, per domain the
speed-up; HedgeSpec's share of time outside ``llama_decode``; per method (greedy; sampled,
HedgeSpec only: it draws each token as ``plain`` does for the same seed), the prompts
whose output equals ``plain``'s and, for each that does not, where it diverges and how many
cache cells were filled there.

Every method decodes with one key-value cache, :class:`~spec_adapters.llamacpp.GGUFTarget`'s
(flash attention on, keys in Q8_0: ``-fa on -ctk q8_0`` for the programs): under it a row's
logits do not depend on the rows beside it, at any cache length, so the methods' greedy texts
can be equal token for token (with llama.cpp's default F16 cache, past 256 cells they cannot).

A cell is appended to ``<out>/records.jsonl`` when it finishes; a re-run with the same
settings skips finished cells (resumable), one with other settings is refused. Written:
``results.json``, ``tables.md`` (the speed-up also apart on the prompts whose plain output
loops: :func:`~spec_adapters.app.bench.repetition.is_looping`) and
``speedup_vs_repetition.png`` (each prompt's speed-up against its repetition).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from spec_adapters.app.bench.measure import TokenClock
from spec_adapters.app.bench.plots import plot_speedup_vs_repetition
from spec_adapters.app.bench.records import Records, check_settings
from spec_adapters.app.bench.repetition import (
    REPEAT_THRESHOLD,
    is_looping,
    prefix_tok_s,
    repeated_share,
)
from spec_adapters.llamacpp.cpu_backend import llama_cpp_module
from spec_adapters.llamacpp.target import INVARIANT_CACHE

__all__ = ["CELL_CAP", "CPP_TOOLS", "METHODS", "LlamaCppBenchConfig", "cpp_generate",
           "repetition_panels", "run_llamacpp_bench", "summarize_cell",
           "tables_llamacpp"]

METHODS = ("plain", "cpp-plain", "lcp-plain", "lcp-lookup", "cpp-lookup", "hedgespec")
CELL_CAP = 256  # llama.cpp's cache padding: one-row attention splits the cache past 2 x 256


@dataclass(frozen=True)
class LlamaCppBenchConfig:
    """One run of the llama.cpp benchmark: every (length, temperature) cell, every method."""

    queries_per_domain: int = 5
    lengths: tuple[int, ...] = (128, 256)
    temperatures: tuple[float, ...] = (0.0, 0.7)
    top_p: float = 0.9
    draft_length: int = 4
    threads: int = 2
    n_ctx: int = 1024
    methods: tuple[str, ...] = METHODS
    seed: int = 0
    prompt_cache: bool = True

    def __post_init__(self) -> None:
        unknown = set(self.methods) - set(METHODS)
        if unknown:
            raise ValueError(f"unknown llama.cpp benchmark methods {sorted(unknown)}; "
                             f"choose from {', '.join(METHODS)}")
        if "plain" not in self.methods:
            raise ValueError("the llama.cpp benchmark needs method 'plain' (the reference)")


class CellRecords(Records):
    """``records.jsonl``, one record per finished (length, temperature) cell."""

    @staticmethod
    def key(r: dict) -> tuple:
        return (int(r["n"]), float(r["temperature"]))


# ------------------------------------------------------------------------------------------
# the methods: each returns (tokens or text, seconds, target calls or None)
# ------------------------------------------------------------------------------------------
def _lcp_generate(llm, ids: list[int], n: int, temperature: float, top_p: float,
                  seed: int) -> list[int]:
    """llama-cpp-python's high-level generation: greedy, or ``temperature`` with top-p (top-k
    and min-p off); the end-of-generation token included, as the others count it."""
    llama_cpp = llama_cpp_module()

    llm.set_seed(seed)
    out = []
    for tok in llm.generate(ids, temp=temperature, top_k=0, top_p=top_p if temperature else 1.0,
                            min_p=0.0, reset=True):
        out.append(int(tok))
        if len(out) >= n or llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
            break
    return out


CPP_TOOLS = {"cpp-plain": "llama-completion", "cpp-lookup": "llama-lookup"}
_SECONDS = re.compile(r"(encoded|decoded)\s+(\d+) tokens in\s+([\d.]+) seconds")
_COUNTS = re.compile(r"\b(n_predict|n_drafted|n_accept)\s*=\s*(\d+)")
_PERF = re.compile(r"(sampling time|prompt eval time|\beval time)\s*=\s*([\d.]+) ms"
                   r"(?:\s*/\s*(\d+) (?:tokens|runs))?")


def cpp_generate(method: str, cpp_bin: Path, gguf: Path, prompt_text: str, n: int,
                 temperature: float, top_p: float, k: int, threads: int, n_ctx: int,
                 seed: int) -> dict:
    """One prompt through the llama.cpp program of ``method`` (:data:`CPP_TOOLS`), in the
    folder ``cpp_bin``: ``llama-completion`` (plain, the text only) or ``llama-lookup`` (its
    n-gram speculation, K = ``k``). Returns its generated text, new
    tokens (llama-lookup stops a token or two past ``n``), seconds (its own timings: prompt
    + decode, and sampling for llama-completion; the model load excluded), target calls (new
    tokens minus accepted drafts) and the prompt's length as it tokenized the text.
    ``RuntimeError`` with its log when it fails."""
    binary, lookup = cpp_bin / CPP_TOOLS[method], method == "cpp-lookup"
    cmd = [str(binary), "-m", str(gguf), "-p", prompt_text, "-n", str(n), "-t", str(threads),
           "-tb", str(threads), "-c", str(n_ctx), "-fa", "on", "-ctk", "q8_0", "-ctv", "f16",
           "--temp", str(temperature), "--top-k", "0",
           "--min-p", "0", "--top-p", str(top_p if temperature else 1.0), "-s", str(seed),
           *(["--spec-draft-n-max", str(k)] if lookup else ["-no-cnv", "--no-display-prompt"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    try:
        return (_read_lookup if lookup else _read_completion)(proc.stdout, proc.stderr,
                                                               prompt_text)
    except (KeyError, StopIteration, ValueError):
        raise RuntimeError(f"{binary.name} failed (rc {proc.returncode}): "
                           f"{proc.stderr[-2000:]}") from None


def _read_lookup(out: str, err: str, prompt_text: str) -> dict:
    found = _SECONDS.findall(err)
    times = {kind: float(sec) for kind, _n, sec in found}
    counts = {name: int(v) for name, v in _COUNTS.findall(err)}
    text = re.sub(r"\x1b\[[0-9;]*m", "", out)  # accepted drafts are coloured
    start = text.find(prompt_text)
    text = text[start + len(prompt_text):] if start >= 0 else text
    return {"text": text.removesuffix("\n\n"), "new_tokens": counts["n_predict"],
            "prompt_tokens": next(int(k) for kind, k, _s in found if kind == "encoded"),
            "seconds": times["encoded"] + times["decoded"],
            "calls": counts["n_predict"] - counts.get("n_accept", 0)}


def _read_completion(out: str, err: str, prompt_text: str) -> dict:
    perf = {name: (float(ms), count) for name, ms, count in _PERF.findall(err)}
    runs = int(perf["eval time"][1])  # the first token comes with the prompt's decode
    return {"text": out.removesuffix("\n"), "new_tokens": runs + 1,
            "prompt_tokens": int(perf["prompt eval time"][1]),
            "seconds": sum(ms for ms, _c in perf.values()) / 1e3, "calls": runs + 1}


# ------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------
def run_llamacpp_bench(gguf: Path, prompts: Sequence[tuple[str, str, list[int]]],
                       pool_factory: Callable[[int], list], cfg: LlamaCppBenchConfig, out: Path,
                       cpp_bin: Path | None = None, progress: bool = True) -> dict:
    """Run (or resume) every cell of ``cfg`` over ``prompts`` (``(qid, domain, token ids)``);
    ``pool_factory(vocab_size)`` gives a fresh drafter pool per cell; ``cpp_bin`` is the
    folder of llama.cpp's programs (:data:`CPP_TOOLS`). Returns the summary written to
    ``out/results.json``.

    Raises
    ------
    ValueError
        ``out`` holds a run of other settings; a llama.cpp program's method without it.
    """
    from tqdm import tqdm

    from spec_adapters.llamacpp import GGUFTarget

    for m in set(cfg.methods) & set(CPP_TOOLS):
        if cpp_bin is None or not (cpp_bin / CPP_TOOLS[m]).is_file():
            raise ValueError(f"method {m} needs llama.cpp's {CPP_TOOLS[m]} (not found in "
                             f"{cpp_bin}): build it with `make llama-cpp-tools`, or leave the "
                             "method out")
    out.mkdir(parents=True, exist_ok=True)
    check_settings(out, {"llamacpp": asdict(cfg), "gguf": str(Path(gguf).resolve()),
                         "prompts": [qid for qid, _d, _ids in prompts]})
    records = CellRecords(out / "records.jsonl")
    # our two loops each on a target of their own: a prompt cache holds its own stream
    targets = {m: GGUFTarget(gguf, n_ctx=cfg.n_ctx, n_threads=cfg.threads,
                             round_rows=cfg.draft_length + 1, prompt_cache=cfg.prompt_cache)
               for m in ("plain", "hedgespec")}
    target = targets["plain"]
    llms = _llama_cpp_python(gguf, cfg)
    texts = [target.detokenize(ids, special=True) for _q, _d, ids in prompts]
    warm_ids = target.tokenize("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")
    cells = [(n, t) for n in cfg.lengths for t in cfg.temperatures if not records.has(n, t)]
    for n, temp in cells:
        methods = _Methods(targets, llms, pool_factory(target.vocab_size), cfg, gguf,
                           cpp_bin, n, temp)
        for m in cfg.methods:  # untimed: the first decodes of a process are slower
            methods.run(m, warm_ids, target.detokenize(warm_ids, special=True), 0)
        rows = []
        bar = tqdm(list(enumerate(prompts)), desc=f"llama.cpp n={n} T={temp}",
                   disable=not progress)
        for i, (qid, domain, ids) in bar:
            row = {"qid": qid, "domain": domain, "prompt_tokens": len(ids)}
            for m in cfg.methods:
                row[m] = methods.run(m, ids, texts[i], cfg.seed + i)
                if "tokens" in row[m]:
                    row[m]["text"] = target.detokenize(row[m]["tokens"])
            if set(row) & set(CPP_TOOLS):  # to place a text divergence at a token
                row["plain"]["pieces"] = [target.detokenize([t]) for t in row["plain"]["tokens"]]
            rows.append(row)
        records.add({"n": n, "temperature": temp, "rows": rows,
                     "row_seconds": methods.hedgespec.row_seconds.tolist()})
    for t in targets.values():
        t.close()
    summary = {"settings": asdict(cfg),
               "cells": {f"n{r['n']}-t{r['temperature']}": summarize_cell(r, cfg.methods)
                         for r in sorted(records.rows.values(),
                                         key=lambda r: (r["n"], r["temperature"]))}}
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    (out / "tables.md").write_text(tables_llamacpp(summary))
    plot_speedup_vs_repetition(repetition_panels(list(records.rows.values()), cfg.methods),
                               out / "speedup_vs_repetition.png", REPEAT_THRESHOLD)
    return summary


class _Methods:
    """Every method of one cell (``n`` new tokens at most, temperature ``temp``): ``run``
    gives one prompt's output (tokens, or text for llama-lookup), seconds and target calls."""

    def __init__(self, targets: dict, llms: dict, pool: list, cfg: LlamaCppBenchConfig,
                 gguf: Path, cpp_bin: Path | None, n: int, temp: float) -> None:
        from spec_adapters.llamacpp import LlamaCppDecoder

        self.target, self.llms, self.cfg, self.gguf = targets["plain"], llms, cfg, gguf
        self.cpp_bin, self.n, self.temp = cpp_bin, n, temp
        self.hedgespec = LlamaCppDecoder(targets["hedgespec"], pool, cfg.draft_length)

    def run(self, method: str, ids: list[int], text: str, seed: int) -> dict:
        """One prompt's output; our loops (plain, hedgespec) also time each new token's
        arrival (``token_seconds``, a round's tokens at the round's end)."""
        from spec_adapters.llamacpp import plain_generate

        cfg, n, temp = self.cfg, self.n, self.temp
        clock = TokenClock()
        t0 = time.perf_counter()
        clock.start()

        def on_round(info) -> None:
            clock.tick(len(info.tokens))

        if method == "plain":
            toks = plain_generate(self.target, ids, n, on_token=lambda _t: clock.tick(),
                                  temperature=temp, top_p=cfg.top_p, seed=seed)
            return {"tokens": toks, "seconds": time.perf_counter() - t0,
                    "token_seconds": clock.seconds, "prompt_reused": self.target.prompt_reused}
        elif method == "hedgespec":
            r = self.hedgespec.generate(ids, n, temperature=temp, top_p=cfg.top_p, seed=seed,
                                        on_round=on_round)
            return {"tokens": r.tokens, "seconds": time.perf_counter() - t0,
                    "calls": r.stats["target_calls"], "token_seconds": clock.seconds,
                    "non_target_share": r.stats["non_target_share"],
                    "prompt_reused": r.stats["prompt_reused"]}
        elif method in CPP_TOOLS:
            return cpp_generate(method, self.cpp_bin, self.gguf, text, n, temp, cfg.top_p,
                                cfg.draft_length, cfg.threads, cfg.n_ctx, seed)
        toks = _lcp_generate(self.llms[method], ids, n, temp, cfg.top_p, seed)
        return {"tokens": toks, "seconds": time.perf_counter() - t0}


def _llama_cpp_python(gguf: Path, cfg: LlamaCppBenchConfig) -> dict:
    """llama-cpp-python's ``Llama`` per method that needs one, with the key-value cache of
    :class:`~spec_adapters.llamacpp.GGUFTarget` (flash attention on, keys in Q8_0: a row's
    logits do not depend on its batch; :data:`~spec_adapters.llamacpp.target.INVARIANT_CACHE`),
    so that every method decodes the same numbers."""
    llama_cpp = llama_cpp_module()
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    common = {"n_ctx": cfg.n_ctx, "n_threads": cfg.threads, "n_threads_batch": cfg.threads,
              **INVARIANT_CACHE, "verbose": False, "seed": cfg.seed}
    llms = {}
    if "lcp-plain" in cfg.methods:
        llms["lcp-plain"] = llama_cpp.Llama(str(gguf), **common)
    if "lcp-lookup" in cfg.methods:
        # a draft model turns logits_all on inside Llama, but its score buffer is sized by the
        # logits_all argument (n_batch rows): past 512 tokens eval overflows it (0.3.36), so
        # ask for the n_ctx rows it then writes
        llms["lcp-lookup"] = llama_cpp.Llama(
            str(gguf), draft_model=LlamaPromptLookupDecoding(num_pred_tokens=cfg.draft_length),
            logits_all=True, **common)
    return llms


# ------------------------------------------------------------------------------------------
# the summary
# ------------------------------------------------------------------------------------------
def _new_tokens(r: dict) -> int:
    return len(r["tokens"]) if "tokens" in r else int(r["new_tokens"])


def summarize_cell(cell: dict, methods: Sequence[str]) -> dict:
    """One cell's figures per method (see the module's docstring)."""
    rows, n, greedy = cell["rows"], int(cell["n"]), float(cell["temperature"]) == 0
    methods = [m for m in methods if all(m in r for r in rows)]
    out: dict = {"n": n, "temperature": float(cell["temperature"]), "prompts": len(rows),
                 "row_seconds": cell.get("row_seconds"), "methods": {}}

    def speed(m: str, keep: Callable[[dict], bool] = lambda r: True) -> float:
        rs = [r for r in rows if keep(r)]
        return sum(_new_tokens(r[m]) for r in rs) / sum(r[m]["seconds"] for r in rs)

    base = speed("plain")
    base_prefix, out["plain_prefix_share"] = prefix_tok_s([r["plain"] for r in rows])
    domains = sorted({r["domain"] for r in rows})
    looping = {r["qid"]: is_looping(r["plain"]["tokens"]) for r in rows}
    out["looping_prompts"] = sum(looping.values())
    for m in methods:
        rs = [r[m] for r in rows]
        calls = [r.get("calls") for r in rs]
        v = {"tok_s": speed(m), "x_plain": speed(m) / base,
             "mat": (sum(_new_tokens(r) for r in rs) / sum(calls)) if all(calls) else None,
             "repeated_share": float(np.mean([repeated_share(r["tokens"]) for r in rs
                                              if "tokens" in r] or [np.nan])),
             "cap_share": float(np.mean([_new_tokens(r) >= n for r in rs])),
             "per_domain_x_plain": {d: speed(m, lambda r, d=d: r["domain"] == d)
                                    / speed("plain", lambda r, d=d: r["domain"] == d)
                                    for d in domains},
             "x_plain_by_repetition": {
                 part: (speed(m, lambda r, want=want: looping[r["qid"]] == want)
                        / speed("plain", lambda r, want=want: looping[r["qid"]] == want))
                 if any(looping[r["qid"]] == want for r in rows) else None
                 for part, want in (("below", False), ("above", True))}}
        prefix = prefix_tok_s(rs)[0]
        v["x_plain_loop_free_prefix"] = (prefix / base_prefix if prefix and base_prefix
                                         else None)
        if m == "hedgespec":
            v["non_target_share"] = float(np.mean([r["non_target_share"] for r in rs]))
        if all("prompt_reused" in r for r in rs):  # our loops: what the prompt cache held
            v["prompt_reused_share"] = (sum(r["prompt_reused"] for r in rs)
                                        / sum(r["prompt_tokens"] for r in rows))
        if all("prompt_tokens" in r for r in rs):  # llama-lookup tokenizes the prompt itself
            v["same_prompt_tokens"] = sum(r[m]["prompt_tokens"] == r["prompt_tokens"]
                                          for r in rows)
        # greedy: every method; sampled: HedgeSpec, which draws each token as plain does
        if m != "plain" and (greedy or m == "hedgespec"):
            v["equal_to_plain"], v["divergences"] = _equality(rows, m)
        out["methods"][m] = v
    return out


def _equality(rows: list[dict], m: str) -> tuple[int, list[dict]]:
    """How many outputs of ``m`` equal plain's (tokens, or the text for a method that gives
    text), and where each other one diverges (token index, cache cells filled there)."""
    same, where = 0, []
    for r in rows:
        a, b = r["plain"], r[m]
        if "tokens" in b:
            if a["tokens"] == b["tokens"]:
                same += 1
                continue
            j = _first_difference(a["tokens"], b["tokens"])
            cells = r["prompt_tokens"] + j
        else:  # llama-lookup stops a token or two late: equal where both wrote
            x, y = a["text"].rstrip("\n"), b["text"].rstrip("\n")
            if x.startswith(y) or y.startswith(x):
                same += 1
                continue
            j = _first_difference(a["text"], b["text"])
            prefix = a["text"][:j]  # the plain tokens fully inside the common text
            k, acc = 0, 0
            while k < len(a["tokens"]) and acc + len(a["pieces"][k]) <= len(prefix):
                acc += len(a["pieces"][k])
                k += 1
            j, cells = k, r["prompt_tokens"] + k
        where.append({"qid": r["qid"], "token": j, "cache_cells": cells,
                      "past_split": cells > CELL_CAP})
    return same, where


def _first_difference(a: Sequence, b: Sequence) -> int:
    """The first index where ``a`` and ``b`` differ (the shorter length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def repetition_panels(cells: list[dict], methods: Sequence[str]
                      ) -> list[tuple[str, list[float], dict[str, list[float]]]]:
    """Per cell, what :func:`~spec_adapters.app.bench.plots.plot_speedup_vs_repetition` draws:
    the share of plain's output inside repeated 5-grams and each method's speed-up over plain
    (its tok/s on the prompt over plain's), prompt by prompt."""
    panels = []
    for cell in sorted(cells, key=lambda c: (c["n"], c["temperature"])):
        rows = cell["rows"]
        speedups = {m: [(_new_tokens(r[m]) / r[m]["seconds"])
                        / (_new_tokens(r["plain"]) / r["plain"]["seconds"]) for r in rows]
                    for m in methods if m != "plain" and all(m in r for r in rows)}
        panels.append((f"n = {cell['n']}, T = {cell['temperature']}",
                       [repeated_share(r["plain"]["tokens"]) for r in rows], speedups))
    return panels


def tables_llamacpp(summary: dict) -> str:
    """Markdown: one table per cell (the speed-up also apart on the prompts whose plain output
    loops, :func:`~spec_adapters.app.bench.repetition.is_looping`), then per-domain speed-ups
    and greedy equality."""
    lines = []
    for cell in summary["cells"].values():
        lines += [f"\n{cell['prompts']} prompts, at most {cell['n']} new tokens, "
                  f"T = {cell['temperature']}" + (" (top-p 0.9)" if cell["temperature"] else ""),
                  "", "| method | tok/s | x plain | x plain, prompts not looping / looping "
                  f"({cell['prompts'] - cell['looping_prompts']} / {cell['looping_prompts']}) "
                  "| x plain, loop-free prefix | MAT | repeated 5-grams | hit the cap |",
                  "|---|---|---|---|---|---|---|---|"]
        for m, v in cell["methods"].items():
            mat = "–" if v["mat"] is None else f"{v['mat']:.2f}"
            rep = "–" if np.isnan(v["repeated_share"]) else f"{v['repeated_share']:.0%}"
            split = " / ".join("–" if x is None else f"{x:.2f}x"
                               for x in v["x_plain_by_repetition"].values())
            prefix = v.get("x_plain_loop_free_prefix")
            prefix = "–" if prefix is None else f"{prefix:.2f}x"
            lines.append(f"| {m} | {v['tok_s']:.1f} | {v['x_plain']:.2f}x | {split} | {prefix} "
                         f"| {mat} | {rep} | {v['cap_share']:.0%} |")
        if cell.get("plain_prefix_share") is not None:
            lines.append(f"\nThe loop-free prefixes (tokens before the first repeated 5-gram) "
                         f"hold {cell['plain_prefix_share']:.0%} of plain's new tokens; methods "
                         "timed outside our loops have no per-token times (–).")
        if "hedgespec" in cell["methods"]:
            lines.append(f"\nHedgeSpec's time outside llama_decode: "
                         f"{cell['methods']['hedgespec']['non_target_share']:.1%}")
        reused = {m: v["prompt_reused_share"] for m, v in cell["methods"].items()
                  if "prompt_reused_share" in v}
        if reused:
            lines.append("Prompt tokens the prompt cache held (the stream's previous request): "
                         + ", ".join(f"{m} {x:.0%}" for m, x in reused.items()))
        if cell.get("row_seconds"):
            lines.append("A decode of 1 .. K + 1 rows (measured at load): " + " / ".join(
                f"{1e3 * s:.1f}" for s in cell["row_seconds"]) + " ms")
        lines.append("per domain, x plain: " + "; ".join(
            f"{m} " + ", ".join(f"{d} {x:.2f}" for d, x in v["per_domain_x_plain"].items())
            for m, v in cell["methods"].items() if m != "plain"))
        for m, v in cell["methods"].items():
            if "equal_to_plain" in v:
                past = sum(d["past_split"] for d in v["divergences"])
                lines.append(f"{m}: output equal to plain on {v['equal_to_plain']} of "
                             f"{cell['prompts']}" + (f"; of the {len(v['divergences'])} others, "
                                                     f"{past} diverge past {CELL_CAP} cache "
                                                     "cells" if v["divergences"] else ""))
    return "\n".join(lines) + "\n"
