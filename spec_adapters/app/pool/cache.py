"""The drafter pool: build it once into a cache folder, load it for decoding and benchmarks.

Layout, one folder per target (``<cache_dir>/pool/<target-id>/``); every entry's name ends in
``<key>``, a short hash of the settings it was built with, so pools built with different
settings (``--domains sql`` next to the default seven) coexist and never overwrite each other::

    ngram-<domain>-<key>.npz      NGramDrafter on that domain's training text (specialist)
    ngram-general-<key>.npz       NGramDrafter on the mix of all domains, same token budget
    ngram-union-<key>.npz         NGramDrafter on all domains' text and answers (a baseline)
    answers-<domain>-<key>.npz    the target's answers to training prompts (self-distillation,
                                  copied from its distilled set: spec_adapters.app.distill.answers)
    eagle-<domain>-<key>/         EagleHead (save_pretrained) per domain        (optional)
    eagle-general-<key>/          EagleHead on the mix                           (optional)
    extra-<domain>-<s>-<key>.npz  shard-trained n-gram drafters for the pool-size sweep
    router-<key>.npz              domain router (spec_adapters.app.router)       (optional)
    <entry>.json                  sidecar: kind, settings, size and SHA-256 of the entry's
                                  files; written last, so an entry without one is incomplete
    .verified.json, .lock         the checksum fast path, the build lock (spec_adapters.store)

Integrity. The entry names its own files (the ``.npz``, or the head's two files); the sidecar
only supplies their digests, which are checked on every load (:mod:`spec_adapters.store
.integrity`, re-hashing only files whose stat changed). An entry whose sidecar is missing, of
the wrong shape, or lists other files, whose files differ from it, or that fails to load
(including non-finite head or router weights) is reported on stderr and rebuilt; with
``build=False``, or when the cache cannot be written, it is one :class:`PoolCorruptError`
naming the file. Builds run under the folder's build lock, which first removes what killed
builds left behind. Prompt lookup and the suffix drafter need no training and are always
added.

Generalist vs specialists: a specialist n-gram sees ``max_train_tokens`` tokens of its own
domain and its distilled answers; the generalist sees the same budget drawn equally from every
domain (an equal training-budget comparison). The union baseline sees all of it: an n-gram
model has no capacity limit, so the union is what a user would try instead of selecting, and
the benchmark measures it beside the pool.

Here: the config, the loaded pool, which entries a config asks for, and building (in that
order, under the lock) and loading them. An entry's identity, file names and sidecar:
:mod:`spec_adapters.app.pool.entries`; its training material and per-kind writers:
:mod:`spec_adapters.app.pool.builders`.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from spec_adapters.app.log import log as _log
from spec_adapters.app.pool.builders import BUILDERS, BuildContext
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.app.pool.entries import FORMAT, Entry, check_entry, remove_entry
from spec_adapters.store.atomic import build_lock, sweep
from spec_adapters.store.integrity import CacheError
from spec_adapters.store.target_pool import loaded_target_id

__all__ = ["FORMAT", "Pool", "PoolCorruptError", "build_pool", "describe",
           "load_pool", "pool_dir", "prompt_lookup"]


class PoolCorruptError(CacheError):
    """A pool entry is missing files, has the wrong checksum or fails to load, and cannot be
    rebuilt here (``build=False``, or a read-only cache)."""


@dataclass
class Pool:
    """A loaded pool.

    Attributes
    ----------
    drafters : list
        Single-draft drafters in a fixed order: the domain n-gram specialists (in
        ``domains`` order), the n-gram generalist, prompt lookup, the suffix drafter (which
        learns from the stream: give each decoder its own copy, :func:`copy.deepcopy`).
    names : list of str
    domain_of : dict
        drafter name -> its domain (``None`` for the generalist and prompt lookup).
    baselines : list
        Drafters measured beside the pool but not selectable: ``ngram-union`` (every domain's
        text and answers in one n-gram model) and ``suffix-no-memory`` (the suffix drafter
        without its memory of the stream).
    heads : list of EagleHead
        EAGLE heads (specialists in ``domains`` order, then the generalist), possibly empty.
    extras : list
        Shard-trained n-gram drafters (pool-size sweep), possibly empty.
    router : Router or None
    folder : Path
    paths : dict
        member name -> its entry's file or folder.
    """

    drafters: list
    names: list[str]
    domain_of: dict
    baselines: list = field(default_factory=list)
    heads: list = field(default_factory=list)
    extras: list = field(default_factory=list)
    router: object = None
    folder: Path | None = None
    paths: dict = field(default_factory=dict)

    def index(self, name: str) -> int:
        return self.names.index(name)

    @property
    def generalist(self) -> int:
        return self.names.index("ngram-general")

    def specialist(self, domain: str) -> int:
        return self.names.index(f"ngram-{domain}")


# ------------------------------------------------------------------------------------------
# the folder and the entries a config asks for
# ------------------------------------------------------------------------------------------
def pool_dir(cache_dir, model, tokenizer) -> Path:
    """``<cache_dir>/pool/<target-id>``: pools for different targets never mix (the model
    folder's *name*, not its path, so the same cache reached as ``.cache`` or as an absolute
    path is one pool, and a hash of its shape)."""
    return Path(cache_dir) / "pool" / loaded_target_id(model, tokenizer)


def _entries(cfg: PoolConfig, folder: Path, V: int) -> list[Entry]:
    """Every entry ``cfg`` asks for, in build order (answers before the n-grams using them)."""
    ngram = cfg.ngram
    base = ngram.base(V)
    out: list[Entry] = []
    if ngram.distilled_tokens:
        out += [Entry(f"answers-{d}", "answers",
                      {"distilled_tokens": ngram.distilled_tokens, "domain": d}, folder)
                for d in cfg.domains]
    out += [Entry(n, "ngram", st, folder) for n, st in ngram.entries(V).items()]
    out.append(Entry("ngram-union", "union", ngram.union(V), folder))
    out += [Entry(f"extra-{d}-{s}", "extra",
                  {**base, "domain": d, "shard": s, "shards": cfg.extra_shards,
                   "order": max(2, ngram.ngram_order - s % 2)}, folder)
            for d in cfg.domains for s in range(cfg.extra_shards)]
    if cfg.eagle is not None:
        hb = cfg.head_settings()
        out += [Entry(f"eagle-{d}", "eagle", {**hb, "domain": d}, folder) for d in cfg.domains]
        out.append(Entry("eagle-general", "eagle", {**hb, "domains": list(cfg.domains)},
                         folder))
    if cfg.router:
        out.append(Entry("router", "router",
                         {"labels": list(cfg.domains), "seed": cfg.seed, "format": 1}, folder))
    return out


# ------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------
def build_pool(model, tokenizer, cache_dir, config: PoolConfig | None = None, *,
               domains=None, progress: bool = True, rebuild: Collection[str] = ()) -> Path:
    """Build (or complete) the drafter pool for ``model`` in ``<cache_dir>/pool/<target-id>``.

    Parameters
    ----------
    model, tokenizer
        The target (see :func:`spec_adapters.hf.models.load_target`).
    cache_dir : path-like
    config : PoolConfig
    domains : dict of name -> Domain, optional
        Default: :func:`spec_adapters.app.domains.load_domains` from ``cache_dir`` (prepared first
        if needed).
    progress : bool
        tqdm bar over the entries (and the head trainer's own bars).
    rebuild : collection of str
        Entry names (``"ngram-code"``, ...) to rebuild even if their files match their
        checksums (they failed to load).

    Returns
    -------
    Path
        The pool folder. Valid entries are reused; corrupt ones are rebuilt (reported on
        stderr).

    Raises
    ------
    PoolCorruptError
        An entry must be (re)built but the pool folder cannot be written.
    """
    from spec_adapters.hf.target import output_vocab_size

    cfg = config or PoolConfig()
    folder = pool_dir(cache_dir, model, tokenizer)
    V = output_vocab_size(model)
    entries = _entries(cfg, folder, V)

    def problems():
        out = [(e, "rebuild requested" if e.name in rebuild else check_entry(e))
               for e in entries]
        return [(e, why) for e, why in out if why is not None]

    todo = problems()
    if not todo:
        sweep(folder)
        return folder
    try:
        with build_lock(folder):
            todo = problems()  # another process may have built them while we waited
            if todo:
                _build(model, tokenizer, cache_dir, cfg, domains, entries, todo, V, progress)
    except CacheError as err:
        e, why = todo[0]
        raise PoolCorruptError(f"pool entry {e.path} cannot be rebuilt ({why}): {err}") \
            from None
    return folder


def _build(model, tokenizer, cache_dir, cfg: PoolConfig, domains, entries: list[Entry],
           todo, V: int, progress: bool) -> None:
    """Build the entries of ``todo``, ``(entry, why)`` pairs, each by its kind's builder
    (:data:`~spec_adapters.app.pool.builders.BUILDERS`), holding the pool's build lock."""
    from tqdm.auto import tqdm

    if domains is None:
        from spec_adapters.app.domains import load_domains, prepare_domains

        prepare_domains(cache_dir, cfg.domains)
        domains = load_domains(cache_dir, cfg.domains)
    for e, why in todo:
        if why != "missing":
            _log(f"pool entry {e.path} is unusable ({why}); rebuilding it")
            remove_entry(e)
    ctx = BuildContext(model, tokenizer, cache_dir, cfg, {d: domains[d] for d in cfg.domains},
                       {e.name: e for e in entries}, V)
    bar = tqdm(todo, desc="drafter pool", unit="entry", disable=not progress)
    for e, _why in bar:
        bar.set_postfix_str(e.name)
        t0 = time.perf_counter()
        BUILDERS[e.kind](e, ctx)
        _log(f"built {e.name} in {time.perf_counter() - t0:.1f} s")


# ------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------
def prompt_lookup(vocab_size: int):
    from spec_adapters.drafters.ngram import PromptLookupDrafter

    return PromptLookupDrafter(vocab_size, max_ngram=3, name="prompt-lookup")


def suffix_drafter(vocab_size: int, learn: bool = True):
    """The pool's suffix drafter (SuffixDecoding): the request's context and the earlier
    queries of the stream, 200k tokens at most (12 bytes each); ``learn=False``: the request's
    context alone (``suffix-no-memory``, a baseline)."""
    from spec_adapters.drafters.suffix import SuffixDrafter

    return SuffixDrafter(vocab_size, max_tokens=200_000, max_depth=24, min_match=1,
                         min_prob=0.1, spec_factor=1.0, learn=learn,
                         name="suffix" if learn else "suffix-no-memory")


def _load_entry(entry: Entry, model):
    """The drafter, head or router stored by ``entry``; ``ValueError`` when it is not one."""
    if entry.kind == "eagle":
        from spec_adapters.eagle import EagleHead

        head = EagleHead.from_pretrained(entry.path, target=model)
        head.config.extra["name"] = entry.name
        return head
    if entry.kind == "router":
        from spec_adapters.app.router import Router

        return Router.load(entry.path)
    from spec_adapters.drafters.ngram import NGramDrafter

    drafter = NGramDrafter.load(entry.path)
    drafter.name = entry.name
    return drafter


def _load_entries(entries: list[Entry], model, check: bool) -> tuple[dict, dict]:
    """``(loaded, failed)``: name -> object, name -> why it is unusable. With ``check`` the
    checksums are verified first (``build_pool`` has just done so otherwise)."""
    loaded, failed = {}, {}
    for e in entries:
        why = check_entry(e) if check else None
        if why is None:
            try:
                loaded[e.name] = _load_entry(e, model)
            except (ValueError, OSError, KeyError, RuntimeError) as err:
                why = f"it fails to load: {err}"
        if why is not None:
            failed[e.name] = why
    return loaded, failed


def load_pool(model, tokenizer, cache_dir, config: PoolConfig | None = None, *,
              domains=None, build: bool = True, progress: bool = True) -> Pool:
    """Load the pool for ``model``, building or repairing missing / corrupt entries first.

    With ``build=False`` nothing is written: a missing or corrupt entry (checked by content)
    is a :class:`PoolCorruptError` naming it and the command that builds it. With ``build``
    an entry whose files match their checksums but that fails to load is rebuilt once.
    """
    from spec_adapters.hf.target import output_vocab_size

    cfg = config or PoolConfig()
    if build:
        folder = build_pool(model, tokenizer, cache_dir, cfg, domains=domains,
                            progress=progress)
    else:
        folder = pool_dir(cache_dir, model, tokenizer)
    V = output_vocab_size(model)
    wanted = [e for e in _entries(cfg, folder, V) if e.kind != "answers"]
    by_name = {e.name: e for e in wanted}
    loaded, failed = _load_entries(wanted, model, check=not build)
    if failed and build:
        for n, why in failed.items():
            _log(f"pool entry {by_name[n].path} is unusable ({why}); rebuilding it")
        build_pool(model, tokenizer, cache_dir, cfg, domains=domains, progress=progress,
                   rebuild=tuple(failed))
        more, failed = _load_entries([by_name[n] for n in failed], model, check=False)
        loaded |= more
    if failed:
        n, why = next(iter(failed.items()))
        fix = "re-run `hedgespec train-drafters`" if build else \
            "build the pool with `hedgespec train-drafters` (same --domains and settings)"
        raise PoolCorruptError(f"pool entry {by_name[n].path} is unusable ({why}); {fix}")

    names = [*(f"ngram-{d}" for d in cfg.domains), "ngram-general"]
    drafters = [loaded[n] for n in names] + [prompt_lookup(V), suffix_drafter(V)]
    domain_of = {**{f"ngram-{d}": d for d in cfg.domains}, "ngram-general": None,
                 "prompt-lookup": None, "suffix": None}
    extras = [loaded[e.name] for e in wanted if e.kind == "extra"]
    heads = [loaded[e.name] for e in wanted if e.kind == "eagle"]
    paths = {e.name: e.path for e in wanted}
    frozen = suffix_drafter(V, learn=False)  # what the stream memory is worth
    return Pool(drafters, [*names, "prompt-lookup", "suffix"], domain_of,
                [loaded["ngram-union"], frozen], heads, extras, loaded.get("router"), folder,
                paths)


def describe(pool: Pool) -> list[dict]:
    """One row per pool member: name, kind, domain, size on disk."""
    def size(name):
        p = pool.paths.get(name)
        files = [] if p is None else list(p.iterdir()) if p.is_dir() else [p]
        return sum(f.stat().st_size for f in files)

    kinds = {"prompt-lookup": "prompt-lookup", "suffix": "suffix"}
    rows = [{"name": n, "kind": kinds.get(n, "ngram"), "domain": pool.domain_of.get(n),
             "bytes": size(n)} for n in pool.names]
    rows += [{"name": b.name, "kind": "ngram (baseline)", "domain": None, "bytes": size(b.name)}
             for b in pool.baselines]
    for h in pool.heads:
        n = h.config.extra.get("name")
        rows.append({"name": n, "kind": "eagle", "domain": None, "bytes": size(n)})
    return rows
