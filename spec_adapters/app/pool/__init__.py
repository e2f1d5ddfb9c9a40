"""The drafter pool: its settings (:mod:`.config`), its entries on disk (:mod:`.entries`), what
each entry is built from (:mod:`.builders`), and building and loading it (:mod:`.cache`)."""
