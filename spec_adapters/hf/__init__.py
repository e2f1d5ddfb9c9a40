"""transformers-facing code below the decoding loop: the target wrapper (KV cache, verify,
crop; ``target``, ``rows_first``) and model loading (``models``).

HedgeSpec as ``model.generate(custom_generate=...)`` is
:func:`spec_adapters.decoding.generate` (it was ``spec_adapters.hf.generate``, which would make
this package import the decoding loop that imports it).
"""
