"""The ``chemistry``, ``medicine`` and ``biology`` domains: GCIDE entries (Debian ``dict-gcide``)
by their first subject tag, definitions for training; held-out headwords as prompts."""

from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from spec_adapters.app.corpora.sources import Sources
from spec_adapters.app.corpora.split import Split, held_out, pick

__all__ = ["GCIDE_FIELDS", "gcide_builder", "gcide_entries"]

GCIDE_FIELDS = {
    "chemistry": ("Chem.", "Biochem.", "Org. Chem.", "Min."),
    "medicine": ("Med.", "Anat.", "Physiol.", "Surg.", "Pharm.", "Pathol.", "Therap."),
    "biology": ("Biol.", "Zool.", "Bot.", "Zoöl."),
}

_FIELD_WORD = {"chemistry": "chemistry", "medicine": "medicine", "biology": "biology"}

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


def gcide_builder(domain: str) -> Callable[[Sources, int, int], Split]:
    """The builder of one GCIDE domain (a key of :data:`GCIDE_FIELDS`): its entries' cleaned
    definitions for training, ~10% of its headwords held out as prompts."""
    word = _FIELD_WORD[domain]
    templates = (f"In {word}, what does the term \"{{w}}\" mean? Explain briefly.",
                 f"Explain the {word} term \"{{w}}\" in a few sentences.",
                 f"What is \"{{w}}\"? Answer as an expert in {word}.",
                 f"Give a short definition of \"{{w}}\" as used in {word}.")
    own = GCIDE_FIELDS[domain]
    tags = {t: d for d, ts in GCIDE_FIELDS.items() for t in ts}
    tag_re = re.compile(r"\(([A-Z][A-Za-zö. ]+?\.)(?: & ([A-Z][A-Za-zö. ]+?\.))?\)")

    def build(src: Sources, n: int, seed: int) -> Split:
        train, prompts, train_prompts, heads, held_heads = [], [], [], set(), set()
        for head, block in gcide_entries(Path(src.gcide)):
            first = next((m for m in tag_re.finditer(block)
                          if any(t in tags for t in m.groups())), None)
            if first is None or tags[next(t for t in first.groups() if t in tags)] != domain:
                continue
            k = int(hashlib.sha256(head.encode()).hexdigest(), 16) % len(templates)
            if held_out(head.lower(), 0.1, domain):
                held_heads.add(head)
                prompts.append(templates[k].format(w=head))
            else:
                heads.add(head)
                train_prompts.append(templates[k].format(w=head))
                train.append(_clean_gcide(head, block, first.end()))
        return train, pick(prompts, n, seed, domain), train_prompts, \
            (f"GCIDE entries whose first subject tag is one of {', '.join(own)}: "
             f"{len(heads)} headwords for training, {len(held_heads)} held out for prompts")

    return build
