"""The HedgeSpec round loop (select -> draft -> verify -> evaluate -> update) and its schemes.

``loop``: :class:`~spec_adapters.decoding.loop.RoundLoop`, the one loop; ``chain``: the
single-draft scheme and :class:`~spec_adapters.decoding.chain.HedgeSpecDecoder`.
"""

from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.decoding.loop import GenerateOutput, RoundInfo

__all__ = ["GenerateOutput", "HedgeSpecDecoder", "RoundInfo"]
