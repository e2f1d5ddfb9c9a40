"""The HedgeSpec round loop: select -> draft -> verify -> evaluate -> update."""

from spec_adapters.decoding.chain import GenerateOutput, HedgeSpecDecoder

__all__ = ["GenerateOutput", "HedgeSpecDecoder"]
