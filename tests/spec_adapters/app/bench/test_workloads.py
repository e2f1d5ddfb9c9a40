"""The benchmark's workloads: copy-and-edit requests carry the held-out text they ask to copy,
creative prompts are groups of their own, completions are the held-out units as text to
continue (never in a chat template), and a workload that cannot be built says why."""

from __future__ import annotations

import pytest

from spec_adapters.app.bench.workloads import (
    CREATIVE_PROMPTS,
    WORKLOADS,
    completion_prompts,
    copy_edit_prompts,
    workload_domains,
)
from spec_adapters.app.domains import CompletionPrompt, Domain, chat_ids

CODE = ("Complete the following Python function. Reply with the full function in a Python code "
        "block.\n\n```python\ndef add(a, b):\n    \"\"\"Return a plus b.\"\"\"\n```")
NEWS = "Continue this newspaper report in the same style:\n\nThe mayor said the bridge opens today."
MATH = "Solve this math word problem step by step.\n\nAnna has 3 apples and buys 4 more."
SQL = "Write a PostgreSQL statement to drop the table films. Reply with the SQL in a code block."


def _domains(**prompts) -> dict[str, Domain]:
    return {name: Domain(name, train=["unused"], prompts=ps) for name, ps in prompts.items()}


def test_copy_edit_requests_quote_the_held_out_text_they_edit():
    doms = _domains(code=[CODE, "no code block here"], news=[NEWS], math=[MATH],
                    chemistry=["What is \"Baric\"?"])
    groups = copy_edit_prompts(doms)
    assert sorted(groups) == ["code-edit", "math-edit", "news-edit", "news-quote"]
    (code,) = groups["code-edit"]  # the prompt without a code block is left out
    assert "`add_v2`" in code and 'def add(a, b):\n    """Return a plus b."""' in code
    assert groups["news-edit"][0].endswith("The mayor said the bridge opens today.")
    assert "quote" in groups["news-quote"][0] and "bridge opens today" in groups["news-quote"][0]
    assert groups["math-edit"][0].endswith("Anna has 3 apples and buys 4 more.")
    assert all("Continue this" not in p and "Solve this" not in p
               for ps in groups.values() for p in ps)  # the instruction is replaced


def test_workload_domains_turn_each_group_into_a_domain_of_the_tables():
    doms = _domains(code=[CODE], news=[NEWS], math=[MATH])
    assert workload_domains(doms, "mixed") is doms
    edit = workload_domains(doms, "copy-edit")
    assert set(edit) == {"code-edit", "news-edit", "news-quote", "math-edit"}
    assert all(d.name == g and d.train == [] and d.meta["workload"] == "copy-edit"
               for g, d in edit.items())
    creative = workload_domains(doms, "creative")
    assert {g: tuple(d.prompts) for g, d in creative.items()} == CREATIVE_PROMPTS
    assert len({p for ps in CREATIVE_PROMPTS.values() for p in ps}) == 15
    assert WORKLOADS == ("mixed", "copy-edit", "creative", "completion")


def test_a_copy_edit_workload_without_its_domains_or_their_form_is_refused():
    with pytest.raises(ValueError, match=r"needs the news domain\(s\)"):
        copy_edit_prompts(_domains(code=[CODE], math=[MATH]))
    with pytest.raises(ValueError, match="no math prompt has the form math-edit reads"):
        copy_edit_prompts(_domains(code=[CODE], news=[NEWS], math=["one line, no text"]))
    with pytest.raises(ValueError, match="unknown workload 'poetry'"):
        workload_domains({}, "poetry")


def test_completions_are_the_held_out_units_in_their_training_texts_form():
    doms = _domains(code=[CODE, "no code block here"], news=[NEWS], math=[MATH], sql=[SQL],
                    chemistry=['What is "Baric"? Answer as an expert in chemistry.'],
                    biology=['In biology, what does the term "Parr" mean? Explain briefly.'])
    groups = completion_prompts(doms)
    assert groups == {"code": ['def add(a, b):\n    """Return a plus b."""\n'],
                      "news": ["The mayor said the bridge opens today."],
                      "math": ["Question: Anna has 3 apples and buys 4 more.\nAnswer:"],
                      "sql": ["-- To drop the table films:\n"],
                      "chemistry": ["Baric:"], "biology": ["Parr:"]}
    assert all(isinstance(p, CompletionPrompt) for ps in groups.values() for p in ps)
    as_domains = workload_domains(doms, "completion")
    assert {g: d.prompts for g, d in as_domains.items()} == groups
    assert all(d.meta["workload"] == "completion" for d in as_domains.values())


class _ChatTokenizer:
    """Characters as token ids, with a chat template that wraps a user turn in brackets."""

    chat_template = "[{{ user }}]"

    def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
        return f"[{msgs[-1]['content']}]>"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


def test_a_completion_is_tokenized_as_it_stands_and_a_request_in_the_chat_template():
    tok = _ChatTokenizer()
    assert chat_ids(tok, "Baric:").tolist() == [ord(c) for c in "[Baric:]>"]
    assert chat_ids(tok, CompletionPrompt("Baric:")).tolist() == [ord(c) for c in "Baric:"]


def test_a_completion_workload_without_a_form_for_its_domains_is_refused():
    with pytest.raises(ValueError, match="no form for domain 'poetry'"):
        completion_prompts(_domains(poetry=["Write a poem."]))
    with pytest.raises(ValueError, match="no sql prompt has the form the completion workload"):
        completion_prompts(_domains(sql=["How do I drop a table?"]))
