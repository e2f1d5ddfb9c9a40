"""``hedgespec``, the command line: :func:`main` and its parser (:mod:`.main`); the commands
are in :mod:`.build`, :mod:`.generate`, :mod:`.bench` and :mod:`.vllm`, over what
:mod:`.common` sets up for them."""

from spec_adapters.app.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
