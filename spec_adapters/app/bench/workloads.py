"""The benchmark's workloads beside the mixed stream: one where drafters should shine for
honest reasons, one where none should help.

``mixed``       the domains' held-out prompts as they are (the default).
``copy-edit``   requests whose answer mostly copies text given in the request, built from the
                same held-out prompts (never from drafter-training text): ``code-edit`` (a
                HumanEval stub rewritten under a new name, its docstring kept word for word),
                ``news-edit`` (a Brown corpus opening corrected, nothing else changed),
                ``news-quote`` (the same text summarised, quoting a sentence of it),
                ``math-edit`` (a word problem restated with new names, then solved).
``creative``    open creative writing (stories, poems, letters) on prompts written for this
                benchmark: nothing in the request or in the drafters' corpora predicts the
                answer, so speculation can only cost.
``completion``  the same held-out units as ``mixed``, as text to continue rather than requests
                (for a base model, which does not follow instructions): a HumanEval problem's
                signature and docstring, a Brown opening, ``Question: ...\nAnswer:``, a SQL
                comment ``-- To <task>:``, a dictionary headword ``<word>:``; each in the form
                of the domain's training text, and never wrapped in a chat template
                (:class:`~spec_adapters.app.domains.CompletionPrompt`).

:func:`workload_domains` returns ``{group: Domain}`` whose ``prompts`` are the workload's
requests, the shape every benchmark takes its prompts in, so a workload runs through
``hedgespec bench`` and ``hedgespec bench-vllm`` unchanged (``--workload``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from spec_adapters.app.domains import CompletionPrompt, Domain

__all__ = ["CREATIVE_PROMPTS", "WORKLOADS", "completion_prompts", "copy_edit_prompts",
           "workload_domains"]

WORKLOADS = ("mixed", "copy-edit", "creative", "completion")

CREATIVE_PROMPTS: dict[str, tuple[str, ...]] = {
    "story": (
        "Write a short story about a lighthouse keeper who finds a door in the rock.",
        "Write a short story in which a city's clocks all stop at the same minute.",
        "Write a short story about a child who trades a shadow for a kite.",
        "Write a short story about two rival bakers snowed in together.",
        "Write a short story told by a library book that nobody borrows.",
    ),
    "poem": (
        "Write a poem about the smell of rain on a hot street.",
        "Write a poem about an old dog waiting at a train station.",
        "Write a poem about the last apple on a winter tree.",
        "Write a poem about a bridge that remembers every traveller.",
        "Write a poem about the sound of a house at night.",
    ),
    "letter": (
        "Write a letter from a sailor to the sea, apologising for leaving.",
        "Write a letter from a houseplant to its forgetful owner.",
        "Write a letter to your future self, to be opened in twenty years.",
        "Write a letter from a retired robot to the factory that built it.",
        "Write a letter from the moon to the tides.",
    ),
}

_CODE = re.compile(r"```python\n(.*?)```", re.S)
_DEF = re.compile(r"^def (\w+)\(", re.M)
_QUOTED = re.compile(r'"(.+?)"')
_SQL_ASK = re.compile(r"^Write a PostgreSQL statement to (.+)\. Reply with the SQL in a code "
                      r"block\.$", re.S)


_AFTER_FORM = "a text after the instruction's blank line"


def _after_blank_line(prompt: str) -> str | None:
    """The text given in a ``"<instruction>\\n\\n<text>"`` prompt (news, math)."""
    _, sep, text = prompt.partition("\n\n")
    return text.strip() if sep and text.strip() else None


def _code_edit(prompt: str) -> str | None:
    code = _CODE.search(prompt)
    name = _DEF.search(code.group(1)) if code else None
    if name is None:
        return None
    return (f"Rewrite this Python function under the name `{name.group(1)}_v2` and implement "
            "it. Keep its docstring word for word. Reply with the full function in a Python "
            f"code block.\n\n```python\n{code.group(1)}```")


def _news_edit(prompt: str) -> str | None:
    text = _after_blank_line(prompt)
    return text and ("Correct any spelling and punctuation errors in this newspaper text and "
                     f"change nothing else. Reply with the whole corrected text.\n\n{text}")


def _news_quote(prompt: str) -> str | None:
    text = _after_blank_line(prompt)
    return text and ("Summarise this newspaper text in two sentences, then quote its most "
                     f"important sentence word for word.\n\n{text}")


def _math_edit(prompt: str) -> str | None:
    text = _after_blank_line(prompt)
    return text and ("Restate this word problem with every person's name replaced by \"Alex\", "
                     f"changing nothing else, then solve it step by step.\n\n{text}")


def _code_opening(prompt: str) -> str | None:
    code = _CODE.search(prompt)
    return code.group(1) if code and _DEF.search(code.group(1)) else None


def _question(prompt: str) -> str | None:
    text = _after_blank_line(prompt)
    return text and f"Question: {text}\nAnswer:"


def _sql_caption(prompt: str) -> str | None:
    task = _SQL_ASK.match(prompt)
    return task and f"-- To {task.group(1)}:\n"


def _headword(prompt: str) -> str | None:
    word = _QUOTED.search(prompt)
    return word and f"{word.group(1)}:"


# domain -> (its held-out prompt as text to continue, the form that prompt must have)
_COMPLETIONS: dict[str, tuple[Callable[[str], str | None], str]] = {
    "code": (_code_opening, "a ```python block holding a def"),
    "math": (_question, _AFTER_FORM), "news": (_after_blank_line, _AFTER_FORM),
    "sql": (_sql_caption, "\"Write a PostgreSQL statement to <task>. Reply ...\""),
    **{d: (_headword, "a quoted headword") for d in ("chemistry", "medicine", "biology")}}


def completion_prompts(domains: dict[str, Domain]) -> dict[str, list[CompletionPrompt]]:
    """The held-out prompts of ``domains`` as text to continue, ``domain -> prompts`` in
    their order (a prompt without its domain's form is left out).

    Raises
    ------
    ValueError
        A domain without a completion form, or none of its prompts has the form it reads (the
        domain's prompt builder changed).
    """
    out = {}
    for name, domain in domains.items():
        if name not in _COMPLETIONS:
            raise ValueError(f"the completion workload has no form for domain {name!r}")
        build, form = _COMPLETIONS[name]
        prompts = [CompletionPrompt(p) for p in map(build, domain.prompts) if p]
        if not prompts:
            raise ValueError(f"no {name} prompt has the form the completion workload reads "
                             f"({form})")
        out[name] = prompts
    return out


# group -> (the domain its texts come from, the request built from one held-out prompt, the
# form that prompt must have)
_COPY_EDIT: dict[str, tuple[str, Callable[[str], str | None], str]] = {
    "code-edit": ("code", _code_edit, "a ```python block holding a def"),
    "news-edit": ("news", _news_edit, _AFTER_FORM),
    "news-quote": ("news", _news_quote, _AFTER_FORM),
    "math-edit": ("math", _math_edit, _AFTER_FORM)}


def copy_edit_prompts(domains: dict[str, Domain]) -> dict[str, list[str]]:
    """The copy-and-edit requests, ``group -> prompts``, from the held-out prompts of the
    domains they need (``code``, ``news``, ``math``) in their order (a prompt without the
    group's form is left out).

    Raises
    ------
    ValueError
        A domain they need is not in ``domains``, or none of its prompts has the form a group
        reads (the domain's prompt builder changed).
    """
    missing = sorted({name for name, _, _ in _COPY_EDIT.values()} - set(domains))
    if missing:
        raise ValueError(f"the copy-edit workload needs the {', '.join(missing)} domain(s); "
                         f"got {sorted(domains)} (drop --domains or include them)")
    out = {}
    for group, (name, build, form) in _COPY_EDIT.items():
        prompts = [p for p in map(build, domains[name].prompts) if p]
        if not prompts:
            raise ValueError(f"no {name} prompt has the form {group} reads ({form})")
        out[group] = prompts
    return out


def workload_domains(domains: dict[str, Domain], workload: str) -> dict[str, Domain]:
    """The prompts of ``workload`` (:data:`WORKLOADS`) as ``{group: Domain}``, each group a
    "domain" of the benchmark's tables.

    Raises
    ------
    ValueError
        An unknown workload, or what :func:`copy_edit_prompts` raises.
    """
    if workload == "mixed":
        return domains
    if workload == "copy-edit":
        groups = copy_edit_prompts(domains)
        source = "copy-and-edit requests built from the held-out prompts"
    elif workload == "creative":
        groups = {g: list(ps) for g, ps in CREATIVE_PROMPTS.items()}
        source = "creative-writing prompts written for the benchmark"
    elif workload == "completion":
        groups = completion_prompts(domains)
        source = "the held-out prompts' units as text to continue"
    else:
        raise ValueError(f"unknown workload {workload!r}; expected one of {WORKLOADS}")
    return {g: Domain(g, train=[], prompts=ps, meta={"workload": workload, "source": source})
            for g, ps in groups.items()}
