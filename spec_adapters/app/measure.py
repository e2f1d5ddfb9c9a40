"""Measuring: the one median timer and the one "run a decoder, keep what the tables need".

Used by the benchmark (:mod:`spec_adapters.app.bench`) and the scripts in ``benchmarks/``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

__all__ = ["PHASES", "median_ms", "run_decoder"]

PHASES = ("prefill", "select", "draft", "verify", "eval", "update")


def median_ms(fn: Callable[[], object], repeats: int = 7, *, warmup: int = 0,
              setup: Callable[[], object] | None = None) -> float:
    """Median wall time of ``fn()`` in milliseconds.

    Parameters
    ----------
    fn : callable
        What is timed (``time.perf_counter`` around each call).
    repeats : int
        Timed calls (>= 1).
    warmup : int
        Untimed calls of ``fn`` before the first timed one.
    setup : callable, optional
        Run, untimed, before every call of ``fn`` (warm-up calls included), e.g. to reset a
        cache that ``fn`` grows.

    Raises
    ------
    ValueError
        ``repeats < 1`` or ``warmup < 0``.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    times = []
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        t = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def run_decoder(decoder, ids, max_new_tokens: int, temperature: float = 0.0,
                seed: int | None = None, **generate_kwargs) -> dict:
    """One ``decoder.generate`` (single-draft or EAGLE-tree HedgeSpecDecoder), reduced.

    Parameters
    ----------
    decoder
        Anything with the decoders' ``generate(input_ids, max_new_tokens, temperature, seed,
        ...)`` returning a ``GenerateOutput``.
    ids : torch.LongTensor
        The prompt, ``(1, L)``.
    max_new_tokens, temperature, seed
        Passed on; further keywords too (e.g. ``eos_token_id=[]``).

    Returns
    -------
    dict
        ``new_tokens``, ``target_calls``, ``seconds`` (the decoder's ``total_seconds``),
        ``cpu_seconds`` (process time of the call), ``chosen`` and ``accepted`` (per round),
        ``timing`` (``{phase: seconds}`` for :data:`PHASES`), ``final_weights`` (the learner's
        last weights, rounded to 4 digits, or ``None``) and ``tokens`` (the new token ids).
        MAT is ``new_tokens / target_calls``.
    """
    cpu = time.process_time()
    out = decoder.generate(ids, max_new_tokens=max_new_tokens, temperature=temperature,
                           seed=seed, **generate_kwargs)
    cpu = time.process_time() - cpu
    s = out.stats
    return {"new_tokens": s["new_tokens"], "target_calls": s["target_calls"],
            "seconds": s["total_seconds"], "cpu_seconds": cpu, "chosen": s["chosen"],
            "accepted": s["accepted"],
            "timing": {k: s[f"{k}_seconds"] for k in PHASES},
            "final_weights": (np.round(s["weights"][-1], 4).tolist() if s["weights"] else None),
            "tokens": out.sequences[0, ids.shape[1]:].tolist()}
