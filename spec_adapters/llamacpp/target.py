"""A GGUF target in llama.cpp, through llama-cpp-python's C API: one context, one sequence.

What a speculative round needs and nothing more (llama-cpp-python 0.3.36; its vendored
llama.cpp): :meth:`GGUFTarget.prefill` caches the prompt in batches as llama.cpp does and
returns the next token's logits; :meth:`GGUFTarget.step` runs one ``llama_decode`` over
``[last] + draft`` (or the draft alone after the prompt) with logits requested for those rows
only (the high-level ``Llama`` with a draft model asks for every position's
logits, 49k floats per prompt token); :meth:`GGUFTarget.keep` removes the rejected rows from
the cache (``llama_memory_seq_rm``). A round without a draft is one plain step.

The prompt cache (``prompt_cache=True``, as llama-server's ``cache_prompt`` and
llama-cpp-python's ``Llama.generate``): a prompt that starts with tokens the cache already
holds (a chat template's system prompt, a conversation's earlier turns) decodes only the rest.
On this 2-core CPU a prompt's row costs ~4 ms in a batch, so SmolLM2's 30-token default system
prompt is ~0.1 s a request, a tenth of a 128-token answer. The reused rows were computed in
another batch than a fresh prefill's, so their last bits may differ from it: a plain loop and
HedgeSpec given targets with the same history decode the same numbers (the benchmark gives
each its own target), one target shared by both does not.

A row's logits, alone or in a batch (:data:`INVARIANT_CACHE`). With llama.cpp's default
context (flash attention "auto", an F16 key-value cache) a lone row and the same row in a
batch of rows take different paths once the cache passes 256 cells: ggml-cpu's flash
attention splits a lone row's cache over the threads and merges the parts' running sums
(``use_split_kv_path``, when the padded cache reaches 512 cells with F16 / F32 keys and values
of one type), a row in a batch is one pass on one thread; the last bits differ, and a Q4_1
model's 8-bit rounding of every matmul input grows them to 0.2-0.7 in the logits (a near-tie
flips). With keys cached in Q8_0 (values F16) and flash attention on, the split is never
taken and a row's logits are the same bits whatever rows share its decode, at every cache
length and thread count (measured and tested up to 1000 cells, 2 threads, up to 63 rows; from
64 rows a tiled kernel takes over: a round has K + 1 <= 9). Its speed is the default's; its
numbers are not (the keys are rounded to 8 bits, with llama.cpp's Hadamard rotation), so the
plain reference and every baseline run with the same cache
(``benchmarks/llamacpp_batch_invariance.py`` reproduces both cases; the other settings tried,
and why each fails, are in docs/reliability.md).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from spec_adapters.llamacpp.cpu_backend import llama_cpp_module
from spec_adapters.llamacpp.native_log import captured

__all__ = ["GGUF_MAGIC", "INVARIANT_CACHE", "GGUFTarget", "is_gguf"]

GGUF_MAGIC = b"GGUF"
# context settings under which a row's logits do not depend on its batch (module docstring):
# flash attention on, keys in Q8_0 (llama.h's GGML_TYPE_Q8_0 = 8), values F16 (1)
INVARIANT_CACHE = {"flash_attn": True, "type_k": 8, "type_v": 1}


def is_gguf(path: Path) -> bool:
    """Whether the file ``path`` starts with the GGUF magic."""
    with Path(path).open("rb") as f:
        return f.read(4) == GGUF_MAGIC


class GGUFTarget:
    """A GGUF model loaded by llama.cpp, decoding one sequence.

    Parameters
    ----------
    path : path-like
        The ``.gguf`` file (used as is: no conversion).
    n_ctx : int, default 2048
        Context length (tokens) of the key-value cache.
    n_threads : int, default 2
        Threads for single-token and batched decodes.
    batch_invariant : bool, default True
        The key-value cache of :data:`INVARIANT_CACHE` (module docstring); ``False``:
        llama.cpp's default (an F16 cache, flash attention "auto"), whose rows past 256
        cells depend on the rows beside them. A model whose head size Q8_0 cannot hold (not
        a multiple of 32) gets the default; :attr:`batch_invariant` says which it got.
    repack : bool, optional
        Whether llama.cpp repacks the weights into its CPU layouts for batched rows (Q4_0,
        Q4_K, IQ4_NL on AVX2 / AVX-512: ``use_extra_bufts``, llama.cpp's default). Default
        (``None``): repacked unless a row's logits then depend on the rows beside it and the
        file's own layout makes them agree (measured at load: Q4_K_M's repacked kernel for
        several rows differs from its one-row kernel; IQ4_NL's file layout reaches
        llamafile's batched kernel, its repacked one does not).
    round_rows : int, default 5
        The most rows one ``llama_decode`` of a round holds (``K + 1``): the batches of ``2 ..
        round_rows`` rows that are checked at load.
    prompt_cache : bool, default False
        :meth:`prefill` keeps the longest prefix the cache shares with the new prompt and
        decodes the rest (module docstring); ``False``: every prefill starts from an empty
        cache.

    Attributes
    ----------
    n_cached : int
        Tokens in the key-value cache.
    prompt_reused : int
        Tokens of the last :meth:`prefill`'s prompt taken from the cache (0 without
        ``prompt_cache``).
    rows_invariant : bool
        Measured at load: a row decoded alone and the same row in a batch of up to
        ``round_rows`` give the same bits (so HedgeSpec's greedy text is llama.cpp's one-token
        greedy text). False for float weights (F16, BF16: llamafile's tiled matmul for a
        batch, a dot product for one row) and without :attr:`batch_invariant`.

    Raises
    ------
    ValueError
        The file is missing, is not a GGUF file, or llama.cpp cannot load it.
    """

    def __init__(self, path, n_ctx: int = 2048, n_threads: int = 2,
                 batch_invariant: bool = True, repack: bool | None = None,
                 round_rows: int = 5, prompt_cache: bool = False) -> None:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"GGUF file {path} does not exist")
        if not is_gguf(path):
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic at its start)")
        self._lc = llama_cpp_module()
        self._lc.llama_backend_init()
        self.path, self._ctx, self.round_rows = path, None, int(round_rows)
        self.prompt_cache, self.prompt_reused = bool(prompt_cache), 0
        args = (int(n_ctx), int(n_threads), bool(batch_invariant))
        self._load(*args, repack=repack is not False)
        self.rows_invariant = self.batch_invariant and self._rows_agree(self.round_rows)
        if repack is None and self.batch_invariant and not self.rows_invariant:
            self.close()  # the repacked layout's batched kernel: try the file's own layout
            self._load(*args, repack=False)
            self.rows_invariant = self._rows_agree(self.round_rows)
            if not self.rows_invariant:  # neither (a float type): keep the faster layout
                self.close()
                self._load(*args, repack=True)

    def _load(self, n_ctx: int, n_threads: int, batch_invariant: bool, repack: bool) -> None:
        """Load the model (``repack``: llama.cpp's repacked layouts) and its context."""
        lc = self._lc
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0  # the CPU, as llama-cpp-python's Llama loads it by default
        mparams.use_extra_bufts = repack
        with captured() as log:  # a line per repacked tensor
            self._model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise ValueError(f"llama.cpp could not load {self.path}{log.detail()}")
        # batches of 512 (as llama-cpp-python's Llama): llama.cpp's floats, so its greedy
        # output, depend on these and on the cache's types
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = min(n_ctx, 512)
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        self.batch_invariant, self.repack = batch_invariant, repack
        if batch_invariant:
            default = (cparams.flash_attn_type, cparams.type_k, cparams.type_v)
            cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
            cparams.type_k, cparams.type_v = INVARIANT_CACHE["type_k"], INVARIANT_CACHE["type_v"]
            self._ctx = lc.llama_init_from_model(self._model, cparams)
            if not self._ctx:  # Q8_0 keys need a head size divisible by 32 (its block)
                cparams.flash_attn_type, cparams.type_k, cparams.type_v = default
                self.batch_invariant = False
        if not self._ctx:
            self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise ValueError(f"llama.cpp could not create a context for {self.path}")
        self._vocab = lc.llama_model_get_vocab(self._model)
        self._eog: dict[int, bool] = {}  # is_eog's answers so far
        self.vocab_size = int(lc.llama_vocab_n_tokens(self._vocab))
        self.n_ctx = int(lc.llama_n_ctx(self._ctx))  # llama.cpp may round the request up
        self.n_batch = int(lc.llama_n_batch(self._ctx))
        self._batch = lc.llama_batch_init(self.n_ctx, 0, 1)
        self._tokens: list[int] = []  # the key-value cache's tokens, positions 0, 1, ...

    @property
    def n_cached(self) -> int:
        """Tokens in the key-value cache."""
        return len(self._tokens)

    def _rows_agree(self, rows: int, context: int = 100) -> bool:
        """Whether every batch of ``2 .. rows`` tokens gives the same bits as the same tokens
        decoded one ``llama_decode`` each (the weights' matmul kernels for one row and for
        several agree: a repacked layout takes its batched kernel for blocks of 4 rows, and
        from 8 rows K-quants take another; the cache's attention is made alike by
        :data:`INVARIANT_CACHE`). After ``context`` cached tokens (fewer when the context is
        small): with 16, Gemma-3's repacked Q4_K rows agreed, with 100 they did not. Leaves the
        cache empty."""
        context = min(context, self.n_ctx - rows)
        if context < 1:
            return False
        tokens = np.random.default_rng(0).integers(0, self.vocab_size, context + rows).tolist()
        self.prefill(tokens[:context])
        lone = np.vstack([self.step([t]) for t in tokens[context:]])
        agree = True
        for n in range(2, rows + 1):
            self.keep(context)
            agree = agree and np.array_equal(lone[:n], self.step(tokens[context:context + n]))
        self.reset()
        return bool(agree)

    # ------------------------------------------------------------------ decoding
    def reset(self) -> None:
        """Empty the key-value cache (a new sequence)."""
        self._lc.llama_memory_clear(self._lc.llama_get_memory(self._ctx), True)
        self._tokens = []

    def prefill(self, tokens) -> np.ndarray:
        """Start a sequence: cache every token of ``tokens`` (in batches of ``n_batch``, as
        llama.cpp prefills a prompt); the logits after the last one, ``(V,)``. With
        ``prompt_cache``, the longest prefix the cache already holds is kept (the last token
        is always decoded: its logits are the result)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("prefill needs at least one token")
        reused = 0
        if self.prompt_cache and self._holds_from_start():
            limit = min(len(tokens) - 1, len(self._tokens))
            reused = next((j for j in range(limit) if tokens[j] != self._tokens[j]), limit)
        if reused:
            self.keep(reused)
        else:
            self.reset()
        self.prompt_reused = reused
        for lo in range(reused, len(tokens), self.n_batch):  # llama_decode: n_batch at most
            chunk = tokens[lo:lo + self.n_batch]
            last = self._decode(chunk, 1 if lo + len(chunk) == len(tokens) else 0)
        return last[0]

    def _holds_from_start(self) -> bool:
        """Whether the cache still holds its first position: a sliding-window cache
        (Gemma-3's local layers, llama.cpp's default ``swa_full`` off) drops its oldest cells
        once a sequence outgrows the window, and a prefix whose cells are gone cannot be
        reused (llama-server resets then too)."""
        return self._lc.llama_memory_seq_pos_min(self._lc.llama_get_memory(self._ctx), 0) <= 0

    def step(self, tokens) -> np.ndarray:
        """Decode ``tokens`` at the next positions (a round's: the last verified token when it
        is not cached yet, then the draft); the logits of every row, ``(len(tokens), V)``
        float32 (a copy)."""
        return self._decode(list(tokens), len(tokens))

    def row_prices(self, rows: int | Sequence[int], context: int = 64, repeats: int = 5
                   ) -> np.ndarray:
        """Seconds of one :meth:`step` of each row count of ``rows`` (an int ``n``: ``1 ..
        n``; every row's logits, a round's shape) after ``context`` cached tokens, the median
        of ``repeats`` (after one warm-up); what a speculative round's rows cost on this
        machine, before any round is played (``rows = K + 1``: ~0.3 s for the shipped 135M
        model). Leaves the cache empty."""
        counts = list(range(1, rows + 1)) if isinstance(rows, int) else [int(n) for n in rows]
        if not counts or min(counts) < 1 or context < 1 or repeats < 1:
            raise ValueError(f"need row counts, context and repeats >= 1, got {rows}, "
                             f"{context}, {repeats}")
        context = min(context, self.n_ctx - max(counts))
        tokens = np.random.default_rng(0).integers(0, self.vocab_size, context + max(counts))
        self.prefill(tokens[:context].tolist())
        out = np.empty(len(counts))
        for j, n in enumerate(counts):
            samples = []
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                self.step(tokens[context:context + n].tolist())
                samples.append(time.perf_counter() - t0)
                self.keep(context)
            out[j] = float(np.median(samples[1:]))
        self.reset()
        return out

    def keep(self, n: int) -> None:
        """Keep the first ``n`` cached positions (drop the rejected drafts' rows)."""
        if n < self.n_cached:
            mem = self._lc.llama_get_memory(self._ctx)
            if not self._lc.llama_memory_seq_rm(mem, 0, n, -1):
                raise RuntimeError("llama.cpp cannot remove cache rows of this model "
                                   "(a recurrent or hybrid architecture)")
        del self._tokens[n:]

    def _decode(self, tokens: list[int], n_logits: int) -> np.ndarray:
        """One ``llama_decode`` of ``tokens`` at positions ``n_cached ..``, logits for the last
        ``n_logits`` rows."""
        n, start = len(tokens), self.n_cached
        if n > self.n_batch:
            raise ValueError(f"{n} tokens in one decode, above the batch of {self.n_batch}")
        if start + n > self.n_ctx:
            raise ValueError(f"the sequence would reach {start + n} tokens, past the "
                             f"context of {self.n_ctx}")
        b = self._batch
        for j, tok in enumerate(tokens):
            b.token[j], b.pos[j], b.n_seq_id[j] = tok, start + j, 1
            b.seq_id[j][0] = 0
            b.logits[j] = j >= n - n_logits
        b.n_tokens = n
        rc = self._lc.llama_decode(self._ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc}) at {start + n} cached tokens")
        self._tokens += tokens
        out = np.empty((n_logits, self.vocab_size), np.float32)
        for r in range(n_logits):
            row = self._lc.llama_get_logits_ith(self._ctx, n - n_logits + r)
            out[r] = np.ctypeslib.as_array(ctypes.cast(row, ctypes.POINTER(ctypes.c_float)),
                                           shape=(self.vocab_size,))
        return out

    # ------------------------------------------------------------------ vocabulary
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        """The model's tokens of ``text`` (special tokens parsed, as a chat template needs)."""
        raw = text.encode()
        buf = (self._lc.llama_token * (len(raw) + 8))()
        n = self._lc.llama_tokenize(self._vocab, raw, len(raw), buf, len(buf), add_special, True)
        return list(buf[:n])

    def detokenize(self, tokens, special: bool = False) -> str:
        """The text of ``tokens`` (``special``: control tokens such as ``<|im_start|>``
        written out, as a prompt's text needs them)."""
        out = b""
        buf = ctypes.create_string_buffer(256)
        for tok in tokens:
            n = self._lc.llama_token_to_piece(self._vocab, int(tok), buf, len(buf), 0, special)
            out += buf.raw[:max(n, 0)]
        return out.decode("utf-8", errors="replace")

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt text of a chat (``{"role", "content"}`` messages) by the GGUF's own chat
        template, as llama.cpp applies it (``llama_chat_apply_template``: the templates it
        recognises), ending with the assistant's turn opened.

        Raises
        ------
        ValueError
            No message, a message without a string ``role`` and ``content``, a GGUF without a
            chat template, or one llama.cpp does not recognise.
        """
        lc = self._lc
        if not messages:
            raise ValueError("a chat needs at least one message")
        for j, m in enumerate(messages):
            if not isinstance(m, Mapping) or not all(isinstance(m.get(key), str)
                                                     for key in ("role", "content")):
                raise ValueError(f"message {j} needs a string 'role' and 'content'")
        template = lc.llama_model_chat_template(self._model, None)
        if not template:
            raise ValueError(f"{self.path} carries no chat template: send a plain prompt")
        chat = (lc.llama_chat_message * len(messages))(
            *[lc.llama_chat_message(m["role"].encode(), m["content"].encode())
              for m in messages])
        def apply(size: int) -> tuple[int, ctypes.Array]:
            buf = ctypes.create_string_buffer(size)
            return lc.llama_chat_apply_template(template, chat, len(chat), True, buf, size), buf

        n, buf = apply(256 + 2 * sum(len(c.content) + len(c.role) for c in chat))
        if n > len(buf):  # llama.cpp says how many bytes it needs
            n, buf = apply(n)
        if n < 0:
            raise ValueError(f"llama.cpp does not recognise the chat template of {self.path}")
        return buf.raw[:n].decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends a generation (EOS, EOT, ...); llama.cpp asked once per
        token id (a decoding loop asks for every token it emits)."""
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = bool(self._lc.llama_vocab_is_eog(self._vocab, int(token)))
        return known

    def close(self) -> None:
        """Free the batch, the context and the model."""
        if getattr(self, "_ctx", None):
            self._lc.llama_batch_free(self._batch)
            self._lc.llama_free(self._ctx)
            self._lc.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:
        self.close()
