"""EAGLE-style draft heads, draft-tree decoding, tree gamma and the HedgeSpec tree decoder.

See docs/eagle.md.
"""

from .decoder import HedgeSpecDecoder
from .head import EagleHead, EagleHeadConfig
from .pool import HeadPool
from .tree import TreeConfig

__all__ = ["EagleHead", "EagleHeadConfig", "HeadPool", "HedgeSpecDecoder", "TreeConfig"]
