"""What each drafter-pool entry is built from and how it is written: training tokens from the
domains' text within a budget (a specialist's own domain, the generalist's equal share of every
domain, the extras' later windows), the target's answers to training-side prompts
(self-distillation), the router's labelled snippets, and one writer per entry kind (n-gram,
EAGLE head, answers), each finishing with the entry's sidecar. The order and the choice of
entries: :func:`spec_adapters.app.pool.build_pool`."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterable
from typing import TYPE_CHECKING

from spec_adapters.app.pool_entries import Entry, write_sidecar
from spec_adapters.store.atomic import atomic_folder

if TYPE_CHECKING:
    from spec_adapters.app.pool_config import PoolConfig

__all__ = ["answers_for", "domain_tokens", "mix_domains", "router_texts", "save_answers",
           "save_head", "save_ngram", "token_window", "tokenize_budget"]


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
               answer_weight: float = 1.0) -> None:
    """An :class:`~spec_adapters.drafters.ngram.NGramDrafter` of ``order`` on ``docs`` (count
    weight 1) and ``answers`` (count weight ``answer_weight``), saved with its sidecar."""
    from spec_adapters.drafters.ngram import NGramDrafter

    answers = list(answers)
    kw = {"weights": [1.0] * len(docs) + [answer_weight] * len(answers)} if answers else {}
    drafter = NGramDrafter.from_corpus(list(docs) + answers, vocab_size, order=order,
                                       name=entry.name, **kw)
    drafter.save(entry.path)  # atomic (temporary file renamed)
    write_sidecar(entry)


def save_head(entry: Entry, model, docs, cfg: PoolConfig) -> None:
    """An EAGLE head trained on ``docs`` with ``cfg``'s head settings (checkpoints in
    ``<entry>.partial`` until done), saved with its sidecar."""
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
    write_sidecar(entry)


def save_answers(entry: Entry, model, tokenizer, domain, cfg: PoolConfig,
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
    write_sidecar(entry)

