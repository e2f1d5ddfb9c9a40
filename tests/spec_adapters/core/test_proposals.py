"""Proposal forms (point mass, sparse mixture, reduced vocabulary, dense) against their dense
reference: gamma, rho,
acceptance decisions and laws, warping, sampling; abstention; the decoder with every form."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from spec_adapters.core.acceptance import acceptance_probability
from spec_adapters.core.estimators import realized_ratio
from spec_adapters.core.position_stats import position_stats
from spec_adapters.core.proposal import (
    Base,
    Dense,
    PointMass,
    Reduced,
    Sparse,
    cat_rows,
    draw,
    stack_rows,
    warp,
)
from spec_adapters.core.sampling import (
    SamplingConfig,
    speculative_accept,
    speculative_accept_distribution,
)
from spec_adapters.decoding.chain import ChainScheme, HedgeSpecDecoder
from spec_adapters.decoding.loop import Query
from spec_adapters.drafters import HFDrafter, NGramDrafter, PromptLookupDrafter
from spec_adapters.drafters.ngram_kernel import sparse_argmax
from spec_adapters.hf.target import TargetModel
from spec_adapters.selection.book import greedy_stats
from tests.spec_adapters.single_helpers import chi2_pvalue, exact_continuations, pool

torch.set_num_threads(1)
F64 = torch.float64


def random_sparse(rng, m, V, S, zero_rows=()):
    """A random sparse mixture: distinct sorted supports, values >= lam b, rows summing to 1."""
    base = Base(torch.tensor(rng.dirichlet(np.ones(V)), dtype=torch.float32))
    rows = []
    for j in range(m):
        if j in zero_rows:
            rows.append(Sparse.nothing(base))
            continue
        s = int(rng.integers(0, S + 1))
        sup = torch.tensor(np.sort(rng.choice(V, size=s, replace=False)), dtype=torch.long)
        lam = float(rng.uniform(0.05, 0.9))
        extra = torch.tensor(rng.dirichlet(np.ones(max(s, 1)))[:s] * (1 - lam),
                             dtype=torch.float32)
        if s == 0:
            lam = 1.0
        vals = lam * base.probs[sup] + extra
        rows.append(Sparse(sup[None], vals[None], torch.tensor([lam]), base))
    return cat_rows(rows)


def random_reduced(rng, m, V, zero_rows=()):
    """Random rows on a random subset of random size, its ids in no particular order."""
    ids = torch.tensor(rng.choice(V, size=int(rng.integers(2, V)), replace=False))
    probs = torch.tensor(rng.dirichlet(np.ones(len(ids)), size=m), dtype=torch.float32)
    probs[list(zero_rows)] = 0.0
    return Reduced(probs, ids, V)


def forms(rng, m, V):
    """One of each form, with an abstaining row in all but the dense one."""
    dense = Dense(torch.tensor(rng.dirichlet(np.ones(V), size=m), dtype=torch.float32))
    tokens = torch.tensor(rng.integers(0, V, size=m))
    tokens[0] = -1
    return {"point": PointMass(tokens, V), "sparse": random_sparse(rng, m, V, 6, zero_rows={1}),
            "reduced": random_reduced(rng, m, V, zero_rows={m - 1}), "dense": dense}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["point", "sparse", "reduced", "dense"])
def test_gamma_and_rho_of_every_form_equal_the_dense_reference(seed, kind):
    rng = np.random.default_rng(seed)
    m, V = 5, 23
    q = forms(rng, m, V)[kind]
    ref = q.dense()
    assert ref.shape == (m, V)
    for p in (torch.tensor(rng.dirichlet(np.ones(V) * 0.3, size=m)),  # sampled target
              SamplingConfig(0.0).probs(torch.tensor(rng.normal(size=(m, V))))):  # greedy
        x = torch.tensor(rng.integers(0, V, size=m))
        x[2] = int(p[2].argmax())
        torch.testing.assert_close(acceptance_probability(p, q), torch.minimum(p, ref.double())
                                   .sum(-1), atol=1e-6, rtol=0)
        px, qx = p.gather(1, x[:, None])[:, 0], ref.double().gather(1, x[:, None])[:, 0]
        want = torch.where(qx >= px, 1.0, qx / px)
        torch.testing.assert_close(realized_ratio(p, q, x), want, atol=1e-6, rtol=0)
        torch.testing.assert_close(q.prob(x).double(), qx, atol=1e-7, rtol=0)


def test_point_mass_gamma_is_p_of_the_draft_and_greedy_the_argmax_indicator():
    p = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]], dtype=F64)
    q = PointMass(torch.tensor([2, -1]), 3)
    assert acceptance_probability(p, q).tolist() == pytest.approx([0.3, 0.0])
    greedy = SamplingConfig(0.0).probs(p)
    assert acceptance_probability(greedy, PointMass(torch.tensor([1, 1]), 3)).tolist() == [1, 0]


@pytest.mark.parametrize("seed", range(4))
def test_position_stats_of_mixed_forms_equal_the_stacked_dense_reference(seed):
    rng = np.random.default_rng(seed)
    m, V = 4, 17
    p = torch.tensor(rng.dirichlet(np.ones(V), size=m))
    x = torch.tensor(rng.integers(0, V, size=m))
    drafters = [*forms(rng, m, V).values(), *forms(rng, m, V).values()]
    gamma, rho, proposes = position_stats(p, drafters, x)
    g_ref, r_ref, pr_ref = position_stats(p, torch.stack([d.dense() for d in drafters]), x)
    torch.testing.assert_close(gamma, g_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(rho, r_ref, atol=1e-6, rtol=0)
    assert proposes.tolist() == pr_ref.tolist()
    stacked = stack_rows([drafters[1], drafters[5]])  # two sparse drafters, bases differ
    assert stacked.lead == (2, m)
    torch.testing.assert_close(acceptance_probability(p, stacked), g_ref[[1, 5]], atol=1e-6,
                               rtol=0)
    stacked = stack_rows([drafters[2], drafters[6]])  # two reduced drafters, subsets differ
    assert stacked.lead == (2, m)
    torch.testing.assert_close(stacked.dense(), torch.stack([drafters[2].dense(),
                                                             drafters[6].dense()]))
    ref = stacked.dense()
    assert stacked.argmax().tolist() == torch.where(ref.sum(-1) > 0, ref.argmax(-1), -1).tolist()


@pytest.mark.parametrize("seed", range(4))
def test_position_stats_of_point_masses_equal_the_dense_reference(seed):
    """The all-point-mass path (greedy decoding) against the stacked dense reference, with
    abstentions (-1), drafts equal to the realized token, and p(x) = 0 at some positions."""
    rng = np.random.default_rng(50 + seed)
    N, m, V = 5, 6, 11
    p = torch.tensor(rng.dirichlet(np.ones(V), size=m))
    x = torch.tensor(rng.integers(0, V, size=m))
    p[[0, 3], x[[0, 3]]] = 0.0  # the probability-zero event p(x) = 0
    p = p / p.sum(-1, keepdim=True)
    drafts = torch.tensor(rng.integers(-1, V, size=(N, m)))
    drafts[0] = x  # one drafter right everywhere
    drafts[1, 2:] = -1  # one abstaining from position 2
    drafters = [PointMass(d, V) for d in drafts]
    gamma, rho, proposes = position_stats(p, drafters, x)
    g_ref, r_ref, pr_ref = position_stats(p, torch.stack([d.dense() for d in drafters]), x)
    torch.testing.assert_close(gamma, g_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(rho, r_ref, atol=1e-6, rtol=0)
    assert proposes.tolist() == pr_ref.tolist() == (drafts >= 0).tolist()


@pytest.mark.parametrize("seed", range(4))
def test_greedy_stats_equal_position_stats_with_the_targets_point_mass(seed):
    """Greedy, p_j is the point mass at the verified token: greedy_stats (numpy, no p) equals
    position_stats on the one-hot p, abstentions included."""
    rng = np.random.default_rng(70 + seed)
    N, m, V = 6, 5, 13
    x = torch.tensor(rng.integers(0, V, size=m))
    p = torch.nn.functional.one_hot(x, V).double()
    drafts = torch.tensor(rng.integers(-1, V, size=(N, m)))
    drafts[0] = x
    drafts[1, ::2] = x[::2]
    gamma, rho, proposes = greedy_stats(drafts.numpy(), x.numpy())
    g_ref, r_ref, pr_ref = position_stats(p, [PointMass(d, V) for d in drafts], x)
    np.testing.assert_array_equal(gamma, g_ref.numpy())
    np.testing.assert_array_equal(rho, r_ref.numpy())
    np.testing.assert_array_equal(proposes, pr_ref.numpy())
    assert gamma[0].tolist() == [1.0] * m and gamma.dtype == np.float64


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["point", "sparse", "reduced", "dense"])
def test_acceptance_decisions_and_laws_of_every_form_equal_the_dense_reference(seed, kind):
    rng = np.random.default_rng(100 + seed)
    K, V = 3, 9
    q = forms(rng, K, V)[kind]
    if kind == "point":
        q = PointMass(torch.tensor(rng.integers(0, V, size=K)), V)
    if kind == "sparse":
        q = random_sparse(rng, K, V, 4)
    if kind == "reduced":
        q = random_reduced(rng, K, V)
    ref = q.dense()
    draft = torch.tensor([int(torch.multinomial(ref[k], 1)) for k in range(K)])
    p = torch.tensor(rng.dirichlet(np.ones(V), size=K + 1), dtype=torch.float32)
    for s in range(20):
        got = speculative_accept(p, q, draft, torch.Generator().manual_seed(s))
        assert got == speculative_accept(p, ref, draft, torch.Generator().manual_seed(s))
    exact, dense = (speculative_accept_distribution(p, q, draft),
                    speculative_accept_distribution(p, ref, draft))
    assert exact.keys() == dense.keys()
    for key, pr in exact.items():
        assert pr == pytest.approx(dense[key], abs=1e-6)


def test_a_point_mass_follows_vllms_rule_for_drafts_without_probabilities():
    """Accept d with probability p(d); on rejection draw from p with d removed."""
    p = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]], dtype=F64)
    law = speculative_accept_distribution(p, PointMass(torch.tensor([1]), 3), torch.tensor([1]))
    want = {(1, 0): 0.5 * 0.6, (1, 1): 0.5 * 0.1, (1, 2): 0.5 * 0.3,
            (0, 0): 0.5 * 0.2 / 0.5, (0, 2): 0.5 * 0.3 / 0.5}
    assert law.keys() == want.keys()
    for key, pr in want.items():
        assert law[key] == pytest.approx(pr)
    greedy = SamplingConfig(0.0).probs(p)
    for d, n_acc in ((1, 1), (0, 0), (2, 0)):
        got = speculative_accept(greedy, PointMass(torch.tensor([d]), 3), torch.tensor([d]))
        assert got == (n_acc, 0 if n_acc else 1)  # accepted iff d = argmax


def test_no_draft_is_one_plain_step():
    p = torch.tensor([[0.0, 1.0, 0.0]])
    assert speculative_accept(p, PointMass(torch.zeros(0, dtype=torch.long), 3),
                              torch.zeros(0, dtype=torch.long)) == (0, 1)


@pytest.mark.parametrize("seed", range(6))
def test_sparse_argmax_equals_the_dense_argmax_where_the_base_wins_or_ties(seed):
    """Rows where ``lam`` is large (the base's top token off the support can win), a
    peaked base, exact ties between support and base: the dense argmax (lowest id first)."""
    rng = np.random.default_rng(seed)
    V = 23
    probs = torch.tensor(rng.dirichlet(np.ones(V) * 0.2), dtype=torch.float32)
    probs[5] = probs[11] = probs.max()  # two top tokens with equal mass
    base = Base(probs / probs.sum())
    rows = []
    for j in range(40):
        s = int(rng.integers(0, 6))
        sup = torch.tensor(np.sort(rng.choice(V, size=s, replace=False)), dtype=torch.long)
        lam = float(rng.uniform(0.5, 1.0)) if j % 3 else 1.0 - 1e-3 * s
        vals = lam * base.probs[sup] + torch.tensor(rng.dirichlet(np.ones(max(s, 1)))[:s]
                                                    * (1 - lam), dtype=torch.float32)
        if j % 5 == 0 and s:  # a support value tied with the best off-support token
            off = next(int(t) for t in base.order if int(t) not in sup.tolist())
            vals[0] = lam * base.probs[off]
        rows.append(Sparse(sup[None], vals[None], torch.tensor([lam]), base))
    q = cat_rows(rows)
    assert q.argmax().tolist() == q.dense().argmax(-1).tolist()


@pytest.mark.parametrize("sampling", [SamplingConfig(0.0), SamplingConfig(1.0),
                                      SamplingConfig(0.4), SamplingConfig(1.7),
                                      SamplingConfig(0.8, top_k=3), SamplingConfig(0.9, top_p=0.7)])
def test_warping_a_sparse_mixture_equals_warping_its_dense_form(sampling):
    rng = np.random.default_rng(7)
    q = random_sparse(rng, 6, 31, 8, zero_rows={2})
    ref = q.dense()
    got = warp(q, sampling)
    alive = ref.sum(-1) > 0
    want = sampling.probs(torch.where(alive[:, None], ref.log(), 0.0)) * alive[:, None]
    if sampling.greedy:
        assert isinstance(got, PointMass)
        want_tokens = [int(r.argmax()) if a else -1 for r, a in zip(ref, alive, strict=True)]
        assert got.tokens.tolist() == want_tokens
    else:
        kind = Sparse if sampling.top_k is None and sampling.top_p == 1 else Dense
        assert isinstance(got, kind)
        torch.testing.assert_close(got.dense(), want, atol=1e-6, rtol=1e-5)
        got.check("warped")


@pytest.mark.parametrize("sampling", [SamplingConfig(0.0), SamplingConfig(1.0),
                                      SamplingConfig(0.4), SamplingConfig(0.8, top_k=3),
                                      SamplingConfig(0.9, top_p=0.7)])
def test_warping_reduced_rows_equals_warping_their_dense_form_and_stays_reduced(sampling):
    rng = np.random.default_rng(8)
    q = random_reduced(rng, 5, 29, zero_rows={2})
    ref = q.dense()
    alive = ref.sum(-1) > 0
    got = warp(q, sampling)
    if sampling.greedy:
        assert isinstance(got, PointMass)
        assert got.tokens.tolist() == torch.where(alive, ref.argmax(-1), -1).tolist()
        return
    assert isinstance(got, Reduced) and torch.equal(got.ids, q.ids)
    want = sampling.probs(torch.where(alive[:, None], ref.log(), 0.0)) * alive[:, None]
    torch.testing.assert_close(got.dense(), want, atol=1e-6, rtol=1e-5)
    got.check("warped")


def test_greedy_argmax_of_a_sparse_mixture_may_lie_off_its_support():
    base = Base(torch.tensor([0.1, 0.5, 0.4]))
    q = Sparse(torch.tensor([[0, 2]]), torch.tensor([[0.2, 0.4]]), torch.tensor([0.8]), base)
    q.check("q")
    assert q.argmax().tolist() == [1]  # off the support, 0.8 * 0.5 = 0.4 ties id 2: lowest id
    q = Sparse(torch.tensor([[2]]), torch.tensor([[0.7]]), torch.tensor([0.5]), base)
    assert q.argmax().tolist() == [2]


@pytest.mark.parametrize("seed", range(5))
def test_sparse_rows_from_arrays_and_their_compiled_argmax_equal_the_tensor_form(seed):
    """from_arrays with sparse_argmax (the model-free drafters' builder: the argmax compiled,
    the tensors built when read) gives the rows and the argmax that the tensor form computes,
    with ties, empty and zero rows, sliced and concatenated."""
    rng = np.random.default_rng(seed)
    ref = random_sparse(rng, 6, 9, 4, zero_rows={2})
    support, values, lam = ref.support, ref.values.clone(), ref.lam
    values[0, :1] = lam[0] * ref.base.probs[ref.base.top]  # a tie with the base
    b = ref.base.numpy
    top = [sparse_argmax(support[j][support[j] >= 0].numpy(),
                         values[j][support[j] >= 0].double().numpy(), float(lam[j]), b,
                         ref.base.top) for j in range(6)]
    got = Sparse.from_arrays(support.numpy(), values.double().numpy(), lam.double().numpy(),
                             np.array(top), ref.base)
    assert got._arrays is None  # nothing built yet
    want = Sparse(support, values, lam, ref.base)
    assert got.argmax().tolist() == want.argmax().tolist()
    assert got._arrays is None and want.argmax()[2] == -1
    torch.testing.assert_close(got.dense(), want.dense())
    assert got.positions(slice(1, 3)).argmax().tolist() == want.argmax()[1:3].tolist()
    assert cat_rows([got, got]).argmax().tolist() == want.argmax().tolist() * 2
    # values apart in float64 but one float32: the tensors tie, so the lowest id wins
    uniform = Base(torch.full((4,), 0.25))
    assert sparse_argmax(np.array([1, 2]), np.array([0.3, 0.3 + 1e-9]), 0.0, uniform.numpy,
                         uniform.top) == 1
    assert Sparse(torch.tensor([[1, 2]]), torch.tensor([[0.3, 0.3 + 1e-9]]), torch.zeros(1),
                  uniform).argmax().tolist() == [1]
    with pytest.raises(ValueError, match="float32 base"):
        Sparse.from_arrays(np.zeros((1, 0), np.int64), np.zeros((1, 0)), np.ones(1),
                           np.zeros(1), Base(torch.full((4,), 0.25, dtype=torch.float64)))


def test_draws_from_every_form_follow_q():
    rng = np.random.default_rng(3)
    V, n = 8, 6000
    for q in (random_sparse(rng, 1, V, 3), random_reduced(rng, 1, V),
              Dense(torch.tensor(rng.dirichlet(np.ones(V)))[None])):
        gen = torch.Generator().manual_seed(0)
        counts = np.bincount([draw(q, gen) for _ in range(n)], minlength=V)
        expected = q.dense()[0].double().numpy() * n
        on = expected > 0  # a reduced row never draws off its subset
        assert counts[~on].sum() == 0
        assert stats.chisquare(counts[on], expected[on] * n / expected[on].sum()).pvalue > 1e-3
    assert draw(PointMass(torch.tensor([5]), V), None) == 5


def test_validation_names_bad_rows():
    base = Base(torch.full((4,), 0.25))
    with pytest.raises(ValueError, match="sums to"):
        Sparse(torch.tensor([[1]]), torch.tensor([[0.9]]), torch.tensor([0.9]), base).check("q")
    with pytest.raises(ValueError, match="outside"):
        PointMass(torch.tensor([4]), 4).check("q")
    with pytest.raises(ValueError, match="one base"):
        cat_rows([Sparse.nothing(base), Sparse.nothing(Base(torch.full((4,), 0.25)))])
    with pytest.raises(ValueError, match="one form"):
        cat_rows([Sparse.nothing(base), PointMass(torch.tensor([1]), 4)])
    one = torch.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match="outside"):
        Reduced(one, torch.tensor([1, 4]), 4).check("q")
    with pytest.raises(ValueError, match="repeated"):
        Reduced(one, torch.tensor([1, 1]), 4).check("q")
    with pytest.raises(ValueError, match="sum to 1"):
        Reduced(one * 1.5, torch.tensor([1, 2]), 4).check("q")
    with pytest.raises(ValueError, match="share one subset"):
        cat_rows([Reduced(one, torch.tensor([1, 2]), 4), Reduced(one, torch.tensor([1, 3]), 4)])


# ------------------------------------------------------------------------------------------
# the decoder with every form
# ------------------------------------------------------------------------------------------
class DenseReference:
    """Wraps a drafter so that its proposals and predictions reach the decoder as dense rows:
    the same tokens (drawn by the wrapped drafter), the dense reference of its forms."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.vocab_size = inner, inner.name, inner.vocab_size

    def start(self, prompt_ids):
        self.inner.start(prompt_ids)

    def propose(self, k, sampling, generator=None):
        tokens, q = self.inner.propose(k, sampling, generator)
        return tokens, Dense(q.dense())

    def extend(self, tokens):
        pred = self.inner.extend(tokens)
        return pred if isinstance(pred, torch.Tensor) else Dense(pred.dense())


def corpus_drafters(V, seed=0):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, V, size=40).tolist() for _ in range(6)]
    return [NGramDrafter.from_corpus(docs, V, order=3, name="ngram"),
            NGramDrafter.from_corpus(docs[:3], V, order=2, context_weight=2.0, abstain=True,
                                     name="ngram-own"),
            PromptLookupDrafter(V, max_ngram=2)]


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0},
                                      {"temperature": 0.7}, {"temperature": 0.9, "top_k": 6}])
def test_decoding_with_every_form_equals_decoding_with_dense_rows(sampling):
    target, models = pool(vocab_size=96, peak=10.0)
    ids = torch.tensor([[1, 30, 31, 32, 1, 30]])
    runs = []
    for wrap in (lambda d: d, DenseReference):
        drafters = [wrap(d) for d in [*corpus_drafters(96), HFDrafter(models[1], name="hf")]]
        dec = HedgeSpecDecoder(target, drafters, draft_length=3)
        runs.append(dec.generate(ids, max_new_tokens=20, seed=5, **sampling))
    cheap, dense = runs
    assert cheap.sequences.tolist() == dense.sequences.tolist()
    assert cheap.stats["accepted"] == dense.stats["accepted"]
    assert cheap.stats["chosen"] == dense.stats["chosen"]
    torch.testing.assert_close(cheap.stats["gamma"], dense.stats["gamma"], atol=1e-6, rtol=0)
    torch.testing.assert_close(cheap.stats["rho"], dense.stats["rho"], atol=1e-6, rtol=0)
    if sampling["temperature"] == 0:
        with torch.no_grad():
            ref = target.generate(ids, do_sample=False, max_new_tokens=20, eos_token_id=None)
        assert cheap.sequences.tolist() == ref.tolist()


def test_a_round_with_no_draft_is_a_plain_target_step():
    target, _ = pool(vocab_size=96)
    prompt = torch.tensor([3, 4, 5, 6])  # no repeat: prompt lookup abstains
    scheme = ChainScheme(TargetModel(target), [PromptLookupDrafter(96)], 3)
    scheme.start(prompt)
    query = Query(seq=prompt.tolist(), prompt_len=4, limit=20, eos=frozenset(),
                  sampling=SamplingConfig(0.0), gen=torch.Generator().manual_seed(0),
                  rng=np.random.default_rng(0), session=None)
    draft = scheme.draft(0, query, 3)
    assert draft.tokens.shape == (0,)
    verdict = scheme.verify(draft, query)
    plain = TargetModel(target)
    plain.prefill(prompt)
    logits = plain.verify(prompt[-1:], torch.zeros(0, dtype=torch.long))
    assert (verdict.accepted, verdict.tokens) == (0, [int(logits[0].argmax())])
    assert scheme.target.cached_length == plain.cached_length == prompt.numel()
    # and in the loop: every round drafts nothing and yields the target's greedy token
    dec = HedgeSpecDecoder(target, [PromptLookupDrafter(96, max_ngram=3)], draft_length=3)
    out = dec.generate(prompt.view(1, -1), max_new_tokens=4)
    with torch.no_grad():
        ref = target.generate(prompt.view(1, -1), do_sample=False, max_new_tokens=4,
                              eos_token_id=None)
    assert out.sequences.tolist() == ref.tolist()


@pytest.mark.parametrize(("warp_cfg", "n_samples"), [
    ({"temperature": 1.0, "top_k": None, "top_p": 1.0}, 350),
    ({"temperature": 0.7, "top_k": 5, "top_p": 0.9}, 200),
])
def test_sampled_continuations_with_sparse_and_abstaining_drafters_follow_the_target(warp_cfg,
                                                                                    n_samples):
    V = 12
    target, _ = pool(vocab_size=V, peak=20.0, layers=1)
    prompt = torch.tensor([[1, 5, 7, 1, 5]])
    dec = HedgeSpecDecoder(target, corpus_drafters(V, seed=1), draft_length=2)
    cfg = SamplingConfig(**warp_cfg)
    exact = exact_continuations(target, prompt, 3, cfg.probs)
    counts, accepted = Counter(), 0
    for seed in range(n_samples):
        out = dec.generate(prompt, max_new_tokens=3, seed=seed, **warp_cfg)
        counts[tuple(out.sequences[0, prompt.shape[1]:].tolist())] += 1
        accepted += sum(out.stats["accepted"])
    # drafts were proposed and accepted, not only plain steps (seen: 305 of 350, 37 of 200)
    assert accepted > n_samples / 10
    assert chi2_pvalue(counts, exact, n_samples) > 1e-3
    # power: the same samples reject the target at temperature x 0.8 (seen: p = 5.9e-7 for
    # the unwarped law at 350 samples; p = 0 for the warped one, whose nucleus shrinks)
    sharper = exact_continuations(target, prompt, 3,
                                  SamplingConfig(**{**warp_cfg,
                                                    "temperature": 0.8 * cfg.temperature}).probs)
    assert chi2_pvalue(counts, sharper, n_samples) < 1e-4
