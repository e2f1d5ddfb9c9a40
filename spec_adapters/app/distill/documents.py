"""The target's answers as head-training documents, and ``hedgespec cache-features``.

A document is the chat-templated prompt followed by the target's answer (and EOS when the
answer ended there, i.e. is shorter than the set's ``max_new_tokens``); the head is trained on
the answer's tokens only (``Document.start``), with the prompt as context, which is what it
sees when it drafts. Two sets:

- ``train``: the distilled answers (``<cache>/distilled/<target-id>/``, else the shipped
  ``data/distilled/<target-id>/``: 7 x ~52k answer tokens; answers to benchmark prompts are
  left out, as the pool does);
- ``heldout``: the target's greedy answers to the first ``per_domain`` benchmark prompts of
  every domain, generated now (:func:`~spec_adapters.app.distill.answers.answer_batch`): what
  head acceptance is measured on (never trained on).
"""

from __future__ import annotations

from pathlib import Path

from spec_adapters.eagle.features import Document

__all__ = ["answer_documents", "heldout_documents"]


def _document(tokenizer, prompt: str, answer: list[int], eos: int | None, max_new: int,
              label: str) -> Document:
    from spec_adapters.app.domains import chat_ids

    head = chat_ids(tokenizer, prompt).tolist()
    tail = list(answer) + ([eos] if eos is not None and len(answer) < max_new else [])
    return Document(tuple(head + tail), len(head), label)


def _eos(model) -> int | None:
    eos = model.generation_config.eos_token_id
    return eos[0] if isinstance(eos, list) else eos


def answer_documents(model, tokenizer, domains: dict, cache_dir: str | Path) -> list[Document]:
    """Every distilled answer of ``domains`` (name -> Domain) as a document, domain by domain:
    the answer set in ``<cache_dir>/distilled``, else the repository's (as the pool looks).

    Raises
    ------
    CacheError
        No answer set for this target, or one made by another (see ``load_answers``).
    """
    import json

    from spec_adapters.app.distill.answers import (
        find_answers,
        load_answers,
        shipped_dir,
        weights_fingerprint,
    )

    folder = find_answers([Path(cache_dir) / "distilled", shipped_dir()], model, tokenizer)
    manifest = folder / "manifest.json"
    settings = json.loads(manifest.read_text())["settings"] if manifest.is_file() else {}
    fingerprint = weights_fingerprint(model, tokenizer)
    docs = []
    for name, domain in domains.items():
        answers, prompts = load_answers(folder, name, fingerprint,
                                        settings.get("tokens_per_domain", 0))
        held = set(domain.prompts)
        docs += [_document(tokenizer, p, a, _eos(model), settings.get("max_new_tokens", 0), name)
                 for a, p in zip(answers, prompts, strict=True) if p not in held]
    return docs


def heldout_documents(model, tokenizer, domains: dict, per_domain: int = 5,
                      max_new_tokens: int = 256) -> list[Document]:
    """The target's greedy answers to the first ``per_domain`` benchmark prompts of each domain
    (generated now, batched), as documents."""
    from spec_adapters.app.distill.answers import answer_batch

    docs = []
    for name, domain in domains.items():
        prompts = domain.prompts[:per_domain]
        for p, a in zip(prompts, answer_batch(model, tokenizer, prompts, max_new_tokens),
                        strict=True):
            docs.append(_document(tokenizer, p, a, _eos(model), max_new_tokens, name))
    return docs
