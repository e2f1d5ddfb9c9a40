"""What one sampled token's draw costs in the llama.cpp engine: numpy against llama.cpp's C chain.

Plain decoding and HedgeSpec draw every emitted token the same way (one draw per token, the
coupled rule's): the row of logits warped by llama.cpp's chain (top-p on the raw softmax,
then the temperature) and one uniform read through its inverse CDF. Two implementations:

- ``numpy``: :func:`spec_adapters.llamacpp.sampling_chain.draw_token`, what both loops use
  (the whole row never sorted, float64 only for the candidates);
- ``C chain``: llama.cpp's own samplers (``llama_sampler_init_top_p``, ``_temp``, ``_dist``)
  in one chain, applied to a ``llama_token_data_array`` filled from the same row
  (``llama_sampler_apply``), and read straight from the context's last row
  (``llama_sampler_sample``, what llama.cpp's programs and ``Llama.generate`` call).

Each is timed on the rows of the target's own sampled answers to held-out chat prompts, two
ways: *in the loop* (right after the ``llama_decode`` that produced the row, as a decoder
meets it, its caches flushed by the decode) and *warm* (the same rows again, one after the
other). Median and mean microseconds per token, beside the mean ``llama_decode`` of one row:

    .venv/bin/python benchmarks/llamacpp_draw.py [--prompts 4] [--max-new-tokens 96] \
        [--temperature 0.7] [--top-p 0.9] [--gguf FILE] [--json results/llamacpp-draw.json]

docs/benchmark.md ("llama.cpp", Misses) quotes it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from pathlib import Path

import numpy as np

PROMPTS = ("Explain how vaccines train the immune system.",
           "Write a Python function that checks whether a string is a palindrome.",
           "What is the derivative of x^3 sin x?",
           "Summarise the causes of the French Revolution in a paragraph.",
           "How do I fix a leaking kitchen tap?",
           "Write a SQL query that counts the orders of each customer.")


class CChain:
    """llama.cpp's top-p, temperature and dist samplers in one chain (``seed`` for dist)."""

    def __init__(self, lc, vocab_size: int, temperature: float, top_p: float, seed: int) -> None:
        self.lc = lc
        self.chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        for s in (lc.llama_sampler_init_top_p(top_p, 1), lc.llama_sampler_init_temp(temperature),
                  lc.llama_sampler_init_dist(seed)):
            lc.llama_sampler_chain_add(self.chain, s)
        self.data = (lc.llama_token_data * vocab_size)()
        self.view = np.ctypeslib.as_array(self.data)
        self.ids = np.arange(vocab_size, dtype=np.int32)
        self.array = lc.llama_token_data_array(data=self.data, size=vocab_size, selected=-1,
                                               sorted=False)

    def apply(self, row: np.ndarray) -> int:
        """A token drawn from ``row`` through the chain."""
        self.view["id"], self.view["logit"], self.view["p"] = self.ids, row, 0.0
        self.array.size, self.array.selected, self.array.sorted = len(row), -1, False
        self.lc.llama_sampler_apply(self.chain, ctypes.byref(self.array))
        return int(self.data[self.array.selected].id)

    def sample(self, ctx) -> int:
        """A token drawn from the context's last row of logits."""
        return int(self.lc.llama_sampler_sample(self.chain, ctx, -1))

    def close(self) -> None:
        self.lc.llama_sampler_free(self.chain)


def measure(args: argparse.Namespace) -> dict:
    from spec_adapters.hf.models import find_default_gguf
    from spec_adapters.llamacpp import GGUFTarget
    from spec_adapters.llamacpp.sampling_chain import draw_token

    target = GGUFTarget(args.gguf or find_default_gguf())
    lc, T, top_p = target._lc, args.temperature, args.top_p
    chain = CChain(lc, target.vocab_size, T, top_p, seed=0)
    loop = {"numpy": [], "C chain, apply": [], "C chain, sample": []}
    decode, rows = [], []
    rng = np.random.default_rng(0)
    for i, text in enumerate(PROMPTS[:args.prompts]):
        target.reset()
        row = target.prefill(target.tokenize(target.chat_prompt([{"role": "user",
                                                                  "content": text}])))
        for j in range(args.max_new_tokens):
            rows.append(row)
            method = list(loop)[(i + j) % 3]  # one method per row, right after its decode
            t0 = time.perf_counter()
            if method == "numpy":
                draw_token(row, T, None, top_p, np.random.default_rng(j))
            elif method == "C chain, apply":
                chain.apply(row)
            else:
                chain.sample(target._ctx)
            loop[method].append(time.perf_counter() - t0)
            token = draw_token(row, T, None, top_p, rng)  # the answer: the numpy draw
            if target.is_eog(token):
                break
            t0 = time.perf_counter()
            row = target.step([token])[0]
            decode.append(time.perf_counter() - t0)
    warm = {"numpy": [], "C chain, apply": []}
    for row in rows:
        for method, times in warm.items():
            t0 = time.perf_counter()
            if method == "numpy":
                draw_token(row, T, None, top_p, rng)
            else:
                chain.apply(row)
            times.append(time.perf_counter() - t0)
    chain.close()
    target.close()

    def us(times: list[float]) -> dict:
        return {"median_us": 1e6 * float(np.median(times)),
                "mean_us": 1e6 * float(np.mean(times)), "draws": len(times)}

    return {"settings": {k: str(v) for k, v in vars(args).items()},
            "decode_one_row_ms": 1e3 * float(np.mean(decode)),
            "in_the_loop": {m: us(t) for m, t in loop.items()},
            "warm": {m: us(t) for m, t in warm.items()}}


def main() -> None:
    from spec_adapters.app.args import float_arg, int_arg

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int_arg(1, len(PROMPTS)), default=4)
    ap.add_argument("--max-new-tokens", type=int_arg(1), default=96)
    ap.add_argument("--temperature", type=float_arg(0.0, lo_open=True), default=0.7)
    ap.add_argument("--top-p", type=float_arg(0.0, 1.0, lo_open=True), default=0.9)
    ap.add_argument("--gguf", type=Path, default=None, help="default: the shipped SmolLM2 file")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = measure(args)
    print(f"T = {args.temperature}, top-p {args.top_p}; llama_decode of one row "
          f"{result['decode_one_row_ms']:.2f} ms")
    print("| draw | in the loop, median / mean us | warm, median / mean us |")
    print("|---|---:|---:|")
    for m, r in result["in_the_loop"].items():
        w = result["warm"].get(m)
        warm = "–" if w is None else f"{w['median_us']:.0f} / {w['mean_us']:.0f}"
        print(f"| {m} | {r['median_us']:.0f} / {r['mean_us']:.0f} | {warm} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
