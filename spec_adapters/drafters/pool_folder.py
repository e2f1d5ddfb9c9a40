"""The served model's n-gram drafters, read from its pool folder and checked.

:func:`load_pool_folder` reads the n-gram drafters of one pool (one set of settings) from a
pool folder, each file checked against its checksum first, as point-mass
:class:`~spec_adapters.drafters.point.CorpusNGram` drafters.
"""

from __future__ import annotations

import json
from pathlib import Path

from spec_adapters.drafters.point import CorpusNGram
from spec_adapters.store.integrity import CacheError, expect_digests, verify_files
from spec_adapters.store.keys import entry_key
from spec_adapters.store.pool_settings import NGramPoolSettings

__all__ = ["load_pool_folder"]


def load_pool_folder(folder: str | Path, vocab_size: int,
                     settings: NGramPoolSettings | None = None) -> list[CorpusNGram]:
    """The n-gram drafters of one pool in a pool folder, each checked before use.

    The folder may hold pools of several settings side by side (``hedgespec train-drafters
    --domains sql`` next to the default seven); only the entries of ``settings`` are read:
    ``<name>-<key>.npz``, ``<key>`` the hash of the entry's settings for a target of
    ``vocab_size`` tokens (:class:`~spec_adapters.store.pool_settings.NGramPoolSettings`).
    Each file is checked against the size and SHA-256 its sidecar ``<name>-<key>.json``
    records (:func:`spec_adapters.store.integrity.verify_files`, re-hashing only files whose
    stat changed since they were last verified).

    Parameters
    ----------
    folder : path-like
        ``<cache_dir>/pool/<target-id>``.
    vocab_size : int
        The target's vocabulary size (part of every entry's settings).
    settings : NGramPoolSettings, optional
        Default: the pool ``hedgespec train-drafters`` builds without options.

    Returns
    -------
    list of CorpusNGram
        The specialists in ``settings.domains`` order, then the generalist, named like the
        application's pool members (``ngram-code``, ``ngram-general``).

    Raises
    ------
    ValueError
        The folder does not exist or holds no pool of these settings (the message lists the
        pools it holds); the pool is incomplete; a sidecar is unreadable or describes another
        entry; a file is missing, differs from its checksum or is not a saved n-gram drafter
        (:class:`spec_adapters.store.CacheError`, naming the file).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"pool folder {folder} does not exist")
    settings = settings if settings is not None else NGramPoolSettings()
    wanted = {name: (entry_key(name, st), st) for name, st in settings.entries(vocab_size).items()}
    present = [n for n, (key, _st) in wanted.items()
               if (folder / f"{key}.json").exists() or (folder / f"{key}.npz").exists()]
    if not present:
        raise ValueError(f"pool folder {folder} holds no n-gram pool of the settings {settings} "
                         f"for a vocabulary of {vocab_size} tokens; it holds "
                         f"{_pools_in(folder, wanted['ngram-general'][1])}")
    drafters = []
    for name, (key, st) in wanted.items():
        sidecar = folder / f"{key}.json"
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, ValueError) as err:
            raise CacheError(f"{sidecar} is missing or unreadable ({type(err).__name__}): the "
                             "pool is incomplete; re-run `hedgespec train-drafters`") from None
        if not isinstance(meta, dict) or meta.get("kind") != "ngram" \
                or meta.get("settings") != st:
            raise CacheError(f"{sidecar} does not describe the entry {key}")
        path = folder / f"{key}.npz"
        verify_files(folder, expect_digests(meta.get("files"), [path.name], sidecar))
        d = CorpusNGram.load(path)
        if d.vocab_size != vocab_size:
            raise CacheError(f"drafter {path} has vocabulary size {d.vocab_size}, its settings "
                             f"say {vocab_size}")
        d.name = name
        drafters.append(d)
    return drafters


def _pools_in(folder: Path, want: dict) -> str:
    """The n-gram pools of ``folder``, by how their generalist's settings differ from
    ``want`` (the generalist's settings asked for)."""
    out = []
    for sidecar in sorted(folder.glob("ngram-general-*.json")):
        try:
            st = json.loads(sidecar.read_text())["settings"]
            diff = {k: st.get(k) for k in sorted(set(st) | set(want)) if st.get(k) != want.get(k)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            diff = "unreadable sidecar"
        out.append(f"{sidecar.stem} ({diff})")
    return "pools of other settings: " + "; ".join(out) if out else "no n-gram pool"
