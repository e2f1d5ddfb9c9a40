"""transformers-facing code: the target wrapper (KV cache, verify, crop), model loading, and
HedgeSpec as the decoding loop of ``model.generate(custom_generate=...)``.

``from spec_adapters.hf import generate`` gives the callable :func:`spec_adapters.hf.generate.
generate` (the function shadows its module as a package attribute; the module's other names
import with ``from spec_adapters.hf.generate import ...``). Importing the package imports
neither torch nor transformers.
"""

from spec_adapters.hf.generate import HedgeSpecGenerateOutput, generate

__all__ = ["HedgeSpecGenerateOutput", "generate"]
