"""``python -m spec_adapters.app.cli``: the ``hedgespec`` command."""

from spec_adapters.app.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
