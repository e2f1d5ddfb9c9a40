"""The start-up probe's child (:func:`spec_adapters.llamacpp.cpu_backend.probe_decodes`):
decode a tiny Q4_0 GGUF through llama.cpp, one row and then five at once (the rows take AMX's
tile kernel on a variant with AMX, one row its VNNI one), and exit 0; a fault kills this process
instead of the one that asked. ``python -m spec_adapters.llamacpp.probe``; the CPU variant is
the one :mod:`~spec_adapters.llamacpp.cpu_backend` chooses, or ``HEDGESPEC_LLAMACPP_CPU``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import gguf

from spec_adapters.llamacpp.target import GGUFTarget
from spec_adapters.llamacpp.tiny_gguf import write_tiny_gguf


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.gguf"
        write_tiny_gguf(path, hidden=64, heads=2, kv_heads=1, ff=128, seed=0,
                        qtype=gguf.GGMLQuantizationType.Q4_0)
        target = GGUFTarget(path, n_ctx=64, n_threads=2)
        first = target.prefill(target.tokenize("hello"))
        rows = target.step([int(first.argmax()), 5, 6, 7, 8])
        target.close()
    if rows.shape[0] != 5:
        raise SystemExit(f"probe: {rows.shape[0]} rows of logits for 5")
    print("probe: decoded")


if __name__ == "__main__":
    main()
