"""The vLLM side of ``hedgespec distill --engine vllm``: run in the vLLM environment's
interpreter (``python -m spec_adapters.app.distill.vllm_worker JOB.json``) by
:func:`spec_adapters.app.distill.answers.distill`, it answers the job's prompts with one vLLM engine
on the target's folder, through the same batch loop and files as the transformers engine
(:func:`spec_adapters.app.distill.answers.run_batches`): greedy, EOS-stopped, ``max_num_seqs`` the
batch size, ``float32``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spec_adapters.app.distill.answers import DistillConfig, run_batches


def _main(job_path: str) -> None:
    from transformers import GenerationConfig
    from vllm import LLM, SamplingParams

    from spec_adapters.app.domains import chat_ids

    job = json.loads(Path(job_path).read_text())
    cfg = DistillConfig(**job["config"])
    llm = LLM(model=job["model"], enforce_eager=True, dtype="float32", seed=0,
              max_num_seqs=cfg.batch_size, enable_prefix_caching=False)
    tok = llm.get_tokenizer()
    params = SamplingParams(temperature=0.0, max_tokens=cfg.max_new_tokens)
    eos = GenerationConfig.from_pretrained(job["model"]).eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) - {None}

    def cut(ids) -> list[int]:  # as the transformers engine: the answer before its EOS
        ids = list(ids)
        return ids[:next((j for j, t in enumerate(ids) if t in eos), len(ids))]

    def answer(batch: list[str]) -> list[list[int]]:
        asks = [{"prompt_token_ids": chat_ids(tok, p).tolist()} for p in batch]
        return [cut(o.outputs[0].token_ids) for o in llm.generate(asks, params, use_tqdm=False)]

    run_batches(job["prompts"], Path(job_path).parent, cfg, answer)


if __name__ == "__main__":
    _main(sys.argv[1])
