"""The ``sql`` domain: the SQL examples of the PostgreSQL manual (Debian ``postgresql-doc-*``)
with their captions for training; the "To do X:" examples of held-out pages as prompts.

Training-side prompts (what the target is asked in ``hedgespec distill``) come from the
training pages only: each task caption in three phrasings (:data:`_TRAIN_ASKS`, the first one
the benchmark's own form) and "explain this statement" for every uncaptioned example."""

from __future__ import annotations

import html
import re
from pathlib import Path

from spec_adapters.app.corpora.sources import Sources
from spec_adapters.app.corpora.split import Split, held_out, pick

__all__ = ["build_sql"]

_ASK = "Write a PostgreSQL statement to {}. Reply with the SQL in a code block."
_TRAIN_ASKS = (_ASK, "How do I {} in PostgreSQL? Show the SQL.",
               "Show the PostgreSQL SQL to {}, with a one-line explanation.")
_EXPLAIN = "Explain what this PostgreSQL statement does:\n\n```sql\n{}\n```"

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


def build_sql(src: Sources, n: int, seed: int) -> Split:
    """The captioned SQL examples of ~70% of the manual's pages for training; the task captions
    of the other pages' examples as prompts."""
    train, prompts, train_prompts, pages, held_pages = [], [], [], 0, 0
    seen: set[str] = set()
    for page in sorted(Path(src.postgres_html).glob("*.html")):
        doc = page.read_text(encoding="utf-8", errors="replace")
        held = held_out(page.name, 0.3, "sql")
        pieces = []
        for caption, code in _PRE.findall(doc):
            sql = html.unescape(re.sub(r"<[^>]+>", "", code)).strip("\n")
            if not _SQL_START.match(sql):
                continue
            cap = _text(caption)
            task = _sql_task(cap)
            is_task = task is not None
            if is_task and held:
                prompts.append(_ASK.format(task))
            elif is_task:
                train_prompts += [a.format(task) for a in _TRAIN_ASKS]
            elif not held and len(sql) < 1200:
                train_prompts.append(_EXPLAIN.format(sql))
            if not held and sql not in seen:
                seen.add(sql)
                pieces.append((f"-- {cap}\n" if is_task else "") + sql)
        if pieces:
            train.append("\n\n".join(pieces))
        pages += 1
        held_pages += held
    return train, pick(prompts, n, seed, "sql"), train_prompts, \
        (f"PostgreSQL manual: SQL examples of {pages - held_pages} pages for training; "
         f"'To ...:' / 'Create ...:' examples of {held_pages} held-out pages as prompts")
