"""HedgeSpec inside vLLM: a ``custom_class`` speculative proposer (numpy only; vLLM itself is
needed only to serve, not to import this package).

``config`` (``$HEDGESPEC_VLLM_CONFIG``), ``drafters`` (point-mass drafters over token buffers),
``costs`` (step time vs tokens scheduled), ``proposer`` (:class:`HedgeSpecProposer`).
"""

from spec_adapters.vllm.config import ENV_VAR, ProposerConfig, load_config
from spec_adapters.vllm.proposer import HedgeSpecProposer

__all__ = ["ENV_VAR", "HedgeSpecProposer", "ProposerConfig", "load_config"]
