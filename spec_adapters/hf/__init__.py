"""transformers-facing code: the target wrapper (KV cache, verify, crop) and model loading."""
