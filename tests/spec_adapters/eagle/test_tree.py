"""Draft trees: configuration, EAGLE-2 structure, one-pass verification and cache compaction."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.core.sampling import SamplingConfig, tree_accept
from spec_adapters.eagle import HeadPool, TreeConfig
from spec_adapters.eagle.tree import (
    accept_greedy,
    ancestor_mask,
    compact_cache,
    draft_tree,
    verify_tree,
)
from spec_adapters.hf.target import new_cache
from tests.spec_adapters.eagle.helpers import features, setup


@pytest.mark.parametrize("kw", [dict(depth=0), dict(top_k=0), dict(depth=-1),
                                dict(depth=5, total_tokens=4), dict(top_k=1.5),
                                dict(depth=True)])
def test_bad_tree_config_is_a_value_error(kw):
    with pytest.raises(ValueError, match="TreeConfig"):
        TreeConfig(**kw)


def test_tree_config_accepts_the_minimal_chain():
    assert TreeConfig(depth=1, top_k=1, total_tokens=1).depth == 1


def test_ancestor_mask_marks_self_and_ancestors_only():
    #        0
    #      1   2
    #     3     4
    #     5
    parents = torch.tensor([-1, 0, 0, 1, 2, 3])
    m = ancestor_mask(parents)
    want = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 2, 4}, 5: {0, 1, 3, 5}}
    for i, row in enumerate(m):
        assert set(torch.nonzero(row).view(-1).tolist()) == want[i]


def _drafted(config: TreeConfig, prefix_len: int = 20, head_index: int = 0):
    """Target cache over ``seq[:prefix_len]``, pool synced, and head ``head_index``'s tree
    rooted at ``seq[prefix_len]``."""
    target, corpus, heads = setup()
    seq = corpus[15, :prefix_len + 1]
    pool = HeadPool(heads, target)
    f = features(target, seq[:-1], pool.feature_layers)
    pool.extend(f, seq[1:])
    cache = new_cache(target)
    with torch.no_grad():
        target(input_ids=seq[:-1].view(1, -1), cache=cache, use_cache=True)
    k, v = pool.cache_of(head_index)
    tree = draft_tree(heads[head_index], k, v, pool.pending_logits[head_index],
                      pool.pending_hidden[head_index], int(seq[-1]), config)
    return target, seq, pool, cache, tree


@pytest.mark.parametrize("config", [TreeConfig(5, 8, 48), TreeConfig(4, 3, 10),
                                    TreeConfig(3, 1, 3), TreeConfig(6, 2, 6)])
def test_draft_tree_is_eagle2_shaped(config):
    _, _, pool, _, tree = _drafted(config)
    M = tree.size
    par, dep = tree.parents.tolist(), tree.depths.tolist()
    assert par[0] == -1 and dep[0] == 0
    assert 1 <= M <= config.total_tokens
    assert max(dep) <= config.depth
    for i in range(1, M + 1):
        assert 0 <= par[i] < i, "parents precede children (closed under ancestors)"
        assert dep[i] == dep[par[i]] + 1
    kids = {}
    for i in range(1, M + 1):
        kids.setdefault(par[i], []).append(i)
    for c in kids.values():
        assert len(c) <= config.top_k
        toks = tree.tokens[c].tolist()
        assert len(set(toks)) == len(toks), "sibling tokens are distinct"
    # the root's children are the head's top-k (in order) when the budget allows
    root_kids = tree.tokens[kids[0]].tolist()
    top = pool.children(0, pool.pending_logits[0].view(1, -1), config.top_k)[0].tolist()
    assert root_kids == top[:len(root_kids)]
    if config.top_k == 1:
        assert par == list(range(-1, M)), "top_k = 1 is a chain"
        assert config.depth == M


def test_chain_follows_the_heads_greedy_rollout():
    """top_k = 1: the chain is the head's argmax rollout on its own hidden states."""
    _, _seq, pool, _, tree = _drafted(TreeConfig(4, 1, 4))
    head = pool.heads[0]
    k, v = pool.cache_of(0)
    logits, h = pool.pending_logits[0], pool.pending_hidden[0]
    P = k.shape[2]
    toks = []
    for d in range(4):
        t = head.d2t[logits.argmax()]
        toks.append(int(t))
        with torch.no_grad():
            lg, z, nk, nv = head(h.view(1, 1, -1), head.embed(t.view(1, 1)),
                                 torch.tensor([P + d]), k, v)
        k, v = torch.cat([k, nk], 2), torch.cat([v, nv], 2)
        logits, h = lg[0, 0], z[0, 0]
    assert tree.tokens[1:].tolist() == toks


@pytest.mark.parametrize("config", [TreeConfig(5, 8, 48), TreeConfig(4, 3, 12),
                                    TreeConfig(3, 1, 3)])
def test_tree_logits_equal_a_plain_forward_over_each_path(config):
    target, seq, pool, cache, tree = _drafted(config)
    logits, feats = verify_tree(target, cache, tree, pool.feature_layers)
    assert cache.get_seq_length() == seq.numel() + tree.size
    for i in range(tree.size + 1):
        path = torch.cat([seq, tree.tokens[tree.path_to(i)]])
        with torch.no_grad():
            out = target(input_ids=path.view(1, -1), output_hidden_states=True)
        ref_f = torch.cat([out.hidden_states[j][0, -1] for j in pool.feature_layers])
        torch.testing.assert_close(logits[i], out.logits[0, -1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(feats[i], ref_f, atol=1e-4, rtol=1e-4)


def _cache_tensors(cache):
    return [(layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("which", ["deepest", "greedy", "root", "first-child"])
def test_compacted_cache_equals_a_fresh_prefill(which):
    target, seq, pool, cache, tree = _drafted(TreeConfig(5, 4, 20))
    n = seq.numel() - 1
    logits, _ = verify_tree(target, cache, tree, pool.feature_layers)
    if which == "deepest":
        path = tree.path_to(tree.size)
        assert path != list(range(1, len(path) + 1)), "exercise the non-contiguous gather"
    elif which == "greedy":
        path, _ = accept_greedy(logits, tree)
    elif which == "root":
        path = []
    else:
        path = [1]
    compact_cache(cache, n, path, tree.size)
    kept = torch.cat([seq, tree.tokens[path]])
    fresh = new_cache(target)
    with torch.no_grad():
        target(input_ids=kept.view(1, -1), cache=fresh, use_cache=True)
    assert cache.get_seq_length() == kept.numel()
    for (k1, v1), (k2, v2) in zip(_cache_tensors(cache), _cache_tensors(fresh), strict=True):
        torch.testing.assert_close(k1, k2, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v1, v2, atol=1e-5, rtol=1e-5)
    # and decoding continues correctly from the compacted cache
    nxt = torch.tensor([[7]])
    with torch.no_grad():
        a = target(input_ids=nxt, cache=cache, use_cache=True).logits[0, -1]
        b = target(input_ids=torch.cat([kept, nxt[0]]).view(1, -1)).logits[0, -1]
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_greedy_acceptance_is_the_longest_argmax_path_and_matches_tree_accept():
    target, _seq, pool, cache, tree = _drafted(TreeConfig(5, 4, 20))
    logits, _ = verify_tree(target, cache, tree, pool.feature_layers)
    path, nxt = accept_greedy(logits, tree)
    arg = logits.argmax(-1)
    node = 0
    for c in path:  # every accepted node is the argmax after its parent
        assert int(tree.parents[c]) == node and int(tree.tokens[c]) == int(arg[node])
        node = c
    assert nxt == int(arg[node])
    kids = [i for i in range(1, tree.size + 1) if int(tree.parents[i]) == node]
    assert int(arg[node]) not in tree.tokens[kids].tolist(), "the path is maximal"
    p = SamplingConfig(0.0).probs(logits)
    assert tree_accept(p, tree.parents, tree.tokens) == (path, nxt)
