"""Self-distillation: the target's own answers to every domain's training-side prompts
(:mod:`.answers`, ``hedgespec distill``), made by transformers or by vLLM
(:mod:`.vllm_worker`, run in the vLLM environment)."""
