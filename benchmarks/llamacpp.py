"""HedgeSpec on llama.cpp against llama.cpp plain and llama-cpp-python's prompt lookup.

The default target's GGUF as shipped (SmolLM2-135M-Instruct Q4_1), the held-out mixed stream
(chat template applied), one run, every method on the same prompts:

- ``plain``: llama.cpp greedy / sampled one token per ``llama_decode``, logits for the last
  row only (:func:`spec_adapters.llamacpp.decoder.plain_generate`; sampled: HedgeSpec's
  loop with a drafter that never drafts, the same sampling code);
- ``lcp-plain``: llama-cpp-python's high-level ``Llama.generate`` (its own sampler chain):
  HedgeSpec's greedy output must equal it token for token (printed);
- ``lcp-lookup``: the same with ``LlamaPromptLookupDecoding`` (its draft model mode computes
  every position's logits);
- ``hedgespec``: :class:`~spec_adapters.llamacpp.LlamaCppDecoder` over the model-free pool
  (prompt lookup 1-4, suffix, the n-gram specialists of the default pool), cost-aware.

Prints per method tok/s, MAT, speed-up over plain, the share of repeated 5-grams in the
outputs, HedgeSpec's non-target share of a round, and the greedy equality; writes JSON.

    .venv/bin/python benchmarks/llamacpp.py --queries-per-domain 5 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from spec_adapters.app.bench.run import mixed_stream
from spec_adapters.app.domains import chat_ids, load_domains
from spec_adapters.hf.models import find_default_gguf, load_target
from spec_adapters.llamacpp import GGUFTarget, LlamaCppDecoder, plain_generate
from spec_adapters.selection import PromptLookup, SuffixDraft
from spec_adapters.store.location import default_cache_dir
from spec_adapters.vllm.drafters import load_pool_folder
from spec_adapters.vllm.target_pool import loaded_target_id

TOP_P = 0.9


class NoDraft:
    """Drafts nothing: HedgeSpec's loop as a plain sampled decoder (the sampled baseline)."""

    name = "none"

    def draft(self, history, k):
        return np.zeros(0, np.int64)


def repeated_share(tokens: list[int], n: int = 5) -> float:
    """Share of the tokens whose ``n``-gram (ending at them) occurred earlier in ``tokens``."""
    seen, hits = set(), 0
    for j in range(n - 1, len(tokens)):
        gram = tuple(tokens[j - n + 1:j + 1])
        hits += gram in seen
        seen.add(gram)
    return hits / len(tokens) if tokens else 0.0


def lcp_generate(llm, ids: list[int], n: int, temperature: float) -> list[int]:
    """llama-cpp-python's high-level generation: greedy, or temperature with top-p 0.9 (top-k
    and min-p off)."""
    import llama_cpp

    out = []
    for tok in llm.generate(ids, temp=temperature, top_k=0, top_p=TOP_P if temperature else 1.0,
                            min_p=0.0, reset=True):
        out.append(int(tok))  # the end-of-generation token included, as the others do
        if len(out) >= n or llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries-per-domain", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default="plain,lcp-plain,lcp-lookup,hedgespec")
    ap.add_argument("--cache-dir", default=str(default_cache_dir()))
    ap.add_argument("--out", default="results/bench-llamacpp")
    a = ap.parse_args()
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    gguf = find_default_gguf()
    model, tok = load_target(cache_dir=a.cache_dir)
    domains = load_domains(a.cache_dir)
    prompts = [(q.qid, q.domain, chat_ids(tok, q.prompt).tolist())
               for q in mixed_stream(domains, a.queries_per_domain, 0)]
    pool_dir = Path(a.cache_dir) / "pool" / loaded_target_id(model, tok)
    target = GGUFTarget(gguf, n_ctx=1024, n_threads=a.threads)
    pool = [*(PromptLookup(n) for n in (1, 2, 3, 4)), SuffixDraft(),
            *load_pool_folder(pool_dir, target.vocab_size)]
    dec = LlamaCppDecoder(target, pool, draft_length=a.draft_length)
    methods = a.methods.split(",")
    llms = {}
    if "lcp-plain" in methods:
        llms["lcp-plain"] = llama_cpp.Llama(str(gguf), n_ctx=1024, n_threads=a.threads,
                                            n_threads_batch=a.threads, verbose=False)
    if "lcp-lookup" in methods:
        llms["lcp-lookup"] = llama_cpp.Llama(
            str(gguf), n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=a.draft_length),
            verbose=False)
    n, temp = a.max_new_tokens, a.temperature
    records = []
    warm = True  # one untimed pass over a prompt not in the stream: first decodes are slower
    for qid, domain, ids in [("warm-up", "", chat_ids(tok, "Say hello.").tolist()), *prompts]:
        for m in methods:
            t0 = time.perf_counter()
            stats = {}
            if m == "plain" and temp == 0:
                out = plain_generate(target, ids, n)
            elif m == "plain":
                out = LlamaCppDecoder(target, [NoDraft()], a.draft_length).generate(
                    ids, n, temperature=temp, top_p=TOP_P).tokens
            elif m == "hedgespec":
                r = dec.generate(ids, n, temperature=temp, top_p=TOP_P)
                out, stats = r.tokens, r.stats
            else:
                out = lcp_generate(llms[m], ids, n, temp)
            sec = time.perf_counter() - t0
            if warm:
                continue
            records.append({"qid": qid, "domain": domain, "method": m, "tokens": out,
                            "seconds": sec, "calls": stats.get("target_calls"),
                            "non_target_share": stats.get("non_target_share")})
        if warm:
            warm = False
            continue
        print(f"{qid}: " + ", ".join(f"{r['method']} {len(r['tokens']) / r['seconds']:.1f}"
                                     for r in records[-len(methods):]), flush=True)
    _report(records, methods, a, temp)


def _report(records: list[dict], methods: list[str], a, temp: float) -> None:
    by = {m: [r for r in records if r["method"] == m] for m in methods}
    tok_s = {m: sum(len(r["tokens"]) for r in rs) / sum(r["seconds"] for r in rs)
             for m, rs in by.items()}
    base = tok_s.get("plain")
    print(f"\n{len(by[methods[0]])} prompts, {a.max_new_tokens} new tokens at most, "
          f"T = {temp}, K = {a.draft_length}, {a.threads} threads")
    print("| method | tok/s | x plain | MAT | repeated 5-grams |")
    print("|---|---|---|---|---|")
    summary = {}
    for m, rs in by.items():
        calls = [r["calls"] for r in rs if r["calls"]]
        mat = sum(len(r["tokens"]) for r in rs) / sum(calls) if calls else None
        rep = float(np.mean([repeated_share(r["tokens"]) for r in rs]))
        summary[m] = {"tok_s": tok_s[m], "speedup": tok_s[m] / base if base else None,
                      "mat": mat, "repeated_share": rep}
        print(f"| {m} | {tok_s[m]:.1f} | {tok_s[m] / base:.2f}x | "
              f"{'–' if mat is None else f'{mat:.2f}'} | {rep:.0%} |")
    if "hedgespec" in by:
        share = np.mean([r["non_target_share"] for r in by["hedgespec"]])
        summary["hedgespec"]["non_target_share"] = float(share)
        print(f"HedgeSpec's non-target share of its time: {share:.1%}")
        for ref in ("plain", "lcp-plain"):
            if temp == 0 and ref in by:
                same = sum(h["tokens"] == p["tokens"] for h, p in zip(by["hedgespec"], by[ref],
                                                                       strict=True))
                summary["hedgespec"][f"equal_to_{ref}"] = same
                print(f"HedgeSpec output equal to {ref} on {same} of {len(by[ref])} prompts")
    domains = sorted({r["domain"] for r in records})
    per_domain = {d: {m: sum(len(r["tokens"]) for r in rs if r["domain"] == d)
                      / sum(r["seconds"] for r in rs if r["domain"] == d) for m, rs in by.items()}
                  for d in domains}
    if base:
        print("per domain, x plain: " + "; ".join(
            f"{d} " + ", ".join(f"{m} {v[m] / v['plain']:.2f}" for m in methods if m != "plain")
            for d, v in per_domain.items()))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"n{a.max_new_tokens}-t{temp}.json").write_text(json.dumps(
        {"settings": vars(a), "summary": summary, "per_domain": per_domain,
         "records": records}, indent=1))


if __name__ == "__main__":
    main()
