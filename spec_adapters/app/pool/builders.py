"""What each drafter-pool entry is built from and how it is written: training tokens from the
domains' text within a budget (a specialist's own domain, the generalist's equal share of every
domain, the extras' later windows), the target's answers to training-side prompts
(self-distillation), the router's labelled snippets, and one writer per entry kind (n-gram,
EAGLE head, answers), each finishing with the entry's sidecar; :data:`BUILDERS`, entry kind ->
its builder. The order and the choice of entries: :func:`spec_adapters.app.pool.cache.build_pool`.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from spec_adapters.app.corpora.split import cap_total
from spec_adapters.app.pool.entries import Entry, write_sidecar
from spec_adapters.store.atomic import atomic_folder

if TYPE_CHECKING:
    from spec_adapters.app.pool.config import PoolConfig

__all__ = ["BUILDERS", "BuildContext", "answers_for", "domain_tokens", "mix_domains",
           "router_texts", "save_answers", "save_head", "save_ngram", "token_window",
           "tokenize_budget"]


def tokenize_budget(texts: Iterable[str], tokenizer, budget: int) -> list[list[int]]:
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


def domain_tokens(domains, tokenizer, budget: int) -> dict[str, list[list[int]]]:
    """Each domain's training documents tokenised up to ``budget`` tokens."""
    return {name: tokenize_budget(d.train, tokenizer, budget) for name, d in domains.items()}


def mix_domains(tokens: dict[str, list[list[int]]], budget: int) -> list[list[int]]:
    """Equal share of ``budget`` tokens from every domain (its first documents, the last one
    cut; domain after domain)."""
    share = budget // max(1, len(tokens))
    return [d for docs in tokens.values() for d in cap_total(docs, share)]


def token_window(docs: list[list[int]], budget: int, skip: int = 0) -> list[list[int]]:
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


def answers_for(entries: dict[str, Entry], cfg: PoolConfig,
                domain: str | None) -> list[list[int]]:
    """The distilled answers of one domain; for ``None`` (the generalist) as many answer
    tokens as one domain holds, drawn in turn from every domain; for ``"*"`` (the union
    baseline) all of them."""
    from spec_adapters.app.distill.answers import read_token_lists

    if not cfg.ngram.distilled_tokens:
        return []

    def read(d):
        return read_token_lists(entries[f"answers-{d}"].path)[0]

    if domain == "*":
        return [a for d in cfg.domains for a in read(d)]
    if domain is not None:
        return read(domain)
    per = [read(d) for d in cfg.domains]
    mixed, total = [], 0
    for row in itertools.zip_longest(*per):
        for a in row:
            if a is not None and total < cfg.ngram.distilled_tokens:
                mixed.append(a)
                total += len(a)
    return mixed


def router_texts(domains, per_domain: int = 300, chars: int = 300,
                 seed: int = 0) -> tuple[list[str], list[str]]:
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


def save_ngram(entry: Entry, docs, vocab_size: int, order: int, answers=(),
               answer_weight: float = 1.0, context_weight: float = 0.0) -> None:
    """An :class:`~spec_adapters.drafters.ngram.NGramDrafter` of ``order`` on ``docs`` (count
    weight 1) and ``answers`` (count weight ``answer_weight``), interpolated with the request's
    own n-grams at ``context_weight``, saved with its sidecar."""
    from spec_adapters.drafters.ngram import NGramDrafter

    answers = list(answers)
    kw = {"weights": [1.0] * len(docs) + [answer_weight] * len(answers)} if answers else {}
    drafter = NGramDrafter.from_corpus(list(docs) + answers, vocab_size, order=order,
                                       name=entry.name, context_weight=context_weight, **kw)
    drafter.save(entry.path)  # atomic (temporary file renamed)
    write_sidecar(entry)


def save_head(entry: Entry, model, docs, cfg: PoolConfig) -> None:
    """An EAGLE head trained on ``docs`` with ``cfg.eagle`` (checkpoints in
    ``<entry>.partial`` until done), saved with its sidecar."""
    import torch

    from spec_adapters.eagle.train import train_head

    corpus = torch.tensor([t for d in docs for t in d], dtype=torch.long)
    work = entry.path.with_name(entry.path.name + ".partial")  # resumable checkpoints
    head, _history = train_head(model, corpus, out_dir=work, config=cfg.eagle, progress=True,
                                log=lambda *a, **k: None)
    head.config.extra["name"] = entry.name
    with atomic_folder(entry.path) as tmp:
        head.save_pretrained(tmp)  # ValueError on non-finite weights (diverged training)
    shutil.rmtree(work, ignore_errors=True)
    write_sidecar(entry)


def save_answers(entry: Entry, model, tokenizer, domain, cfg: PoolConfig, cache_dir) -> None:
    """Copy ``domain``'s answers from the target's distilled answer set into the pool (the
    target is never run here), leaving out any answer to a benchmark prompt.

    The set is looked up in ``cfg.answers_dir``, else ``<cache_dir>/distilled``, then the
    repository's ``data/distilled`` (:func:`spec_adapters.app.distill.answers.shipped_dir`), each
    under the target's id; the first that holds one is used and must be this target's
    (:func:`spec_adapters.app.distill.answers.load_answers`: a foreign set is a ``CacheError`` that
    says so, never silently used).
    """
    from spec_adapters.app.distill.answers import (
        answer_roots,
        find_answers,
        load_answers,
        save_token_lists,
        weights_fingerprint,
    )

    folder = find_answers(answer_roots(cfg.answers_dir, cache_dir), model, tokenizer)
    answers, prompts = load_answers(folder, domain.name, weights_fingerprint(model, tokenizer),
                                    cfg.ngram.distilled_tokens)
    held = set(domain.prompts)
    kept = [(a, p) for a, p in zip(answers, prompts, strict=True) if p not in held]
    if len(kept) < len(answers):
        from spec_adapters.app.log import log

        log(f"{len(answers) - len(kept)} distilled {domain.name} answers are to benchmark "
            "prompts (the domain's split changed since they were made): left out")
    save_token_lists(entry.path, [a for a, _ in kept], [p for _, p in kept])
    write_sidecar(entry)


# ------------------------------------------------------------------------------------------
# one builder per entry kind
# ------------------------------------------------------------------------------------------
@dataclass
class BuildContext:
    """What the entry builders share while one pool is built: the target, the config, the
    domains, every entry of the pool by name (an n-gram reads the answers entries) and the
    domains' training tokens (tokenised once, when the first entry needs them)."""

    model: Any
    tokenizer: Any
    cache_dir: Any
    cfg: PoolConfig
    domains: dict
    entries: dict[str, Entry]
    vocab_size: int

    @cached_property
    def tokens(self) -> dict[str, list[list[int]]]:
        """Each domain's training tokens: one drafter's budget, and the extras' windows."""
        budget = self.cfg.ngram.max_train_tokens * max(1, 1 + self.cfg.extra_shards)
        return domain_tokens(self.domains, self.tokenizer, budget)

    def ngram(self, entry: Entry, docs, answers=(), order: int | None = None) -> None:
        """:func:`save_ngram` with the pool's n-gram settings."""
        ng = self.cfg.ngram
        save_ngram(entry, docs, self.vocab_size, order or ng.ngram_order, answers,
                   ng.answer_weight, ng.context_weight)


def _build_answers(e: Entry, ctx: BuildContext) -> None:
    save_answers(e, ctx.model, ctx.tokenizer, ctx.domains[e.settings["domain"]], ctx.cfg,
                 ctx.cache_dir)


def _training_docs(e: Entry, ctx: BuildContext) -> list[list[int]]:
    """A specialist's own domain, or the generalist's (``domains`` in its settings) equal
    share of every domain, one drafter's budget."""
    budget = ctx.cfg.ngram.max_train_tokens
    docs = mix_domains(ctx.tokens, budget) if "domains" in e.settings \
        else ctx.tokens[e.settings["domain"]]
    return token_window(docs, budget)


def _build_ngram(e: Entry, ctx: BuildContext) -> None:
    domain = None if "domains" in e.settings else e.settings["domain"]
    ctx.ngram(e, _training_docs(e, ctx), answers_for(ctx.entries, ctx.cfg, domain))


def _build_union(e: Entry, ctx: BuildContext) -> None:
    budget = ctx.cfg.ngram.max_train_tokens
    docs = [x for d in ctx.cfg.domains for x in token_window(ctx.tokens[d], budget)]
    ctx.ngram(e, docs, answers_for(ctx.entries, ctx.cfg, "*"))


def _build_extra(e: Entry, ctx: BuildContext) -> None:
    """A later quarter-budget window of the domain's text per shard, no answers, the
    request's own n-grams left out."""
    d, s, budget = e.settings["domain"], e.settings["shard"], ctx.cfg.ngram.max_train_tokens
    docs = token_window(ctx.tokens[d], budget // 4, skip=budget + s * (budget // 4))
    save_ngram(e, docs or ctx.tokens[d], ctx.vocab_size, e.settings["order"])


def _build_head(e: Entry, ctx: BuildContext) -> None:
    save_head(e, ctx.model, _training_docs(e, ctx), ctx.cfg)


def _build_router(e: Entry, ctx: BuildContext) -> None:
    from spec_adapters.app.router import Router

    texts, labels = router_texts(ctx.domains, seed=ctx.cfg.seed)
    Router(list(ctx.cfg.domains)).fit(texts, labels).save(e.path)
    write_sidecar(e)


# entry kind -> the function that builds such an entry (and writes its sidecar)
BUILDERS: dict[str, Callable[[Entry, BuildContext], None]] = {
    "answers": _build_answers, "ngram": _build_ngram, "union": _build_union,
    "extra": _build_extra, "eagle": _build_head, "router": _build_router,
}
