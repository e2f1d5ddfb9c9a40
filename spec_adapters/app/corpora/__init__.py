"""Where each domain's text comes from: the source packages and one builder per source family.

:mod:`.sources` fetches the packages (registry clients only) and names where they lie
(:class:`~.sources.Sources`); :mod:`.split` holds the deterministic split by source unit every
builder uses; :mod:`.code`, :mod:`.math`, :mod:`.sql`, :mod:`.gcide` (chemistry, medicine,
biology) and :mod:`.news` each turn their source into one domain's material. A builder is
``(sources, n_prompts, seed) -> (train docs, benchmark prompts, training-side prompts, split
description)``. Caching, checksums and loading are :mod:`spec_adapters.app.domains`' (the
front door, which also re-exports the public names here).
"""
