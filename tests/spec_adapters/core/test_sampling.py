"""SamplingConfig warping and the speculative / tree acceptance rules against independent
oracles (closed-form outcome probabilities written out by hand, naive warping loops)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from spec_adapters.core.sampling import (
    SamplingConfig,
    check_distribution,
    speculative_accept,
    speculative_accept_distribution,
    tree_accept,
    tree_accept_distribution,
    tree_children,
)
from spec_adapters.core.warping import top_p_drop

torch.set_num_threads(1)
F64 = torch.float64


def rand_probs(rng: np.random.Generator, *shape: int, sparse: bool = False) -> torch.Tensor:
    x = rng.gamma(0.5, size=shape)
    if sparse:
        x = x * (rng.random(shape) < 0.5)
        x[..., int(rng.integers(0, shape[-1]))] += 0.1
    return torch.tensor(x / x.sum(-1, keepdims=True), dtype=F64)


# ------------------------------------------------------------------------------ SamplingConfig
def naive_warp(logits: list[float], T: float, top_k, top_p: float) -> list[float]:
    V = len(logits)
    if T == 0:
        a = max(range(V), key=lambda i: (logits[i], -i))
        return [1.0 if i == a else 0.0 for i in range(V)]
    x = [v / T for v in logits]
    keep = set(range(V))
    if top_k is not None and top_k < V:
        kth = sorted(x, reverse=True)[top_k - 1]
        keep = {i for i in keep if x[i] >= kth}
    m = max(x[i] for i in keep)
    z = {i: math.exp(x[i] - m) for i in keep}
    s = sum(z.values())
    probs = {i: z[i] / s for i in keep}
    if top_p < 1:
        order = sorted(keep, key=lambda i: (-x[i], i))
        kept, mass = [], 0.0
        for i in order:
            if mass >= top_p and kept:
                break
            kept.append(i)
            mass += probs[i]
        keep = set(kept)
        s = sum(z[i] for i in keep)
        probs = {i: z[i] / s for i in keep}
    return [probs.get(i, 0.0) for i in range(V)]


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=8, unique=True),
    T=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    top_k=st.one_of(st.none(), st.integers(1, 8)),
    top_p=st.sampled_from([1.0, 0.9, 0.5, 0.1]),
)
def test_probs_match_naive_warping(logits, T, top_k, top_p):
    cfg = SamplingConfig(temperature=T, top_k=top_k, top_p=top_p)
    got = cfg.probs(torch.tensor(logits, dtype=F64)).tolist()
    assert got == pytest.approx(naive_warp(logits, T, top_k, top_p), abs=1e-12)


def test_greedy_is_one_hot_argmax_first_on_ties_and_batched():
    cfg = SamplingConfig()
    assert cfg.greedy and not SamplingConfig(temperature=0.5).greedy
    logits = torch.tensor([[1.0, 3.0, 3.0], [0.0, -1.0, -math.inf]])
    out = cfg.probs(logits)
    assert out.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    assert out.dtype == torch.float32
    assert SamplingConfig(temperature=1.0).probs(logits.double()).dtype == F64


def test_probs_keep_dtype_float64_and_sum_to_one():
    x = torch.randn(4, 50, dtype=F64, generator=torch.Generator().manual_seed(0))
    p = SamplingConfig(temperature=0.7, top_k=10, top_p=0.9).probs(x)
    assert p.dtype == F64
    assert torch.allclose(p.sum(-1), torch.ones(4, dtype=F64), atol=1e-15)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": math.nan}, "top_p"),
        ({"top_p": np.float32(1.5)}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": np.int64(0)}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": True}, "top_k"),
    ],
)
def test_config_rejects_bad_values(kwargs, word):
    with pytest.raises(ValueError, match=word):
        SamplingConfig(**kwargs)


def test_config_is_frozen():
    with pytest.raises(AttributeError, match="cannot assign to field 'temperature'"):
        SamplingConfig().temperature = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "logits",
    [
        torch.tensor([1.0, math.nan]),
        torch.tensor([math.inf, 0.0]),
        torch.tensor([-math.inf, -math.inf]),
        torch.tensor([1, 2]),
        torch.zeros(0),
    ],
)
def test_probs_rejects_bad_logits(logits):
    with pytest.raises(ValueError, match="logits"):
        SamplingConfig(temperature=1.0).probs(logits)


# --------------------------------------------------------------------------- check_distribution
@pytest.mark.parametrize(
    ("x", "word"),
    [
        (torch.tensor([0.5, 0.6], dtype=F64), "sum to 1"),
        (torch.tensor([1.5, -0.5], dtype=F64), "negative"),
        (torch.tensor([math.nan, 1.0], dtype=F64), "NaN"),
        (torch.tensor([1, 0]), "floating"),
        (torch.tensor(1.0), "shape"),
    ],
)
def test_check_distribution_names_the_problem(x, word):
    with pytest.raises(ValueError, match=word):
        check_distribution(x, "p")


# --------------------------------------------------------------------- speculative_accept oracle
def oracle_speculative(p: torch.Tensor, q: torch.Tensor, draft: list[int]) -> dict:
    """Closed form: P(n = m, next = x) = prod_{j<m} a_j * (1 - a_m) * r_m(x) (m < K),
    prod_j a_j * p_K(x) (m = K), with a_j = min(1, p_j(d_j)/q_j(d_j)), r = (p - q)^+ / Z."""
    K, V = len(draft), p.shape[1]
    out = {}
    reach = 1.0
    for m in range(K + 1):
        if m == K:
            for x in range(V):
                out[(K, x)] = reach * float(p[K, x])
            break
        a = min(1.0, float(p[m, draft[m]]) / float(q[m, draft[m]]))
        resid = [max(0.0, float(p[m, x]) - float(q[m, x])) for x in range(V)]
        Z = sum(resid)
        for x in range(V):
            if 1 - a > 0:
                out[(m, x)] = reach * (1 - a) * resid[x] / Z
        reach *= a
    return {k: v for k, v in out.items() if v > 0}


def random_case(seed: int, K: int, V: int, sparse: bool = False):
    rng = np.random.default_rng(seed)
    p = rand_probs(rng, K + 1, V, sparse=sparse)
    q = rand_probs(rng, K, V, sparse=sparse)
    draft = [int(rng.choice(V, p=q[k].numpy())) for k in range(K)]
    return p, q, draft


@pytest.mark.parametrize("seed", range(12))
def test_speculative_distribution_matches_closed_form(seed):
    K, V = 1 + seed % 4, 2 + seed % 5
    p, q, draft = random_case(seed, K, V, sparse=seed % 3 == 0)
    got = speculative_accept_distribution(p, q, torch.tensor(draft))
    want = oracle_speculative(p, q, draft)
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-14)


def test_speculative_accept_samples_follow_closed_form():
    p, q, draft = random_case(7, 3, 4)
    want = oracle_speculative(p, q, draft)
    gen = torch.Generator().manual_seed(1)
    n = 4000
    counts: dict = {}
    for _ in range(n):
        out = speculative_accept(p, q, torch.tensor(draft), gen)
        counts[out] = counts.get(out, 0) + 1
    assert set(counts) <= set(want)
    keys = [k for k in want if want[k] * n >= 5]
    obs = np.array([counts.get(k, 0) for k in keys] + [n - sum(counts.get(k, 0) for k in keys)])
    exp = np.array([want[k] * n for k in keys] + [n - sum(want[k] * n for k in keys)])
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-4


@pytest.mark.parametrize("seed", range(20))
def test_greedy_accepts_longest_argmax_prefix_then_argmax(seed):
    rng = np.random.default_rng(seed)
    K, V = 4, 3
    cfg = SamplingConfig()
    lp = torch.tensor(rng.normal(size=(K + 1, V)))
    lq = torch.tensor(rng.normal(size=(K, V)))
    draft = lq.argmax(-1)
    n, nxt = speculative_accept(cfg.probs(lp), cfg.probs(lq), draft, torch.Generator())
    target = lp.argmax(-1)
    m = 0
    while m < K and draft[m] == target[m]:
        m += 1
    assert (n, nxt) == (m, int(target[m]))


def test_generator_consumption_is_fixed_k_plus_one_uniforms():
    p, q, draft = random_case(3, 3, 4)
    for seed in range(5):
        g1 = torch.Generator().manual_seed(seed)
        speculative_accept(p, q, torch.tensor(draft), g1)
        g2 = torch.Generator().manual_seed(seed)
        torch.rand(4, dtype=F64, generator=g2)
        assert torch.equal(g1.get_state(), g2.get_state())


def test_identical_p_q_accepts_everything():
    p, _, _ = random_case(0, 3, 5)
    dist = speculative_accept_distribution(p, p[:3], torch.tensor([0, 1, 2]))
    assert sum(v for (n, _), v in dist.items() if n == 3) == pytest.approx(1.0, abs=1e-15)


def test_no_draft_is_a_plain_step_from_p():
    """K = 0 (an abstaining drafter, a cost-aware k = 0): the token is drawn from p[0]."""
    p = torch.tensor([[0.1, 0.6, 0.3]], dtype=F64)
    dist = speculative_accept_distribution(p, p[:0], torch.zeros(0, dtype=torch.long))
    assert dist == pytest.approx({(0, 0): 0.1, (0, 1): 0.6, (0, 2): 0.3}, abs=1e-15)
    g = torch.Generator().manual_seed(0)
    assert speculative_accept(p, p[:0], torch.zeros(0, dtype=torch.long), g)[0] == 0


@pytest.mark.parametrize(
    ("p_shape", "q_shape", "draft", "word"),
    [
        ((3, 4), (2, 5), [0, 1], "shape"),
        ((2, 4), (2, 4), [0, 1], "K\\+1"),
        ((3, 4), (2, 4), [0], "draft"),
        ((3, 4), (2, 4), [0, 9], "outside"),
    ],
)
def test_speculative_accept_rejects_bad_shapes(p_shape, q_shape, draft, word):
    p = torch.full(p_shape, 1.0 / p_shape[-1], dtype=F64)
    q = torch.full(q_shape, 1.0 / q_shape[-1], dtype=F64)
    with pytest.raises(ValueError, match=word):
        speculative_accept(p, q, torch.tensor(draft, dtype=torch.long))


def test_speculative_accept_rejects_unnormalised_negative_and_impossible_draft():
    p = torch.full((2, 3), 1 / 3, dtype=F64)
    q = torch.tensor([[1.0, 0.0, 0.0]], dtype=F64)
    with pytest.raises(ValueError, match="sum to 1"):
        speculative_accept(p * 2, q, torch.tensor([0]))
    with pytest.raises(ValueError, match="negative"):
        speculative_accept(p, torch.tensor([[1.5, -0.5, 0.0]], dtype=F64), torch.tensor([0]))
    with pytest.raises(ValueError, match="q = 0"):
        speculative_accept(p, q, torch.tensor([1]))


# ----------------------------------------------------------------------------- tree_accept oracle
def oracle_tree(p: torch.Tensor, parents: list[int], tokens: list[int]) -> dict:
    """Closed form of recursive rejection over siblings: each distinct child token c of a node
    is accepted with probability p_node(c) (repeats: 0); with the rest, the next token is drawn
    from p_node restricted to non-children tokens."""
    children = [[c for c in range(1, len(parents)) if parents[c] == v] for v in range(len(parents))]
    out = {}

    def rec(v: int, path: tuple, prob: float):
        seen = set()
        for c in children[v]:
            t = tokens[c]
            if t in seen:
                continue
            seen.add(t)
            if float(p[v, t]) > 0:
                rec(c, (*path, c), prob * float(p[v, t]))
        rest = [x for x in range(p.shape[1]) if x not in seen]
        for x in rest:
            if float(p[v, x]) > 0:
                out[(path, x)] = out.get((path, x), 0.0) + prob * float(p[v, x])

    rec(0, (), 1.0)
    return out


TREES = [
    ([-1, 0], [0, 1]),
    ([-1, 0, 0, 1, 1, 2], [0, 1, 2, 0, 3, 1]),
    ([-1, 0, 1, 2, 3], [0, 2, 2, 2, 2]),
    ([-1, 0, 0, 0, 3], [0, 1, 1, 2, 0]),  # repeated sibling token
]


@pytest.mark.parametrize(("tree", "seed"), list(itertools.product(range(len(TREES)), range(4))))
def test_tree_distribution_matches_closed_form(tree, seed):
    parents, tokens = TREES[tree]
    rng = np.random.default_rng(seed)
    p = rand_probs(rng, len(parents), 4, sparse=seed % 2 == 1)
    got = tree_accept_distribution(p, parents, tokens)
    want = oracle_tree(p, parents, tokens)
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-14)


def test_tree_accept_samples_follow_closed_form_and_consume_m_plus_one():
    parents, tokens = TREES[1]
    p = rand_probs(np.random.default_rng(5), len(parents), 4)
    want = oracle_tree(p, parents, tokens)
    gen = torch.Generator().manual_seed(2)
    counts: dict = {}
    n = 4000
    for _ in range(n):
        path, nxt = tree_accept(p, parents, torch.tensor(tokens), gen)
        counts[(tuple(path), nxt)] = counts.get((tuple(path), nxt), 0) + 1
    assert set(counts) <= set(want)
    keys = [k for k in want if want[k] * n >= 5]
    obs = np.array([counts.get(k, 0) for k in keys])
    exp = np.array([want[k] * n for k in keys])
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-4
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    tree_accept(p, parents, tokens, g1)
    torch.rand(len(parents), dtype=F64, generator=g2)
    assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.parametrize("seed", range(10))
def test_tree_greedy_is_longest_argmax_path(seed):
    parents, tokens = TREES[seed % len(TREES)]
    rng = np.random.default_rng(seed)
    logits = torch.tensor(rng.normal(size=(len(parents), 4)))
    path, nxt = tree_accept(SamplingConfig().probs(logits), parents, tokens)
    top = logits.argmax(-1).tolist()
    want, v = [], 0
    while True:
        match = [c for c in range(1, len(parents)) if parents[c] == v and tokens[c] == top[v]]
        if not match:
            break
        v = match[0]
        want.append(v)
    assert (path, nxt) == (want, top[v])


def test_tree_children_and_errors():
    assert tree_children([-1, 0, 0, 1]) == [[1, 2], [3], [], []]
    p = torch.full((3, 4), 0.25, dtype=F64)
    with pytest.raises(ValueError, match="parents\\[0\\]"):
        tree_accept(p, [0, 0, 0], [0, 1, 2])
    with pytest.raises(ValueError, match="parents\\[2\\]"):
        tree_accept(p, [-1, 0, 2], [0, 1, 2])
    with pytest.raises(ValueError, match="K >= 1"):
        tree_accept(p[:1], [-1], [0])
    with pytest.raises(ValueError, match="one row per tree node"):
        tree_accept(p, [-1, 0], [0, 1])
    with pytest.raises(ValueError, match="tokens"):
        tree_accept(p, [-1, 0, 0], [0, 1])
    with pytest.raises(ValueError, match="outside"):
        tree_accept(p, [-1, 0, 0], [0, 1, 7])
    with pytest.raises(ValueError, match="sum to 1"):
        tree_accept(p * 3, [-1, 0, 0], [0, 1, 2])


def test_float32_inputs_and_rounding_fallback():
    from spec_adapters.core.sampling import _residual

    cfg = SamplingConfig(temperature=0.8, top_k=5)
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(4, 40, generator=g) * 3
    p = cfg.probs(lp)
    q = cfg.probs(lp[:3] + torch.randn(3, 40, generator=g))
    assert p.dtype == torch.float32
    assert not torch.equal(p[:3] > 0, q > 0)
    draft = torch.multinomial(q, 1, generator=g).flatten()
    # every float32 outcome is a possible outcome of the float64 closed form (the top-5 supports
    # of p and q differ, so drawing the next token from q, or from p unresidualised, shows)
    support = oracle_speculative(p.double(), q.double(), draft.tolist())
    outcomes = [speculative_accept(p, q, draft, g) for _ in range(300)]
    assert all(type(n) is int and type(nxt) is int for n, nxt in outcomes)
    assert set(outcomes) <= set(support)
    assert len({n for n, _ in outcomes}) > 1  # more than one acceptance length was seen
    # p == q: a rejection has probability 0, and if rounding ever rejects, resample from p
    assert torch.equal(_residual(p[0], p[0]), p[0])


def test_check_distribution_tolerance_grows_with_the_vocabulary():
    """A float32 distribution over a real 49152-token vocabulary may miss 1 by a few 1e-4 from
    rounding alone (seen with an n-gram drafter's softmax at T = 0.7): accepted. A vector that
    is off by 5% is a bug (unnormalised weights): still rejected, at any vocabulary size."""
    V = 49152
    p = torch.softmax(torch.randn(2, V, generator=torch.Generator().manual_seed(0)) * 3, -1)
    p = (p * (1 + 3e-4)).float()
    assert check_distribution(p, "q") is p
    with pytest.raises(ValueError, match="does not sum to 1"):
        check_distribution(p * 1.05, "q")
    with pytest.raises(ValueError, match="does not sum to 1"):
        check_distribution(torch.full((4,), 0.2501), "q")


def _sorted_drop(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus rule by a stable sort of the whole row (the reference)."""
    sorted_x, order = torch.sort(x, dim=-1, descending=True, stable=True)
    sorted_p = torch.softmax(sorted_x, dim=-1)
    drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
    drop_sorted[..., 0] = False
    return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_top_p_without_the_sort_keeps_the_sorts_set(dtype):
    """Peaked rows (settled by the candidates), flat ones (the sort's fallback), ties at and
    across the candidates' edge, top-k's masked tokens, a batch shape: the same tokens."""
    g = torch.Generator().manual_seed(3)
    V = 3000
    rows = [torch.randn(V, generator=g, dtype=dtype) * s for s in (0.3, 1.0, 3.0, 8.0)]
    tied = torch.randn(V, generator=g, dtype=dtype) * 3.0
    top = tied.topk(70).indices
    tied[top[40:70]] = float(tied[top[40]])  # 30 equal logits across the 64th place
    rows.append(tied)
    flat = torch.zeros(V, dtype=dtype)
    flat[:5] = 2.0  # ties everywhere: the stable sort's order decides
    rows.append(flat)
    even = torch.full((V,), -10.0, dtype=dtype)
    even[torch.randperm(V, generator=g)[:10]] = 5.0  # the cut falls among ten equal logits
    rows.append(even)
    masked = torch.randn(V, generator=g, dtype=dtype) * 2.0
    masked[masked < masked.topk(20).values[-1]] = -math.inf  # what top_k = 20 leaves
    rows.append(masked)
    x = torch.stack(rows).view(8, 1, V)
    for p in (0.1, 0.5, 0.9, 0.95, 0.999):
        got = top_p_drop(x, p)
        assert got.shape == x.shape
        assert torch.equal(got, _sorted_drop(x, p)), p
        assert not got[..., x.argmax(-1)].all()  # the most probable token is always kept


def test_a_top_p_warp_of_a_large_vocabulary_matches_naive_warping():
    x = torch.randn(2, 500, dtype=F64, generator=torch.Generator().manual_seed(4)) * 4
    cfg = SamplingConfig(temperature=0.7, top_k=100, top_p=0.9)
    for row, got in zip(x.tolist(), cfg.probs(x).tolist(), strict=True):
        assert got == pytest.approx(naive_warp(row, 0.7, 100, 0.9), abs=1e-12)
