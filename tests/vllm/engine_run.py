"""Run vLLM engines in a subprocess on token-id prompts; the vLLM tests' helper (not a test).

``python -m tests.vllm.engine_run JOBS.json OUT.json``: a list of jobs, run one after the
other, one engine each. A job holds ``model`` (a folder), ``prompts`` (lists of token ids),
``max_tokens`` (one number, or one per prompt), optional ``speculative_config``, optional
``env`` (set while its engine starts and runs, e.g. ``HEDGESPEC_VLLM_CONFIG``), optional
``sampling`` (one dict per prompt of ``temperature``, ``top_p``, ``top_k``, ``seed``; default
greedy, or the job's ``temperature``) and optional ``arrivals``: the engine step at which each
prompt is added (continuous batching: requests arrive and finish at different steps; without
it every prompt is submitted at once). A job's output holds the generated token ids per
prompt, in order, and the wall time of ``generate``.

The engine core and its worker run inside that one process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``:
vLLM's one-process executor, the same proposer and sampler), and a module's engines share it:
on this project's 2 cores importing vLLM takes ~14 s and starting a tiny engine ~3 s, and
vLLM's own processes would import it three times per engine. The served path, vLLM's own
processes, is tests/vllm/test_serve.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from spec_adapters.llamacpp.cpu_backend import exit_cause

ROOT = Path(__file__).resolve().parents[2]


def tiny_llama(folder: Path, vocab_size: int = 512, seed: int = 0, logit_scale: float = 1.0
               ) -> Path:
    """Save a tiny random Llama (head_dim 64, as vLLM's CPU attention wants) to ``folder``;
    ``logit_scale`` multiplies its output layer (peaked next-token laws: drafts get accepted
    at a temperature, so sampling tests exercise the rejection rule)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    model.save_pretrained(folder)
    return folder


def tiny_gemma3(folder: Path, vocab_size: int = 4096, seed: int = 0, logit_scale: float = 1.0
                ) -> Path:
    """Save a tiny random Gemma-3 (text) to ``folder``: sliding-window layers (window 8) beside
    a full one, head_dim 64, a vocabulary of ``vocab_size``: the second architecture.
    ``logit_scale`` multiplies its logits (the final norm's gain ``1 + w``; the output layer is
    the tied embedding), as :func:`tiny_llama`'s."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256,
                              num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=64, sliding_window=8,
                              layer_types=["sliding_attention", "sliding_attention",
                                           "full_attention"],
                              max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                              pad_token_id=0, tie_word_embeddings=True)
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.norm.weight.add_(1.0).mul_(logit_scale).sub_(1.0)
    model.save_pretrained(folder)
    return folder


def tiny_tokenizer(folder: Path, vocab_size: int = 512) -> Path:
    """Save a word-level tokenizer over ``vocab_size`` words ``<unk> <s> </s> t3 t4 ...`` (id
    = position; text ``"t5 t9"`` is ids ``[5, 9]``) with a chat template that joins the
    messages' contents, so the OpenAI server can serve the tiny model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, vocab_size)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<unk>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(folder)
    return folder


def vllm_env(extra: dict | None = None) -> dict:
    """The environment a vLLM CPU engine runs in: Intel OpenMP preloaded, 1 GiB KV cache."""
    env = dict(os.environ)
    lib = Path(sys.prefix) / "lib" / "libiomp5.so"
    if lib.exists():
        env["LD_PRELOAD"] = str(lib)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("OMP_NUM_THREADS", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def run_engine(job: dict, tmp: Path, timeout: float = 600) -> dict:
    """Run ``job`` in a fresh interpreter; return its output (``RuntimeError`` with the
    engine's whole log when it fails)."""
    out = run_engines([job], tmp, timeout)[0]
    if "error" in out:
        raise RuntimeError(f"engine run failed:\n{out['error']}")
    return out


def run_engines(jobs: list[dict], tmp: Path, timeout: float = 600) -> list[dict]:
    """Run ``jobs`` one after the other in one fresh interpreter, one engine each (vLLM is
    imported once: ~14 s of every start on 2 cores, against ~3 s for the engine itself); a
    job's ``env`` holds for its engine alone. Returns one output per job; the last job, when
    it fails, gives ``{"error": <its exception and causes>}`` (a test of a failed start).
    ``RuntimeError`` with the whole log when an earlier job or the interpreter fails."""
    job_path, out_path = tmp / "job.json", tmp / "out.json"
    job_path.write_text(json.dumps(jobs))
    out_path.unlink(missing_ok=True)
    env = vllm_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    proc = subprocess.run([sys.executable, "-m", "tests.vllm.engine_run", str(job_path),
                           str(out_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"engine run failed ({exit_cause(proc.returncode)}):\n{proc.stdout}\n"
                           f"{proc.stderr}")
    outputs = json.loads(out_path.read_text())
    if len(outputs) < len(jobs) or any("error" in out for out in outputs[:-1]):
        raise RuntimeError(f"engine run failed:\n{outputs[-1].get('error')}\n{proc.stdout}\n"
                           f"{proc.stderr}")
    return outputs


def _main(job_path: str, out_path: str) -> None:
    outputs = []
    for i, job in enumerate(json.loads(Path(job_path).read_text())):
        if i == 1:
            _keep_the_first_engines_kernels()
        saved = {k: os.environ.get(k) for k in job.get("env", {})}
        os.environ.update(job.get("env", {}))
        try:
            outputs.append(_run(job))
        except Exception as err:  # the test reads it (e.g. the proposer's ValueError)
            outputs.append({"error": "".join(traceback.format_exception(err))})
            break
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    Path(out_path).write_text(json.dumps(outputs))


def _keep_the_first_engines_kernels() -> None:
    """A worker's start rebinds vLLM's kernels to the CPU platform's by scanning every loaded
    module; in a second engine of this process the scan would rebind what is rebound already
    and meet the modules the first engine loaded (numba's llvmlite, through the n-gram
    kernels, breaks it). Later engines keep the first one's kernels, with the project's plugin
    fix on them, as a fresh process would have them."""
    from vllm.platforms import current_platform

    type(current_platform).register_triton_kernel_overrides = classmethod(lambda cls: None)


def _run(job: dict) -> dict:
    """One engine on ``job``, shut down and its distributed state removed once it is done."""
    import gc

    from vllm import LLM, SamplingParams
    from vllm.distributed import cleanup_dist_env_and_memory

    llm = LLM(model=job["model"], skip_tokenizer_init=True, enforce_eager=True,
              dtype="float32", max_model_len=job.get("max_model_len", 512),
              max_num_seqs=job.get("max_num_seqs", 16), seed=0,
              speculative_config=job.get("speculative_config"))
    n = len(job["prompts"])
    lengths = job["max_tokens"] if isinstance(job["max_tokens"], list) else [job["max_tokens"]] * n
    sampling = job.get("sampling") or [{"temperature": job.get("temperature", 0.0)}] * n
    params = [SamplingParams(max_tokens=m, ignore_eos=True, detokenize=False, **s)
              for m, s in zip(lengths, sampling, strict=True)]
    start = time.perf_counter()
    if "arrivals" in job:
        tokens = _staggered(llm.llm_engine, job["prompts"], params, job["arrivals"])
    else:
        outs = llm.generate([{"prompt_token_ids": p} for p in job["prompts"]], params,
                            use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in outs]
    seconds = time.perf_counter() - start
    llm.llm_engine.engine_core.shutdown()
    del llm
    cleanup_dist_env_and_memory()
    gc.collect()
    return {"tokens": tokens, "seconds": seconds}


def _staggered(engine, prompts: list[list[int]], params: list, arrivals: list[int]
               ) -> list[list[int]]:
    """Add prompt ``i`` at engine step ``arrivals[i]``; step until every request finished
    (with nothing in flight, the clock jumps to the next arrival: an idle engine's ``step``
    would wait for output forever)."""
    from vllm.sampling_params import RequestOutputKind

    done: dict[int, list[int]] = {}
    added: set[int] = set()
    step = 0
    while len(done) < len(prompts):
        if len(added) == len(done):  # nothing in flight: a step would wait for output
            step = max(step, min(at for i, at in enumerate(arrivals) if i not in added))
        for i, at in enumerate(arrivals):
            if at <= step and i not in added:
                p = params[i].clone()
                p.output_kind = RequestOutputKind.FINAL_ONLY
                engine.add_request(f"r{i}", {"prompt_token_ids": prompts[i]}, p)
                added.add(i)
        for out in engine.step():
            if out.finished:
                done[int(out.request_id[1:])] = list(out.outputs[0].token_ids)
        step += 1
        if step > 100_000:
            raise RuntimeError("requests never finished")
    return [done[i] for i in range(len(prompts))]


if __name__ == "__main__":
    _main(*sys.argv[1:3])
