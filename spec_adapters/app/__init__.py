"""The application over the library: corpora, pool building, router, benchmark, CLI.

Nothing in the library (``core``, ``drafters``, ``decoding``, ``eagle``, ``hf``, ``store``)
imports this package.
"""
