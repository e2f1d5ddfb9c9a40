"""On-disk cache folders: written atomically, complete or absent."""
