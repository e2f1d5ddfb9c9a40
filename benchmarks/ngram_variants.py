"""Which model-free drafter, built how: a sweep on *training-side* data (no benchmark prompt).

For each domain the last ``--dev`` distilled answers (the target's own greedy answers to
training-side prompts, ``hedgespec distill``) are held out as a dev stream; every variant is
built from the domain's training text (``--max-train-tokens``) plus the other answers and
replayed on the dev stream (greedy, ``K`` = 4, :mod:`spec_adapters.app.bench.replay`: exact MAT
without the target). Variants:

- ``text``: the n-gram on the domain text alone;
- ``text+answers w=W``: plus the answers, each n-gram counted ``W`` times;
- ``answers``: the answers alone;
- ``... ctx=C``: interpolated with the request itself (the n-grams of the prompt and of the text
  generated so far, each occurrence counted ``C`` times: REST + prompt lookup in one model,
  ``NGramDrafter(context_weight=C)``);
- ``prompt lookup``, ``suffix`` (its memory learns along the dev stream).

    python benchmarks/ngram_variants.py [--weights 1,4,16] [--ctx 0,4] [--dev 24]
                                        [--json results/ngram_variants.json]

Prints MAT per domain and variant; docs/benchmark-history.md ("Specialists") quotes it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from spec_adapters.app.bench.replay import replay_fixed
from spec_adapters.app.distill.answers import (
    answers_folder,
    load_answers,
    shipped_dir,
    weights_fingerprint,
)
from spec_adapters.app.domains import DOMAINS, chat_ids, load_domains
from spec_adapters.app.pool.builders import token_window, tokenize_budget
from spec_adapters.drafters.ngram import NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.suffix import SuffixDrafter
from spec_adapters.hf.models import load_target
from spec_adapters.hf.target import output_vocab_size


def _mat(make, stream, k: int) -> float:
    drafter = make()
    tokens = rounds = 0
    for prompt, answer in stream:
        r = replay_fixed(drafter, prompt, answer, k)
        tokens, rounds = tokens + r["new_tokens"], rounds + r["target_calls"]
    return tokens / max(rounds, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", default=".cache")
    p.add_argument("--answers-dir", default=str(shipped_dir()))
    p.add_argument("--weights", default="1,4,16")
    p.add_argument("--ctx", default="0,4")
    p.add_argument("--dev", type=int, default=24)
    p.add_argument("--max-train-tokens", type=int, default=300_000)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load_target()
    V = output_vocab_size(model)
    folder = answers_folder(a.answers_dir, model, tok)
    fp = weights_fingerprint(model, tok)
    weights = [float(w) for w in a.weights.split(",")]
    ctxs = [float(c) for c in a.ctx.split(",")]
    domains = load_domains(a.cache_dir, DOMAINS)
    table: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for name, dom in domains.items():
        answers, prompts = load_answers(folder, name, fp, 50_000)
        train, dev = answers[:-a.dev], list(zip(prompts[-a.dev:], answers[-a.dev:], strict=True))
        stream = [(chat_ids(tok, q), ans) for q, ans in dev]
        text = token_window(tokenize_budget(dom.train, tok, a.max_train_tokens),
                            a.max_train_tokens)

        def ngram(docs, ws, ctx):
            return lambda: NGramDrafter.from_corpus(docs, V, order=4, weights=ws,
                                                    context_weight=ctx)

        row = {"prompt lookup": _mat(lambda: PromptLookupDrafter(V), stream, a.k),
               "suffix": _mat(lambda: SuffixDrafter(V), stream, a.k)}
        for c in ctxs:
            tag = f" ctx={c:g}" if c else ""
            row["text" + tag] = _mat(ngram(text, None, c), stream, a.k)
            row["answers" + tag] = _mat(ngram(train, None, c), stream, a.k)
            for w in weights:
                row[f"text+answers w={w:g}" + tag] = _mat(
                    ngram(text + train, [1.0] * len(text) + [w] * len(train), c), stream, a.k)
        table[name] = row
        print(f"{name:10} " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    variants = list(next(iter(table.values())))
    print(f"\n| variant | {' | '.join(table)} | mean |\n|---|" + "---|" * (len(table) + 1))
    for v in variants:
        vals = [table[d][v] for d in table]
        print(f"| {v} | " + " | ".join(f"{x:.2f}" for x in vals)
              + f" | {sum(vals) / len(vals):.2f} |")
    print(f"\n{time.perf_counter() - t0:.0f} s; dev: last {a.dev} distilled answers per domain")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"mat": table, "dev": a.dev, "k": a.k}, indent=1))


if __name__ == "__main__":
    main()
