"""The benchmarks: transformers (:mod:`.run`, ``hedgespec bench``) and inside vLLM
(:mod:`.vllm`, ``hedgespec bench-vllm``), with their presets, measuring, replay, tables and
plots."""
