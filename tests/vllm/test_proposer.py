"""HedgeSpecProposer against a simulated vLLM step loop (no vLLM needed; numpy + the pool's
n-gram files). The simulation follows vLLM's contract for ``custom_class`` proposers: rows are
condensed and reordered as requests finish and arrive, a row's buffer holds its prompt plus
verified tokens, and ``sampled_token_ids`` are the accepted draft prefix plus the bonus token
of a greedy target."""

from __future__ import annotations

import hashlib
import json
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from spec_adapters.drafters.point import PointDrafter
from spec_adapters.drafters.pool_folder import load_pool_folder
from spec_adapters.selection.abstention import expected_gains
from spec_adapters.selection.costs import TokenRate
from spec_adapters.store.pool_settings import NGramPoolSettings
from spec_adapters.vllm.config import ProposerConfig, load_config
from spec_adapters.vllm.proposer import HedgeSpecProposer
from tests.vllm.pool_files import write_pool

V = 256


def _table(seed: int) -> np.ndarray:
    """A greedy 'target': next token = table[last token] (a random permutation: long cycles,
    so copying from the request's own past rarely helps)."""
    return np.random.default_rng(seed).permutation(V)


def _generate(table: np.ndarray, prompt: list[int], n: int) -> list[int]:
    out = list(prompt)
    for _ in range(n):
        out.append(int(table[out[-1]]))
    return out[len(prompt):]


class FakeEngine:
    """vLLM's synchronous step loop for one proposer; rows reorder every step."""

    def __init__(self, proposer, max_len: int = 512, seed: int = 0) -> None:
        self.proposer, self.max_len = proposer, max_len
        self.rng = np.random.default_rng(seed)
        self.reqs: dict[str, dict] = {}

    def add(self, name: str, prompt: list[int], table: np.ndarray, max_tokens: int) -> None:
        # prefill: the first step samples one token, no draft yet
        self.reqs[name] = {"tokens": [*prompt, int(table[prompt[-1]])], "table": table,
                           "draft": [], "sampled": [int(table[prompt[-1]])], "left":
                           max_tokens - 1, "prompt_len": len(prompt)}

    def step(self) -> None:
        names = [n for n, r in self.reqs.items() if r["sampled"]]
        self.rng.shuffle(names)
        buf = np.zeros((len(names) + 2, self.max_len), np.int32)  # spare rows, like vLLM
        nt = np.zeros(len(names) + 2, np.int32)
        for row, n in enumerate(names):
            toks = self.reqs[n]["tokens"]
            buf[row, :len(toks)], nt[row] = toks, len(toks)
        self.last_rows = sorted(int(x) for x in nt[:len(names)])
        drafts = self.proposer.propose([self.reqs[n]["sampled"] for n in names], nt, buf)
        assert len(drafts) == len(names)
        for n, d in zip(names, drafts, strict=True):
            r = self.reqs[n]
            accepted = []
            for t in d:  # greedy verification of the draft
                if r["left"] - len(accepted) <= 1 or t != r["table"][([*r["tokens"],
                                                                        *accepted])[-1]]:
                    break
                accepted.append(int(t))
            bonus = int(r["table"][([*r["tokens"], *accepted])[-1]])
            new = [*accepted, bonus][:max(r["left"], 0)]
            r["tokens"] += new
            r["left"] -= len(new)
            r["sampled"] = new if r["left"] > 0 else []

    def output(self, name: str) -> list[int]:
        r = self.reqs[name]
        return r["tokens"][r["prompt_len"]:]


def _ngram_file(folder: Path, name: str, docs: list[list[int]]) -> None:
    from spec_adapters.drafters.ngram import NGramDrafter

    NGramDrafter.from_corpus(docs, V, order=3, name=name).save(folder / f"ngram-{name}.npz")


def _proposer(tmp_path: Path, **settings) -> HedgeSpecProposer:
    cfg = ProposerConfig(**settings, source="test")
    return HedgeSpecProposer.standalone(cfg, vocab_size=V, max_k=4, max_model_len=512)


# ------------------------------------------------------------------------------ drafters
def test_pool_folder_rejects_missing_folder_and_foreign_vocabulary(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_pool_folder(tmp_path / "nope", V)
    with pytest.raises(ValueError, match=r"holds no n-gram pool of the settings .*; it holds no "
                                         r"n-gram pool$"):
        load_pool_folder(tmp_path, V)
    _ngram_file(tmp_path, "a", [[1, 2, 3, 4]])  # a bare file: no sidecar, no settings key
    with pytest.raises(ValueError, match=r"it holds no n-gram pool$"):
        load_pool_folder(tmp_path, V)
    pool = write_pool(tmp_path, V, {"a": [[1, 2, 3, 4]]}, ngram_order=3)
    assert [d.name for d in load_pool_folder(tmp_path, V, pool)] == ["ngram-a", "ngram-general"]
    with pytest.raises(ValueError, match=r"a vocabulary of 300 tokens; it holds pools of other "
                                         r"settings: ngram-general-[0-9a-f]{10} "
                                         r"\(\{'target_vocab': 256\}\)"):
        load_pool_folder(tmp_path, 300, pool)


def test_default_pool_settings_are_train_drafters_defaults():
    """The proposer's default pool is the one ``hedgespec train-drafters`` builds without
    options, and its entry names are those the application writes; the key of one entry is
    recomputed by hand from the settings it stands for (caches already on disk keep their
    names)."""
    from spec_adapters.app.pool.cache import _entries
    from spec_adapters.app.pool.config import PoolConfig

    cfg = PoolConfig()
    assert cfg.ngram == NGramPoolSettings()  # the application holds the library's settings
    app = {e.name: e.key for e in _entries(cfg, Path("/pool"), 49152) if e.kind == "ngram"}
    ours = NGramPoolSettings().entries(49152)
    assert list(ours) == list(app)
    settings = {"target_vocab": 49152, "order": 4, "tokens": 300_000, "domain": "code",
                "answers": {"distilled_tokens": 50_000, "weight": 1.0}, "context_weight": 4.0}
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    assert ours["ngram-code"] == settings and app["ngram-code"] == f"ngram-code-{h}"


def _pools(tmp_path: Path):
    """Two pools in one folder: same domain names, other corpora and settings."""
    ta, tb = _table(21), _table(22)

    def docs(t, s):
        return [[s, *_generate(t, [s], 60)]]

    first = write_pool(tmp_path, V, {"code": docs(ta, 3), "math": docs(ta, 4)}, ngram_order=3)
    second = write_pool(tmp_path, V, {"code": docs(tb, 3), "math": docs(tb, 4)}, ngram_order=2,
                        max_train_tokens=1000)
    return (first, ta), (second, tb)


def test_two_pools_of_different_settings_in_one_folder_are_not_mixed(tmp_path):
    pools = _pools(tmp_path)
    assert len(list(tmp_path.glob("ngram-*.npz"))) == 6
    for settings, table in pools:
        drafters = load_pool_folder(tmp_path, V, settings)
        assert [d.name for d in drafters] == ["ngram-code", "ngram-math", "ngram-general"]
        assert [d.order for d in drafters] == [settings.ngram_order] * 3
        for d, start in zip(drafters[:2], (3, 4), strict=True):  # each drafts its own corpus
            assert d.draft(np.array([start]), 5).tolist() == _generate(table, [start], 5)
    other = NGramPoolSettings(domains=("code", "math"), ngram_order=5)
    with pytest.raises(ValueError, match=r"it holds pools of other settings: "
                                         r"ngram-general-\w+ \(\{'order': [23]"):
        load_pool_folder(tmp_path, V, other)


def _bit_flip(path: Path, other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _swap(path: Path, other: Path) -> None:
    path.write_bytes(other.read_bytes())


def _no_sidecar(path: Path, other: Path) -> None:
    path.with_suffix(".json").unlink()


@pytest.mark.parametrize(("damage", "problem"), [
    (_bit_flip, "does not match its checksum"),
    (_swap, r"(does not match its checksum|has \d+ bytes, its manifest says \d+)"),
    (_no_sidecar, "is missing or unreadable"),
])
def test_damaged_npz_is_refused_naming_the_file(tmp_path, damage, problem):
    (settings, _), _ = _pools(tmp_path)
    assert len(load_pool_folder(tmp_path, V, settings)) == 3  # verified once (fast path)
    key = {p.stem.rsplit("-", 1)[0]: p for p in tmp_path.glob("ngram-*.npz")
           if json.loads(p.with_suffix(".json").read_text())["settings"]["order"] == 3}
    damage(key["ngram-code"], key["ngram-math"])
    with pytest.raises(ValueError, match=re.escape(str(key["ngram-code"].with_suffix(
            ".json" if damage is _no_sidecar else ".npz"))) + " " + problem):
        load_pool_folder(tmp_path, V, settings)
    with pytest.raises(ValueError, match=r"HEDGESPEC_VLLM_CONFIG \(test\): .*ngram-code-"):
        _proposer(tmp_path, pool=str(tmp_path), pool_settings=settings)


# ------------------------------------------------------------------------------ settings
@pytest.mark.parametrize(("text", "match"), [
    ("{not json", "malformed JSON"),
    ('{"policy": "bestever"}', "unknown policy 'bestever'"),
    ('{"pool": "/no/such/pool"}', "pool folder /no/such/pool does not exist"),
    ('{"polcy": "hedge"}', r"unknown keys \['polcy'\]"),
    ('{"k": 0}', "k must be an integer >= 1"),
    ("[1, 2]", "expected a JSON object"),
    ('{"pool": 3}', "pool must be a folder name or null, got 3"),
    ('{"pool_settings": {"domains": []}}', "pool_settings: domains must be distinct non-empty"),
    ('{"pool_settings": {"order": 3}}', r"pool_settings: unknown keys \['order'\]"),
    ('{"pool_settings": [3]}', "pool_settings: expected an object, got list"),
    ('{"probe": 1.5}', r"probe must be a number in \[0, 1\]"),
    ('{"explore_steps": 1}', r"explore_steps must be a number in \[0, 1\)"),
    ('{"step_costs": {"step_s": 0.1}}', "step_costs must have the keys"),
    ('{"step_costs": {"step_s": 0.1, "row_s": -1, "draft_s": 0}}', "finite seconds >= 0"),
    ('{"stats": 3}', "stats must be a file name or null, got 3"),
])
def test_bad_settings_name_the_problem(tmp_path, text, match):
    path = tmp_path / "cfg.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config({"HEDGESPEC_VLLM_CONFIG": str(path)})


def test_k_above_vllm_limit_and_fixed_index_out_of_range_fail_at_setup(tmp_path):
    with pytest.raises(ValueError, match="k=6 exceeds vLLM's num_speculative_tokens=4"):
        _proposer(tmp_path, k=6)
    with pytest.raises(ValueError, match="fixed:9 is out of range for 6 drafters"):
        _proposer(tmp_path, policy="fixed:9")


# ------------------------------------------------------------------------------ the loop
def test_outputs_equal_greedy_and_states_follow_reordered_rows(tmp_path):
    prop = _proposer(tmp_path, idle_steps=3)
    eng = FakeEngine(prop)
    rng = np.random.default_rng(0)
    tables, prompts = {}, {}
    for j in range(10):  # staggered arrivals, different lengths: rows condense and reorder
        name = f"r{j}"
        tables[name] = _table(j % 3)
        prompts[name] = rng.integers(0, V, size=int(rng.integers(4, 30))).tolist()
        eng.add(name, prompts[name], tables[name], max_tokens=int(rng.integers(10, 60)))
        eng.step()
    while any(r["sampled"] for r in eng.reqs.values()):
        eng.step()
        # every row of the step has exactly one state, holding exactly its tokens
        live = [st for st in prop.states.values() if st.idle == 0]
        assert sorted(st.n_tokens for st in live) == eng.last_rows
    for name in eng.reqs:
        want = _generate(tables[name], prompts[name], len(eng.output(name)))
        assert eng.output(name) == want
    assert prop._next_uid == 10  # one state per request, never re-created mid-request
    for _ in range(5):
        prop.propose([], np.zeros(0, np.int32), np.zeros((0, 512), np.int32))
    assert prop.states == {}  # finished requests are freed


def test_requests_in_one_batch_learn_their_own_drafter(tmp_path):
    ta, tb = _table(11), _table(12)
    rng = np.random.default_rng(1)
    pool = write_pool(tmp_path, V, {
        "a": [_generate(ta, [int(s)], 200) for s in rng.integers(0, V, 8)],
        "b": [_generate(tb, [int(s)], 200) for s in rng.integers(0, V, 8)]}, ngram_order=3)
    trace = tmp_path / "trace.jsonl"
    prop = _proposer(tmp_path, pool=str(tmp_path), pool_settings=pool, trace=str(trace))
    eng = FakeEngine(prop)
    kind_of = {}
    for j in range(6):
        prompt = rng.integers(0, V, size=6).tolist()
        kind_of[tuple(prompt)] = "ab"[j % 2]
        eng.add(f"{'ab'[j % 2]}{j}", prompt, (ta, tb)[j % 2], 120)
    while any(r["sampled"] for r in eng.reqs.values()):
        eng.step()
    last: dict[int, dict] = {}
    steps: dict[float, list[int]] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        last[rec["req"]] = rec
        steps.setdefault(rec["t"], []).append(rec["req"])
        assert rec["gain_ms"] is None or rec["k"] == 0 or rec["gain_ms"] > 0, rec
    assert len(last) == 6
    # one line per request per step, the step's clock on each
    assert all(len(reqs) == len(set(reqs)) for reqs in steps.values())
    assert max(len(reqs) for reqs in steps.values()) == 6
    for rec in last.values():
        best = max(rec["weights"], key=rec["weights"].get)
        assert best == f"ngram-{kind_of[tuple(rec['head'][:6])]}", rec["weights"]
    for name, r in eng.reqs.items():
        assert eng.output(name) == _generate(r["table"], r["tokens"][:6], 120)


def test_memory_per_request_is_bounded(tmp_path):
    prop = _proposer(tmp_path)
    eng = FakeEngine(prop, max_len=2048)
    eng.add("long", list(range(10)), _table(5), max_tokens=1500)
    tracemalloc.start()
    sizes = []
    for step in range(400):
        eng.step()
        if step in (50, 399):
            sizes.append(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    (st,) = prop.states.values()
    assert len(st.session.book.open_rounds) <= prop.K
    assert sizes[1] - sizes[0] < 64 * 1024, sizes  # flat: no growth with the request's length


# ------------------------------------------------------------------------------ suffix memory
def test_suffix_memory_learns_from_finished_requests_and_stays_under_its_cap(tmp_path):
    prop = _proposer(tmp_path, pool=None, prompt_lookup=(), policy="fixed:0", idle_steps=1,
                     suffix_max_tokens=300)
    assert prop.names == ["suffix"] and prop.suffix.index.max_tokens == 300
    table, prompt = _table(7), list(range(20, 32))
    steps = []
    for run in range(2):
        eng = FakeEngine(prop, seed=run)
        eng.add("r", prompt, table, max_tokens=100)
        n = 0
        while eng.reqs["r"]["sampled"]:
            eng.step()
            n += 1
        assert eng.output("r") == _generate(table, prompt, 100)
        steps.append(n)
        for _ in range(3):  # the request is gone: its state is freed, its tokens committed
            prop.propose([], np.zeros(0, np.int32), np.zeros((0, 512), np.int32))
        assert prop.states == {} and prop.suffix.index.n_sequences == run + 1
        (stored, *_) = prop.suffix.index.sequences()
        full = [*prompt, *eng.output("r")]
        assert stored.tolist() == full[:len(stored)] and len(stored) >= len(full) - prop.K - 1
    assert steps[1] < steps[0] / 3, steps  # the second request copies the first one's answer
    for j in range(6):  # more requests: the oldest are evicted, the memory stays under its cap
        eng = FakeEngine(prop, seed=j)
        eng.add("r", [j, j + 1], _table(j), max_tokens=150)
        while eng.reqs["r"]["sampled"]:
            eng.step()
        for _ in range(3):
            prop.propose([], np.zeros(0, np.int32), np.zeros((0, 512), np.int32))
        assert prop.suffix.index.n_tokens <= 300
        assert prop.suffix.index.nbytes <= 12 * 300 + 4
    assert _proposer(tmp_path, suffix=False).names == [
        *(f"prompt-lookup-{n}" for n in range(1, 5)), "consensus"]


@pytest.mark.parametrize(("text", "match"), [
    ('{"suffix": "yes"}', "suffix must be true or false, got 'yes'"),
    ('{"consensus": 1}', "consensus must be true or false, got 1"),
    ('{"suffix_max_tokens": 0}', "suffix_max_tokens must be an integer >= 1, got 0"),
    ('{"pool": null, "prompt_lookup": [], "suffix": false}', "no drafters"),
])
def test_bad_suffix_settings_name_the_problem(tmp_path, text, match):
    path = tmp_path / "cfg.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config({"HEDGESPEC_VLLM_CONFIG": str(path)})


# ------------------------------------------------------------------------------ default pool
def test_default_pool_is_the_folder_the_application_builds_and_is_loaded(tmp_path,
                                                                         monkeypatch):
    from transformers import AutoTokenizer, LlamaForCausalLM

    from spec_adapters.app.pool.cache import pool_dir
    from spec_adapters.store.target_pool import pool_folder
    from tests.vllm.engine_run import tiny_llama, tiny_tokenizer

    model_dir = tiny_tokenizer(tiny_llama(tmp_path / "tiny", vocab_size=V), vocab_size=V)
    cache = tmp_path / "cache"
    want = pool_dir(cache, LlamaForCausalLM.from_pretrained(model_dir),
                    AutoTokenizer.from_pretrained(model_dir))
    assert pool_folder(model_dir, cache) == want
    monkeypatch.setenv("HEDGESPEC_CACHE", str(cache))
    assert pool_folder(model_dir) == want

    def proposer(**settings):
        return HedgeSpecProposer.standalone(ProposerConfig(**settings, source="test"),
                                            vocab_size=V, max_k=4, max_model_len=512,
                                            model_folder=str(model_dir))

    assert proposer().names == [*(f"prompt-lookup-{n}" for n in (1, 2, 3, 4)), "suffix",
                                "consensus"]
    write_pool(want, V, {d: [[1, 2, 3, 4]] for d in NGramPoolSettings().domains})
    assert proposer().names[5:] == [*(f"ngram-{d}" for d in NGramPoolSettings().domains),
                                    "ngram-general", "consensus"]
    assert proposer(pool=None).names[-2:] == ["suffix", "consensus"]
    assert proposer(cache_dir=str(tmp_path / "elsewhere")).names[-2] == "suffix"
    assert proposer(consensus=False).names[-1] == "ngram-general"


def _run_pool(tmp_path: Path, **settings) -> tuple[HedgeSpecProposer, list[dict], list]:
    """Four requests whose greedy continuations a pool drafter knows by heart, traced."""
    table = _table(11)
    rng = np.random.default_rng(1)
    pool = write_pool(tmp_path / "pool", V, {
        "a": [_generate(table, [int(s)], 200) for s in range(V)]}, ngram_order=3)
    trace = tmp_path / "trace.jsonl"
    prop = _proposer(tmp_path, pool=str(tmp_path / "pool"), pool_settings=pool,
                     trace=str(trace), stats=str(tmp_path / "stats.json"), **settings)
    counters = _counted(prop)
    eng = FakeEngine(prop)
    for j in range(4):
        eng.add(f"r{j}", rng.integers(0, V, size=6).tolist(), table, 100)
    while any(r["sampled"] for r in eng.reqs.values()):
        eng.step()
    for name, r in eng.reqs.items():
        assert eng.output(name) == _generate(table, r["tokens"][:6], 100)
    prop.stats.write()
    recs = [json.loads(line) for line in trace.open()]
    return prop, recs, counters


def test_where_no_draft_pays_the_proposer_stops_drafting_and_counterfactual_drafting(
        tmp_path):
    prop, recs, counters = _run_pool(tmp_path, step_costs=(0.0, 0.0, 10.0))
    by_req: dict[int, list[int]] = {}
    for r in recs:
        by_req.setdefault(r["req"], []).append(r["k"])
    for ks in by_req.values():  # once the first round is scored (K steps), never again
        assert sum(ks[prop.K + 1:]) == 0 and len(ks) > 50, ks
    evaluated = prop.rounds["evaluated"]
    assert evaluated < 0.25 * prop.stats.rows  # the probe share, not every round
    assert prop.rounds["played"] < 0.25 * prop.stats.rows  # the others play no round at all
    assert sum(c.calls for c in counters) <= evaluated * len(counters) + 4 * (prop.K + 1)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["rows_drafted"] == sum(1 for r in recs if r["k"])
    assert stats["steps_drafted"] <= prop.K + 1 < stats["steps"]
    assert stats["step_model"]["draft_s"] == 10.0


def test_a_step_drafts_only_where_its_rows_gains_together_pay_for_speculating(tmp_path):
    """c is the step's, paid once if any row drafts: 4 + 5 ms of gains do not cover 10 ms, 4
    + 5 + 2 do; a row with no estimate yet, or the price ablated, lets the step draft."""
    prop = _proposer(tmp_path, step_costs=(0.0, 0.0, 0.0, 0.010))
    g = [np.array([[0.0, 0.004]]), np.array([[0.0, -0.002], [0.0, 0.005]])]
    assert not prop._step_drafts(g, decode=True)
    assert prop._step_drafts([*g, np.array([[0.0, 0.002]])], decode=True)
    assert prop._step_drafts([*g, None], decode=True)
    assert _proposer(tmp_path, step_costs=(0.0, 0.0, 0.0, 0.010),
                     drafting_price=False)._step_drafts(g, decode=True)
    # end to end: drafts free, speculating at all dearer than any gain: nothing drafted once
    # the first rounds are scored, and every output still the target's
    prop, recs, _counters = _run_pool(tmp_path, step_costs=(0.0, 0.0, 0.0, 10.0))
    by_req: dict[int, list[int]] = {}
    for r in recs:
        by_req.setdefault(r["req"], []).append(r["k"])
    assert all(sum(ks[prop.K + 1:]) == 0 for ks in by_req.values()), by_req


def test_a_share_of_decode_steps_explores_without_drafts_where_the_model_is_learned(
        tmp_path):
    """Forced while the recent share of steps without drafts is below explore_steps."""
    rich = [np.array([[0.0, 1.0]])]  # a gain that pays whatever c is
    prop = _proposer(tmp_path, explore_steps=0.2)
    quiet = sum(not prop._step_drafts(rich, decode=True) for _ in range(2000))
    assert abs(quiet - 400) < 4 * (2000 * 0.2 * 0.8) ** 0.5  # binomial(2000, 0.2)
    assert all(prop._step_drafts(rich, decode=False) for _ in range(200))  # prefill steps
    prop.quiet = 0.25  # steps without drafts already common: nothing forced
    assert all(prop._step_drafts(rich, decode=True) for _ in range(200))
    pinned = _proposer(tmp_path, explore_steps=0.2, step_costs=(0.0, 0.0, 0.0))
    assert all(pinned._step_drafts(rich, decode=True) for _ in range(200))
    bandit = _proposer(tmp_path, explore_steps=0.2, policy="exp3spec")
    assert all(bandit._step_drafts(rich, decode=True) for _ in range(200))


def test_where_drafts_are_free_the_proposer_keeps_drafting_its_best_drafter(tmp_path):
    prop, recs, _counters = _run_pool(tmp_path, step_costs=(0.0, 0.0, 0.0))
    late = [r for r in recs if r["n"] > 60]
    assert late and sum(r["k"] > 0 for r in late) > 0.8 * len(late)
    stats = json.loads((tmp_path / "stats.json").read_text())
    best = max(stats["drafters"], key=lambda n: stats["drafters"][n]["acceptance"] or 0)
    assert best == "ngram-a" and stats["drafters"]["ngram-a"]["acceptance"] == pytest.approx(
        prop.K, abs=0.3)  # it knows every continuation
    assert stats["drafters"]["ngram-a"]["chosen_share"] > 0.5
    assert stats["steps"] == prop.stats.steps and 0 < stats["overhead"] <= 1


# ------------------------------------------------------------------------------ feedback budget
class _Counting(PointDrafter):
    """A drafter proxy counting its draft calls."""

    def __init__(self, drafter) -> None:
        self.inner, self.name, self.calls = drafter, drafter.name, 0

    def propose(self, history, k):
        self.calls += 1
        return self.inner.propose(history, k)


def _counted(prop: HedgeSpecProposer) -> list[_Counting]:
    prop.drafters = [_Counting(d) for d in prop.drafters]
    return prop.drafters


def _run(prop: HedgeSpecProposer, n_requests: int = 4, max_tokens: int = 80) -> FakeEngine:
    eng = FakeEngine(prop)
    rng = np.random.default_rng(3)
    for j in range(n_requests):
        eng.add(f"r{j}", rng.integers(0, V, size=8).tolist(), _table(j), max_tokens)
    while any(r["sampled"] for r in eng.reqs.values()):
        eng.step()
    for name, r in eng.reqs.items():
        assert eng.output(name) == _generate(r["table"], r["tokens"][:8], max_tokens)
    return eng


def test_evaluation_probability_keeps_counterfactual_drafting_within_its_budget(tmp_path):
    prop = _proposer(tmp_path, feedback_budget=0.05)
    assert prop.evaluation_probability(16) == 1.0  # nothing measured yet
    prop.step_s, prop.drafting_s = 0.1, 0.01
    assert prop.evaluation_probability(16) == pytest.approx(0.05 * 0.1 / (16 * 0.01))
    assert prop.evaluation_probability(1) == pytest.approx(0.5)
    prop.drafting_s = 1e-5
    assert prop.evaluation_probability(16) == 1.0


def test_evaluation_gets_what_the_proposers_other_work_leaves_of_its_time_budget(tmp_path):
    prop = _proposer(tmp_path, feedback_budget=0.02, time_budget=0.03)
    prop.step_s, prop.drafting_s, prop.scoring_s = 0.1, 0.001, 0.001
    full = prop.evaluation_probability(16)
    assert full == pytest.approx(0.02 * 0.1 / (16 * 0.002))  # nothing else measured yet
    prop.rest_s = 0.0005  # 0.5% of the step: the evaluations keep their 2%
    assert prop.evaluation_probability(16) == pytest.approx(full)
    prop.rest_s = 0.0015  # 1.5%: 1.5% left for them
    assert prop.evaluation_probability(16) == pytest.approx(0.015 * 0.1 / (16 * 0.002))
    prop.rest_s = 0.01  # 10%: the floor, a quarter of feedback_budget, keeps the learner fed
    assert prop.evaluation_probability(16) == pytest.approx(full / 4)


def test_the_proposer_measures_its_time_outside_evaluation(tmp_path):
    prop = _proposer(tmp_path)
    _run(prop)
    assert prop.rest_s is not None and 0 < prop.rest_s < 0.05


@pytest.mark.parametrize("budget", [0, 1.5, True, "x"])
def test_bad_time_budget_names_the_problem(tmp_path, budget):
    with pytest.raises(ValueError, match="time_budget must be a number in"):
        _proposer(tmp_path, time_budget=budget)


def test_rounds_left_unevaluated_are_censored_and_outputs_stay_greedy(tmp_path, monkeypatch):
    # rounds that abstain are scored as often; no consensus: every drafter's own call counted
    prop = _proposer(tmp_path, probe=1.0, consensus=False)
    counters = _counted(prop)
    monkeypatch.setattr(prop, "evaluation_probability", lambda n_rows: 0.25)
    _run(prop)
    played, full, rows = prop.rounds["played"], prop.rounds["evaluated"], prop.stats.rows
    assert 0.12 < full / rows < 0.4, (full, rows)  # ~25% of the request-steps evaluated
    # every drafter drafts in an evaluated round, in the others the played one at most (none
    # where the played length is 0)
    calls = sum(c.calls for c in counters)
    assert full * len(counters) <= calls <= full * len(counters) + (played - full)
    for st in prop.states.values():  # the finished requests' states, not yet freed
        assert len(st.session.policy.outstanding) <= prop.K  # every other round fed or censored


def test_a_bandit_policy_drafts_with_the_played_drafter_only(tmp_path):
    # K tokens, as published; no consensus, whose solo draft is its members' drafts
    prop = _proposer(tmp_path, policy="exp3spec", cost_aware=False, consensus=False)
    counters = _counted(prop)
    _run(prop)
    assert prop.rounds["evaluated"] == 0
    assert sum(c.calls for c in counters) == prop.rounds["played"]  # one draft per round


@pytest.mark.parametrize("budget", [0, 1.5, True, "x"])
def test_bad_feedback_budget_names_the_problem(tmp_path, budget):
    with pytest.raises(ValueError, match="feedback_budget must be a number in"):
        _proposer(tmp_path, feedback_budget=budget)


@pytest.mark.parametrize("rules", [[0.5], [0.0, 1.0], "x"])
def test_bad_stop_rules_name_the_problem(tmp_path, rules):
    with pytest.raises(ValueError, match="stop-rule thresholds"):
        _proposer(tmp_path, stop_rules=rules)


def test_stop_rules_set_the_expert_family_and_fixed_plays_the_full_length(tmp_path):
    """(drafter, rule) experts: 1 + 3 K rules with three thresholds; [0] alone is the
    (drafter, k) family; fixed:<i> plays drafter i with its whole draft (no rules)."""
    prop = _proposer(tmp_path, pool=None, prompt_lookup=(1, 2), suffix=False, consensus=False,
                     stop_rules=(0.0, 0.5, 0.8))
    assert prop.n_experts == 2 * (1 + 3 * prop.K)
    assert _proposer(tmp_path, pool=None, prompt_lookup=(1, 2), suffix=False, consensus=False,
                     stop_rules=(0.0,)).n_experts == 2 * (prop.K + 1)
    fixed = _proposer(tmp_path, pool=None, prompt_lookup=(1, 2), suffix=False, consensus=False,
                      policy="fixed:1")
    assert fixed.rules is None and fixed.n_experts == 2  # the drafters, K tokens each
    fixed.propose([[3]], np.array([21]), np.array([[*range(20), 3] * 2]))
    (st,) = fixed.states.values()
    assert st.session.play(st.rng).drafter == 1


def test_a_learner_whose_rounds_are_never_evaluated_is_never_fed(tmp_path, monkeypatch):
    prop = _proposer(tmp_path, trace=str(tmp_path / "trace.jsonl"))
    monkeypatch.setattr(prop, "evaluation_probability", lambda n_rows: 0.0)
    _run(prop, n_requests=2)
    weights = [json.loads(line)["weights"] for line in (tmp_path / "trace.jsonl").open()]
    assert all(len(set(w.values())) == 1 for w in weights)  # uniform throughout: censored


# ------------------------------------------------------------------------ prior from the stream
def test_a_new_request_starts_from_the_streams_weights_shrunk_to_prior_rounds(tmp_path):
    prop = _proposer(tmp_path, prior_rounds=8, probe=1.0, feedback_budget=1.0,
                     time_budget=1.0)  # all scored
    _run(prop, n_requests=3)
    stream = prop.stream.learner
    assert stream.t > 8 and len(set(np.round(stream.weights, 12))) > 1  # it learned something
    first = prop._policy().learner
    assert first.t == 8
    np.testing.assert_allclose(first.R, stream.R * 8 / stream.t)
    np.testing.assert_allclose(first.weights, stream.weights, atol=1e-12)  # scale-invariant
    before = stream.state_dict()
    first.update(np.linspace(0, 1, prop.n_experts))  # the copy is the request's own
    assert stream.state_dict() == before


def test_without_a_prior_every_request_starts_uniform(tmp_path):
    for settings in ({"prior_rounds": 0}, {"policy": "hedge"}):
        prop = _proposer(tmp_path, **settings)
        _run(prop, n_requests=2)
        assert prop.stream.learner is None
        assert prop._policy().learner.t == 0


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_prior_rounds_names_the_problem(tmp_path, value):
    with pytest.raises(ValueError, match="prior_rounds must be an integer >= 0"):
        _proposer(tmp_path, prior_rounds=value)


def test_twin_requests_keep_their_own_states_when_one_fits_the_others_draft(tmp_path):
    # two requests with the same prompt and answer, drafts [5, 6, 7] and [5, 9]: the second
    # accepts 5 and samples 6 (its 9 rejected), the first accepts 5, 6 and samples 8. The
    # second's row also extends the first's state (5 is a prefix of [5, 6, 7]); matched in
    # row order it would take it and leave the first request a new state mid-request.
    prop = _proposer(tmp_path, idle_steps=3)
    prompt = list(range(20, 40))
    buf = np.zeros((2, 64), np.int32)
    buf[:, :21] = [*prompt, 3]
    prop.propose([[3], [3]], np.array([21, 21]), buf)
    first, second = prop.states.values()
    first.draft, second.draft = [5, 6, 7], [5, 9]
    rows = [[5, 6], [5, 6, 8]]  # the second request's row comes first
    buf[0, 21:23], buf[1, 21:24] = rows[0], rows[1]
    prop.propose(rows, np.array([23, 24]), buf)
    assert prop._next_uid == 2  # no state re-created
    assert (second.n_tokens, first.n_tokens) == (23, 24)


def test_the_rate_the_gains_are_linearised_at_never_exceeds_a_plain_steps(tmp_path):
    """Speculation that loses raises the realised seconds per token above a plain step's
    share; linearising there would make drafts look worth more the more they lose."""
    prop = _proposer(tmp_path, step_costs=(0.04, 0.006, 0.006))
    costs = prop.step_time.expert_costs(16, prop.K)  # plain share: 0.04 / 16 + 0.006
    prop.rate = TokenRate().observe(0.05, 1)  # a losing stream's rate
    assert prop._tau(costs) == pytest.approx(0.0085)
    prop.rate = TokenRate().observe(0.004, 1)  # a winning one's: its own
    assert prop._tau(costs) == 0.004
    gains = expected_gains(np.array([[0.0, 0.6]]), np.array([[0.0, 1.0]]), prop._tau(costs),
                           prop.step_time.draft_seconds())
    assert gains.max() <= 0  # 0.6 tokens at 4 ms do not pay a 6 ms drafted token
