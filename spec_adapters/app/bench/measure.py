"""Measuring: the one median timer and the one "run a decoder, keep what the tables need".

Used by the benchmark (:mod:`spec_adapters.app.bench.run`) and the scripts in ``benchmarks/``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

__all__ = ["PHASES", "TokenClock", "median_ms", "run_decoder", "time_calls"]

PHASES = ("prefill", "select", "draft", "verify", "eval", "update")


def time_calls(fn: Callable[[], object], repeats: int = 7, *, warmup: int = 0,
               after: Callable[[], object] | None = None,
               sync: Callable[[], object] | None = None) -> list[float]:
    """Wall time of each of ``repeats`` calls of ``fn``, in milliseconds.

    Parameters
    ----------
    fn : callable
        What is timed (``time.perf_counter`` around each call).
    repeats : int
        Timed calls (>= 1).
    warmup : int
        Untimed calls of ``fn`` before the first timed one.
    after : callable, optional
        Run, untimed, after every call of ``fn`` (warm-up calls included), e.g. to crop a
        cache that ``fn`` grows back to where it was.
    sync : callable, optional
        Run before and after each call, inside the timing, e.g. ``torch.cuda.synchronize``
        so that a call's asynchronous device work is counted.

    Raises
    ------
    ValueError
        ``repeats < 1`` or ``warmup < 0``.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    times = []
    for i in range(warmup + repeats):
        if sync is not None:
            sync()
        t = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        if i >= warmup:
            times.append(1e3 * (time.perf_counter() - t))
        if after is not None:
            after()
    return times


def median_ms(fn: Callable[[], object], repeats: int = 7, **kwargs) -> float:
    """The median of :func:`time_calls` (same arguments), in milliseconds."""
    return statistics.median(time_calls(fn, repeats, **kwargs))


class TokenClock:
    """When each new token of one generation arrived: a streamer (transformers' protocol,
    which the decoders follow too) for the loop-free-prefix speed-up of the benchmark.

    ``seconds[i]`` is the wall time from :meth:`start` to the ``put`` that delivered new token
    ``i``; the tokens of one ``put`` (one speculative round) share its time, the moment a
    streaming user would see them. The first ``put`` after :meth:`start` is the prompt and is
    not a new token.
    """

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._t0 = time.perf_counter()
        self._prompt = True

    def start(self) -> TokenClock:
        """Start (or restart) the clock for one generation; returns ``self``."""
        self.seconds, self._prompt, self._t0 = [], True, time.perf_counter()
        return self

    def put(self, value) -> None:
        if self._prompt:
            self._prompt = False
            return
        self.tick(int(value.numel()))

    def tick(self, count: int = 1) -> None:
        """``count`` new tokens arrived now (for loops that are not streamers)."""
        self.seconds.extend([round(time.perf_counter() - self._t0, 5)] * count)

    def end(self) -> None:
        pass


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
        ``cpu_seconds`` (process time of the call), ``chosen``, ``accepted``, ``drafted`` and
        ``lengths`` (per round: drafter, drafts accepted, drafted, draft length chosen),
        ``timing`` (``{phase: seconds}`` for :data:`PHASES`), ``final_weights`` (the learner's
        last weights, rounded to 4 digits, or ``None``), ``tokens`` (the new token ids) and
        ``token_seconds`` (:class:`TokenClock`: when each arrived; absent when the caller
        passed its own ``streamer`` or nothing was generated).
        MAT is ``new_tokens / target_calls``.
    """
    clock = TokenClock()
    generate_kwargs.setdefault("streamer", clock)
    cpu = time.process_time()
    clock.start()
    out = decoder.generate(ids, max_new_tokens=max_new_tokens, temperature=temperature,
                           seed=seed, **generate_kwargs)
    cpu = time.process_time() - cpu
    s = out.stats
    return {"new_tokens": s["new_tokens"], "target_calls": s["target_calls"],
            "seconds": s["total_seconds"], "cpu_seconds": cpu, "chosen": s["chosen"],
            "accepted": s["accepted"], "drafted": s["drafted"], "lengths": s["lengths"],
            "timing": {k: s[f"{k}_seconds"] for k in PHASES},
            "final_weights": (np.round(s["weights"][-1], 4).tolist() if s["weights"] else None),
            "tokens": out.sequences[0, ids.shape[1]:].tolist(),
            **({"token_seconds": clock.seconds} if clock.seconds else {})}
