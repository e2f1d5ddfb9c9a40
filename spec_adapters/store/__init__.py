"""On-disk cache folders: written atomically, complete or absent, checked by content."""

from spec_adapters.store.integrity import CacheError

__all__ = ["CacheError"]
