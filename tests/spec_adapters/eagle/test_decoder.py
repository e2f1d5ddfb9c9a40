"""The EAGLE tree HedgeSpecDecoder: greedy exactness, tree gamma, chain == single draft, input."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.core.acceptance import tree_acceptance
from spec_adapters.core.sampling import SamplingConfig
from spec_adapters.decoding.chain import HedgeSpecDecoder as SingleDraftDecoder
from spec_adapters.eagle import EagleHead, HedgeSpecDecoder, TreeConfig
from tests.conftest import make_tiny_llama
from tests.spec_adapters.eagle.helpers import features, setup, teacher_forced_logits

POLICIES = ["normalhedge", "hedge", "adahedge", "exp3spec", "ucbspec", "fixed:0", "oracle"]
TREES = [TreeConfig(5, 8, 48), TreeConfig(3, 2, 6), TreeConfig(4, 1, 4), TreeConfig(1, 1, 1),
         TreeConfig(2, 4, 2)]


def _greedy_reference(target, prompt, n, eos=None):
    with torch.no_grad():
        return target.generate(prompt, max_new_tokens=n, do_sample=False, pad_token_id=0,
                               eos_token_id=eos)


@pytest.mark.parametrize("policy", POLICIES)
def test_greedy_output_equals_target_generate_for_every_policy_and_tree(policy):
    target, corpus, heads = setup()
    prompts = [corpus[15:16, :6], corpus[13:14, :11]]
    total_accepted = 0
    for tree in TREES:
        dec = HedgeSpecDecoder(target, heads, tree=tree, policy=policy)
        for prompt in prompts:
            ref = _greedy_reference(target, prompt, 20)
            out = dec.generate(prompt, max_new_tokens=20, temperature=0.0)
            assert torch.equal(out.sequences, ref), (policy, tree)
            st = out.stats
            assert st["new_tokens"] == 20
            # each round yields its accepted nodes + 1 token; only the last round is cut
            produced = [a + 1 for a in st["accepted"]]
            assert sum(produced[:-1]) < 20 <= sum(produced)
            assert len(produced) == st["target_calls"] and max(st["accepted"]) <= tree.depth
            total_accepted += sum(st["accepted"])
    assert total_accepted > 0, "the heads must get some drafts accepted for this test to bite"


def test_greedy_with_eos_inside_a_chunk_and_length_limits():
    target, corpus, heads = setup()
    prompt = corpus[15:16, :6]
    ref = _greedy_reference(target, prompt, 30)
    eos = int(ref[0, 6 + 9])
    assert eos not in ref[0, 6:6 + 9].tolist()
    dec = HedgeSpecDecoder(target, heads, tree=TreeConfig(5, 4, 16))
    out = dec.generate(prompt, max_new_tokens=30, eos_token_id=eos)
    assert torch.equal(out.sequences, _greedy_reference(target, prompt, 30, eos=eos))
    assert out.sequences[0, -1] == eos
    for n in (0, 1, 2, 7, 13):
        out = dec.generate(prompt, max_new_tokens=n)
        assert torch.equal(out.sequences, ref[:, :6 + n])
    # the context limit (max_position_embeddings = 256) caps the tree depth
    long = torch.cat([corpus[12], corpus[11]])[:250].view(1, -1)
    out = dec.generate(long, max_new_tokens=20)
    assert out.sequences.shape[1] == 256
    assert torch.equal(out.sequences, _greedy_reference(target, long, 6))


def _recomputed_gamma_rho(target, heads, seq, prompt_len, sampling, top_k):
    """Theorem 2 from scratch: full target forward for p, each head teacher-forced from
    scratch for its children (its top_k at every position)."""
    with torch.no_grad():
        p = sampling.probs(target(input_ids=seq.view(1, -1)).logits[0].float())
    gen = torch.arange(prompt_len, seq.numel())
    p_at = p[gen - 1]  # the distribution of x_j given x_<j
    gammas, rhos = [], []
    for head in heads:
        logits = teacher_forced_logits(head, target, seq)  # row t predicts x_{t+2}
        kids = head.d2t[torch.topk(logits[gen - 2], top_k, -1).indices]
        gammas.append(tree_acceptance(p_at.double(), kids))
        rhos.append((kids == seq[gen, None]).any(-1).double())
    return torch.stack(gammas), torch.stack(rhos)


@pytest.mark.parametrize(("temperature", "top_p", "top_k_warp", "tree"), [
    (0.0, 1.0, None, TreeConfig(5, 8, 48)),
    (1.0, 1.0, None, TreeConfig(4, 3, 10)),
    (0.8, 0.9, 20, TreeConfig(3, 2, 6)),
])
def test_tree_gamma_from_the_decoder_equals_recomputation_from_scratch(temperature, top_p,
                                                                      top_k_warp, tree):
    target, corpus, heads = setup()
    prompt = corpus[11:12, :7]
    dec = HedgeSpecDecoder(target, heads, tree=tree, policy="normalhedge")
    out = dec.generate(prompt, max_new_tokens=30, temperature=temperature, top_p=top_p,
                       top_k=top_k_warp, seed=3)
    seq = out.sequences[0]
    sampling = SamplingConfig(temperature, top_p, top_k_warp)
    gamma, rho = _recomputed_gamma_rho(target, heads, seq, 7, sampling, tree.top_k)
    assert out.stats["gamma"].shape == gamma.shape == (3, 30)
    torch.testing.assert_close(out.stats["gamma"], gamma, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.stats["rho"], rho, atol=0, rtol=0)
    assert gamma[0].mean() > gamma[2].mean(), "the trained head beats the untrained one"
    # every round whose window was verified got a loss; the rest were censored
    assert len(out.stats["losses"]) + out.stats["censored"] == out.stats["target_calls"]


def test_one_token_prompt_has_no_head_prediction_at_the_first_position():
    target, corpus, heads = setup()
    prompt = corpus[10:11, :1]
    out = HedgeSpecDecoder(target, heads, tree=TreeConfig(3, 2, 6)).generate(
        prompt, max_new_tokens=12)
    assert torch.equal(out.sequences, _greedy_reference(target, prompt, 12))
    assert out.stats["accepted"][0] == 0 and out.stats["tree_nodes"][0] == 0
    assert torch.all(out.stats["gamma"][:, 0] == 0)
    gamma, _ = _recomputed_gamma_rho(target, heads, out.sequences[0][:13], 2,
                                     SamplingConfig(0.0), 2)
    torch.testing.assert_close(out.stats["gamma"][:, 1:], gamma)


class ChainDrafter:
    """An EAGLE head as a single-draft ``Drafter``, recomputing everything from scratch each
    call (an independent oracle: no caches, no trees)."""

    def __init__(self, head: EagleHead, target):
        self.head, self.target = head, target
        self.name, self.vocab_size = "chain", head.config.target_vocab_size

    def start(self, prompt_ids):
        self.ctx = prompt_ids.view(-1).clone()

    def _full(self, draft_logits):
        out = torch.full((*draft_logits.shape[:-1], self.vocab_size), float("-inf"))
        out[..., self.head.d2t] = draft_logits
        return out

    @torch.no_grad()
    def propose(self, k, sampling, generator=None):
        head, seq = self.head, self.ctx
        h = head.fuse(features(self.target, seq[:-1], head.config.feature_layers))
        emb = head.embed(seq[1:])
        toks, qs = [], []
        for _ in range(k):
            logits, z, _, _ = head(h[None], emb[None], torch.arange(h.shape[0]))
            q = sampling.probs(self._full(logits[0, -1]))
            t = int(q.argmax())
            toks.append(t)
            qs.append(q)
            h = torch.cat([h, z[0, -1:]])
            emb = torch.cat([emb, head.embed(torch.tensor([t]))])
        return torch.tensor(toks), torch.stack(qs)

    def extend(self, tokens):
        n_old = self.ctx.numel()
        self.ctx = torch.cat([self.ctx, tokens.view(-1).cpu()])
        rows = teacher_forced_logits(self.head, self.target, self.ctx)
        return self._full(rows[n_old - 2:n_old - 2 + tokens.numel()])


@pytest.mark.parametrize(("policy", "delay"), [("normalhedge", None), ("normalhedge", "qpmd"),
                                               ("fixed:0", None)])
def test_a_chain_behaves_like_single_draft_decoding_with_that_head(policy, delay):
    target, corpus, heads = setup()
    prompt = corpus[15:16, :6]
    depth = 3
    kw = {} if delay is None else {"delay": delay}
    tree_dec = HedgeSpecDecoder(target, heads, tree=TreeConfig(depth, 1, depth), policy=policy,
                                **kw)
    single = SingleDraftDecoder(target, [ChainDrafter(h, target) for h in heads],
                                draft_length=depth, policy=policy, **kw)
    a = tree_dec.generate(prompt, max_new_tokens=25, seed=0)
    b = single.generate(prompt, max_new_tokens=25, seed=0)
    assert torch.equal(a.sequences, b.sequences)
    assert a.stats["accepted"] == b.stats["accepted"]
    assert a.stats["chosen"] == b.stats["chosen"]
    assert sum(a.stats["accepted"]) > 0
    if policy == "normalhedge":
        torch.testing.assert_close(a.stats["gamma"], b.stats["gamma"])
        torch.testing.assert_close(a.stats["rho"], b.stats["rho"])
        assert [r for r, _ in a.stats["losses"]] == [r for r, _ in b.stats["losses"]]
        for (_, la), (_, lb) in zip(a.stats["losses"], b.stats["losses"], strict=True):
            assert la == pytest.approx(lb)
        assert len({tuple(x) for _, x in a.stats["losses"]}) > 1, "losses vary"
        for wa, wb in zip(a.stats["weights"], b.stats["weights"], strict=True):
            assert wa == pytest.approx(wb)


def test_stats_have_the_single_draft_keys():
    target, corpus, heads = setup()
    prompt = corpus[15:16, :6]
    a = HedgeSpecDecoder(target, heads, tree=TreeConfig(3, 2, 6)).generate(prompt, 8)
    b = SingleDraftDecoder(target, [ChainDrafter(h, target) for h in heads],
                           draft_length=3).generate(prompt, 8)
    assert set(b.stats) <= set(a.stats)
    assert a.stats["drafters"] == [h.config.extra["name"] for h in heads]


@pytest.mark.parametrize("policy", ["normalhedge", "ucbspec", "oracle"])
def test_on_round_reports_each_tree_round(policy):
    target, corpus, heads = setup()
    prompt = corpus[15:16, :6]
    dec = HedgeSpecDecoder(target, heads, tree=TreeConfig(3, 2, 6), policy=policy)
    seen = []
    out = dec.generate(prompt, max_new_tokens=17, temperature=1.0, seed=2, on_round=seen.append)
    st = out.stats
    assert [r.drafter for r in seen] == st["chosen"]
    assert [r.accepted for r in seen] == st["accepted"]
    assert [r.drafter_name for r in seen] == [st["drafters"][i] for i in st["chosen"]]
    assert [t for r in seen for t in r.tokens] == out.sequences[0, 6:].tolist()
    assert len(st["tree_nodes"]) == len(seen) and st["tree"] == {"depth": 3, "top_k": 2,
                                                                 "total_tokens": 6}
    assert dec.target.feature_layers == dec.scheme.pool.feature_layers  # one target, features


def test_bad_input_is_a_value_error():
    target, _, heads = setup()
    with pytest.raises(ValueError, match="empty drafter pool"):
        HedgeSpecDecoder(target, [])
    with pytest.raises(ValueError, match="trained for target"):
        HedgeSpecDecoder(make_tiny_llama(vocab_size=128), heads)
    with pytest.raises(ValueError, match="TreeConfig"):
        HedgeSpecDecoder(target, heads, tree=TreeConfig(depth=0))
    with pytest.raises(ValueError, match="TreeConfig"):
        HedgeSpecDecoder(target, heads, tree=TreeConfig(top_k=0))
    with pytest.raises(ValueError, match="TreeConfig"):
        HedgeSpecDecoder(target, heads, tree=TreeConfig(depth=5, total_tokens=3))
    with pytest.raises(ValueError, match="tree must be a TreeConfig"):
        HedgeSpecDecoder(target, heads, tree=(5, 8, 48))
    with pytest.raises(ValueError, match=r"a pool mixing .*EagleHead.* is not supported"):
        HedgeSpecDecoder(target, [heads[0], target])
    with pytest.raises(ValueError, match=r"differs from tree\.depth"):
        HedgeSpecDecoder(target, heads, 4, tree=TreeConfig(depth=3))
    with pytest.raises(ValueError, match="cost_aware=True is for single drafts"):
        HedgeSpecDecoder(target, heads, cost_aware=True)
    with pytest.raises(ValueError, match=r"unknown decoder setting\(s\) \['window'\]"):
        HedgeSpecDecoder(target, heads, window=3)
    with pytest.raises(ValueError, match="unknown policy"):
        HedgeSpecDecoder(target, heads, policy="nope")
    dec = HedgeSpecDecoder(target, heads)
    with pytest.raises(ValueError, match="batch"):
        dec.generate(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        dec.generate(torch.ones(1, 3, dtype=torch.long), temperature=-1.0)


def test_one_decoder_class_for_heads_and_drafters():
    """``spec_adapters.eagle.HedgeSpecDecoder`` is the decoding package's class: the pool's kind
    picks the scheme (trees for heads, single drafts otherwise), the defaults are one set."""
    from spec_adapters.decoding import HedgeSpecDecoder as Decoder
    from spec_adapters.decoding.chain import ChainScheme
    from spec_adapters.drafters import PromptLookupDrafter
    from spec_adapters.eagle.decoder import TreeScheme

    assert HedgeSpecDecoder is Decoder
    target, _, heads = setup()
    trees = Decoder(target, heads)
    chain = Decoder(target, [PromptLookupDrafter(target.config.vocab_size)])
    assert isinstance(trees.scheme, TreeScheme) and isinstance(chain.scheme, ChainScheme)
    assert trees.draft_length == chain.draft_length == 5 and trees.scheme.tree == TreeConfig()
    with pytest.raises(ValueError, match="tree= applies to EAGLE heads"):
        Decoder(target, [PromptLookupDrafter(target.config.vocab_size)], tree=TreeConfig())
