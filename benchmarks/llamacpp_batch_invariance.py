"""Whether a row's logits in llama.cpp depend on the other rows of its ``llama_decode``.

After prefilling ``N`` random ordinary tokens (ids 100..1000), the same ``--rows`` tokens are
decoded (a) one ``llama_decode`` each (as ``plain_generate`` decodes) and (b) together in one
``llama_decode`` with logits for every row (as the speculative decoder verifies ``[last] +
draft``), the rows of (a) removed from the cache before (b). For each setting (context and
model parameters of llama-cpp-python 0.3.36's vendored llama.cpp), cache size ``N`` and thread
count, it prints the largest absolute logit difference of each row (0 everywhere: the rows are
bit-identical), whether any row's argmax differs, and llama.cpp's attended cache length
(``n_kv``: the used cells padded to a multiple of 256; a lone row's flash attention splits it
over the threads from 512 on, ggml-cpu ``use_split_kv_path``).

``--timing`` also times one ``llama_decode`` of 1 row and of ``--rows`` rows after
``--timing-cached`` tokens (median of ``--repeats``; the settings' contexts take turns within
each repeat, so a busy machine slows them alike) for the settings asked.

    .venv/bin/python benchmarks/llamacpp_batch_invariance.py
    .venv/bin/python benchmarks/llamacpp_batch_invariance.py --settings fa-on,fa-on-lone1 \\
        --cached 300 1000 --threads 2
    .venv/bin/python benchmarks/llamacpp_batch_invariance.py --settings default,fa-on-lone1 \\
        --only-timing --timing --threads 2

Settings (``--settings``, comma list, default all): ``default`` (flash attention "auto": on
here), ``fa-on``, ``fa-off``, ``fa-on-lone1`` (flash attention on, ``n_threads=1`` for a lone
row, ``n_threads_batch`` = the thread count for a batch), ``fa-off-lone1``, ``kv-q8`` (K and V
cache in Q8_0), ``k-q8`` (K Q8_0, V F16), ``v-q8`` (K F16, V Q8_0), ``kv-f32`` (F32 cache),
``no-repack`` (model ``use_extra_bufts=False``), ``ubatch-1`` (``n_ubatch=1``: a batch runs as
lone rows), ``kv-unified``. Environment variables ggml reads once (``GGML_CPU_TILED_MM``,
``GGML_CPU_DISABLE_FUSION``, ``LLAMA_ATTN_ROT_DISABLE``) are tried by running the script
under them.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np

from spec_adapters.hf.models import find_default_gguf
from spec_adapters.llamacpp.cpu_backend import ensure_loaded, llama_cpp_module


def settings(lc) -> dict[str, tuple[dict, dict, bool]]:
    """Name -> (context parameters, model parameters, lone row on one thread)."""
    on, off = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED, lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    q8, f16, f32 = lc.GGML_TYPE_Q8_0, lc.GGML_TYPE_F16, lc.GGML_TYPE_F32
    return {
        "default": ({}, {}, False),
        "fa-on": ({"flash_attn_type": on}, {}, False),
        "fa-off": ({"flash_attn_type": off}, {}, False),
        "fa-on-lone1": ({"flash_attn_type": on}, {}, True),
        "fa-off-lone1": ({"flash_attn_type": off}, {}, True),
        "kv-q8": ({"flash_attn_type": on, "type_k": q8, "type_v": q8}, {}, False),
        "k-q8": ({"flash_attn_type": on, "type_k": q8, "type_v": f16}, {}, False),
        "v-q8": ({"flash_attn_type": on, "type_k": f16, "type_v": q8}, {}, False),
        "kv-f32": ({"flash_attn_type": on, "type_k": f32, "type_v": f32}, {}, False),
        "no-repack": ({}, {"use_extra_bufts": False}, False),
        "ubatch-1": ({"n_ubatch": 1}, {}, False),
        "kv-unified": ({"kv_unified": True}, {}, False),
    }


class Context:
    """One llama.cpp context on one sequence (as ``GGUFTarget`` builds it), decoding rows at
    the next positions with logits for every row."""

    def __init__(self, lc, model, cparams: dict, threads: int, lone1: bool, n_ctx: int):
        self.lc, self.model = lc, model
        p = lc.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = p.n_ubatch = min(n_ctx, 512)
        p.n_threads = 1 if lone1 else threads
        p.n_threads_batch = threads
        p.no_perf = True
        for key, value in cparams.items():
            setattr(p, key, value)
        self.ctx = lc.llama_init_from_model(model, p)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp refused the context {cparams}")
        self.n_batch = int(lc.llama_n_batch(self.ctx))
        self.vocab = int(lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model)))
        self.batch = lc.llama_batch_init(n_ctx, 0, 1)
        self.mem = lc.llama_get_memory(self.ctx)
        self.n_cached = 0

    def decode(self, tokens: list[int], logits: bool = True) -> np.ndarray | None:
        b, n, start = self.batch, len(tokens), self.n_cached
        for j, tok in enumerate(tokens):
            b.token[j], b.pos[j], b.n_seq_id[j] = tok, start + j, 1
            b.seq_id[j][0] = 0
            b.logits[j] = logits
        b.n_tokens = n
        rc = self.lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc})")
        self.n_cached += n
        if not logits:
            return None
        out = np.empty((n, self.vocab), np.float32)
        for r in range(n):
            row = self.lc.llama_get_logits_ith(self.ctx, r)
            out[r] = np.ctypeslib.as_array(ctypes.cast(row, ctypes.POINTER(ctypes.c_float)),
                                           shape=(self.vocab,))
        return out

    def prefill(self, tokens: list[int]) -> None:
        self.lc.llama_memory_clear(self.mem, True)
        self.n_cached = 0
        for lo in range(0, len(tokens), self.n_batch):
            self.decode(tokens[lo:lo + self.n_batch], logits=False)

    def keep(self, n: int) -> None:
        if not self.lc.llama_memory_seq_rm(self.mem, 0, n, -1):
            raise RuntimeError("llama_memory_seq_rm failed")
        self.n_cached = n

    def close(self) -> None:
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.ctx)


def n_kv(cells: int) -> int:
    """llama.cpp's attended cache length for ``cells`` used cells (llama-kv-cache.cpp
    ``get_n_kv``: padded to 256, at least 256)."""
    return max(256, -(-cells // 256) * 256)


def compare(ctx: Context, tokens: list[int], n: int, rows: int) -> tuple[list[float], bool]:
    """Per row max |logit(a) - logit(b)| after ``n`` cached tokens; whether an argmax differs."""
    ctx.prefill(tokens[:n])
    new = tokens[n:n + rows]
    lone = np.concatenate([ctx.decode([t]) for t in new])
    ctx.keep(n)
    together = ctx.decode(new)
    ctx.keep(n)
    diff = np.abs(lone.astype(np.float64) - together).max(axis=1)
    return [float(d) for d in diff], bool((lone.argmax(1) != together.argmax(1)).any())


def time_decodes(ctxs: list[Context], tokens: list[int], n: int, rows: int, repeats: int
                 ) -> list[tuple[float, float]]:
    """Median ms of one ``llama_decode`` of 1 row and of ``rows`` rows after ``n`` tokens, per
    context; the contexts take turns within each repeat (a fair share of a busy machine)."""
    for ctx in ctxs:
        ctx.prefill(tokens[:n])
    samples = [{1: [], rows: []} for _ in ctxs]
    for rep in range(repeats + 2):  # two warm-ups
        for ctx, mine in zip(ctxs, samples, strict=True):
            for k in (1, rows):
                t0 = time.perf_counter()
                ctx.decode(tokens[n:n + k])
                if rep >= 2:
                    mine[k].append(time.perf_counter() - t0)
                ctx.keep(n)
    return [(1e3 * statistics.median(m[1]), 1e3 * statistics.median(m[rows])) for m in samples]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", default=None, help="default: the shipped default target's")
    p.add_argument("--settings", default="all", help="comma list of setting names, or all")
    p.add_argument("--cached", type=int, nargs="+", default=[200, 300, 600, 1000])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rows", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timing", action="store_true", help="also time 1-row and n-row decodes")
    p.add_argument("--only-timing", action="store_true", help="skip the invariance table")
    p.add_argument("--timing-cached", type=int, default=300)
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()

    lc = llama_cpp_module()
    lc.llama_backend_init()
    table = settings(lc)
    names = list(table) if args.settings == "all" else args.settings.split(",")
    gguf = args.gguf or str(find_default_gguf())
    n_ctx = max(max(args.cached), args.timing_cached) + args.rows + 16
    rng = np.random.default_rng(args.seed)
    tokens = [int(t) for t in rng.integers(100, 1001, n_ctx)]
    models: dict[tuple, object] = {}

    def model_for(mparams: dict):
        key = tuple(sorted(mparams.items()))
        if key not in models:
            mp = lc.llama_model_default_params()
            mp.n_gpu_layers = 0
            for k, v in mparams.items():
                setattr(mp, k, v)
            models[key] = lc.llama_model_load_from_file(gguf.encode(), mp)
        return models[key]

    print(f"{gguf.split('/')[-1]}, {ensure_loaded().line()}, {args.rows} rows, seed {args.seed}")
    if not args.only_timing:
        print("\n| setting | threads | cached | n_kv (lone, batch) | max abs diff per row "
              "| argmax differs |")
        print("|---|---:|---:|---|---|---|")
        for name in names:
            cparams, mparams, lone1 = table[name]
            for threads in args.threads:
                try:
                    ctx = Context(lc, model_for(mparams), cparams, threads, lone1, n_ctx)
                except RuntimeError as err:
                    print(f"| {name} | {threads} | - | - | {err} | - |")
                    continue
                for n in args.cached:
                    diff, flip = compare(ctx, tokens, n, args.rows)
                    kv = f"{n_kv(n + 1)}..{n_kv(n + args.rows)}, {n_kv(n + args.rows)}"
                    cells = " ".join("0" if d == 0 else f"{d:.1e}" for d in diff)
                    print(f"| {name} | {threads} | {n} | {kv} | {cells} | "
                          f"{'yes' if flip else 'no'} |", flush=True)
                ctx.close()
    if args.timing:
        print(f"\nms per llama_decode after {args.timing_cached} cached tokens, median of "
              f"{args.repeats}")
        print(f"\n| setting | threads | 1 row | {args.rows} rows |")
        print("|---|---:|---:|---:|")
        runs = [(name, threads) for name in names for threads in args.threads]
        ctxs = [Context(lc, model_for(table[name][1]), table[name][0], threads, table[name][2],
                        n_ctx) for name, threads in runs]
        times = time_decodes(ctxs, tokens, args.timing_cached, args.rows, args.repeats)
        for (name, threads), (one, many), ctx in zip(runs, times, ctxs, strict=True):
            print(f"| {name} | {threads} | {one:.2f} | {many:.2f} |")
            ctx.close()
    for model in models.values():
        lc.llama_model_free(model)


if __name__ == "__main__":
    main()
