"""Cached target features: stored as the target computes them, resumable, refused when foreign;
training from them (with EAGLE-3's training-time test) and the chain and tree replays of
acceptance."""

from __future__ import annotations

import copy

import pytest
import torch

from spec_adapters.decoding.chain import HedgeSpecDecoder as ChainDecoder
from spec_adapters.eagle import HedgeSpecDecoder, TreeConfig
from spec_adapters.eagle.acceptance import chain_mat, pooled_mat, tree_mat
from spec_adapters.eagle.chain import HeadDrafters
from spec_adapters.eagle.features import Document, cache_features, load_features
from spec_adapters.eagle.head import vocab_coverage
from spec_adapters.eagle.train import TrainConfig, evaluate_head, train_head, unrolled_logits
from tests.spec_adapters.eagle.helpers import features, peaked_target, sample_corpus

LAYERS = (1, 2)


@pytest.fixture(scope="module")
def data():
    target = peaked_target()
    corpus = sample_corpus(target, n_seq=10, length=48, seed=2)
    # documents of different lengths: a "prompt" of 5 tokens, the rest trained on
    docs = [Document(tuple(corpus[i, :48 - 3 * i].tolist()), 5, "even" if i % 2 == 0 else "odd")
            for i in range(10)]
    return target, docs


def test_cached_features_are_the_targets_and_the_padding_changes_nothing(data, tmp_path):
    target, docs = data
    cache_features(target, docs, tmp_path, LAYERS, shard_docs=4, batch_tokens=200,
                   progress=False)
    fs = load_features(tmp_path, target)
    assert len(fs) == 10 and fs.tokens == sum(len(d.ids) for d in docs)
    assert fs.labels == [d.label for d in docs]
    for i in (0, 5, 9):  # every document equals its own unpadded forward (fp16 storage)
        a, b = int(fs.offsets[i]), int(fs.offsets[i + 1])
        ids = torch.tensor(docs[i].ids)
        assert fs.ids[a:b].tolist() == list(docs[i].ids)
        torch.testing.assert_close(torch.from_numpy(fs.features[a:b]).float(),
                                   features(target, ids, LAYERS), atol=2e-3, rtol=2e-3)
    batch = fs.batch([9, 0], 1000)  # right-padded; rows trained = the answer, not the padding
    n9 = len(docs[9].ids)
    assert batch.trained[0].tolist() == [False] * 4 + [True] * (n9 - 5) + [False] * (48 - n9 + 1)
    assert fs.domain("odd").labels == ["odd"] * 5


def test_an_interrupted_pass_resumes_to_the_same_bytes_and_foreign_folders_are_refused(
        data, tmp_path):
    target, docs = data
    cache_features(target, docs, tmp_path / "a", LAYERS, shard_docs=4, progress=False)
    cache_features(target, docs, tmp_path / "b", LAYERS, shard_docs=4, progress=False)
    (tmp_path / "b" / "shard-00001.safetensors").unlink()  # killed before shard 1 was written
    with pytest.raises(ValueError, match="incomplete"):
        load_features(tmp_path / "b")
    cache_features(target, docs, tmp_path / "b", LAYERS, shard_docs=4, progress=False)
    for i in range(3):
        name = f"shard-{i:05d}.safetensors"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with pytest.raises(ValueError, match="other settings"):
        cache_features(target, docs[:-1], tmp_path / "a", LAYERS, shard_docs=4, progress=False)
    with pytest.raises(ValueError, match="holds features of target"):
        load_features(tmp_path / "a", peaked_target(seed=1))
    with pytest.raises(ValueError, match="not a feature folder"):
        load_features(tmp_path / "nothing")
    with pytest.raises(ValueError, match="document 1 "):
        cache_features(target, [docs[0], Document((1, 2), 2)], tmp_path / "c", LAYERS,
                       progress=False)


def _drafted(head, f, ids, t: int, j: int) -> torch.Tensor:
    """The logits of a depth-(j+1) draft node at position t, computed the way drafting does:
    the head's cache of real rows ``<= t - j``, then ``j`` rows fed the head's own hidden."""
    emb = head.embed(ids[1:]).unsqueeze(0)
    r = t - j
    logits, h, k, v = head(f[None, :r + 1], emb[:, :r + 1], torch.arange(r + 1), fuse=True)
    h = h[:, -1:]
    for i in range(1, j + 1):
        p = r + i
        logits, h, kk, vv = head(h, emb[:, p:p + 1], torch.tensor([p]), k, v)
        k, v = torch.cat([k, kk], 2), torch.cat([v, vv], 2)
    return logits[0, -1]


def test_the_training_time_test_unrolls_exactly_as_drafting_attends(data, tmp_path):
    target, docs = data
    cache_features(target, docs, tmp_path, LAYERS, shard_docs=4, progress=False)
    fs = load_features(tmp_path, target)
    head, _ = train_head(target, fs, None, TrainConfig(steps=3, batch_size=2, seq_len=64,
                                                         draft_vocab_size=48, eval_every=99),
                         progress=False, log=None)
    batch = fs.batch([1], 64)
    with torch.no_grad():
        steps, _ = unrolled_logits(head, batch, 3)
        for j in (1, 2):
            for t in (j, 7, 30):
                torch.testing.assert_close(
                    steps[j][0, t], _drafted(head, batch.features[0], batch.ids[0], t, j),
                    atol=1e-4, rtol=1e-4)
        # and a different step is really different input (the test can fail)
        assert not torch.allclose(steps[2][0, 30], steps[0][0, 30], atol=1e-3)


def test_training_from_the_cache_learns_resumes_and_the_ttt_changes_it(data, tmp_path):
    target, docs = data
    cache_features(target, docs[:8], tmp_path / "train", LAYERS, progress=False)
    cache_features(target, docs[8:], tmp_path / "held", LAYERS, progress=False)
    fs, held = load_features(tmp_path / "train", target), load_features(tmp_path / "held")
    cfg = dict(batch_size=2, seq_len=64, lr=1e-2, draft_vocab_size=48, eval_every=40,
               checkpoint_every=3, seed=1)
    h0, _ = train_head(target, fs, None, TrainConfig(steps=1, **cfg), progress=False, log=None)
    a, hist = train_head(target, fs, tmp_path / "a", TrainConfig(steps=40, **cfg),
                         heldout=held, progress=False, log=None)
    assert evaluate_head(a, target, held)["top1"] > evaluate_head(h0, target, held)["top1"] + 0.1
    assert hist[-1]["tokens"] > 0 and "top1" in hist[-1]
    train_head(target, fs, tmp_path / "b", TrainConfig(steps=40, **cfg), progress=False,
               log=None, stop_after=7)
    b, _ = train_head(target, fs, tmp_path / "b", TrainConfig(steps=40, **cfg), progress=False,
                      log=None)
    for (n, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), n
    c, _ = train_head(target, fs, None, TrainConfig(steps=40, ttt_steps=3, **cfg),
                      progress=False, log=None)
    assert not torch.equal(a.fc.weight, c.fc.weight)


@pytest.fixture(scope="module")
def answer(data, tmp_path_factory):
    """The target's greedy answer to a 5-token prompt, its cached features and a head trained
    on them: ``(prompt, answer ids, features, head)``."""
    target, docs = data
    folder = tmp_path_factory.mktemp("answer")
    prompt = torch.tensor(docs[0].ids[:5])
    with torch.no_grad():
        out = target.generate(prompt.view(1, -1), max_new_tokens=30, do_sample=False,
                              pad_token_id=0)[0]
    cache_features(target, [Document(tuple(out.tolist()), 5)], folder, LAYERS,
                   progress=False)
    fs = load_features(folder, target)
    head, _ = train_head(target, fs, None,
                         TrainConfig(steps=30, batch_size=1, seq_len=64, lr=1e-2,
                                     draft_vocab_size=96, eval_every=99), progress=False,
                         log=None)
    return prompt, out, fs, head


def test_the_chain_and_tree_replays_are_the_decoders_mat(data, answer):
    target, _ = data
    prompt, out, fs, head = answer
    for k in (1, 3):
        (row,) = chain_mat(head, fs, k)
        dec = HedgeSpecDecoder(target, [head], tree=TreeConfig(depth=k, top_k=1, total_tokens=k),
                               policy="fixed:0")
        res = dec.generate(prompt.view(1, -1), max_new_tokens=30, temperature=0.0)
        assert res.sequences[0, 5:].tolist() == out[5:].tolist()
        assert row["tokens"] == res.stats["new_tokens"] == 30
        assert row["rounds"] == res.stats["target_calls"]
        assert row["accepted"] == res.stats["accepted"], k
        assert max(row["accepted"]) <= k
    assert pooled_mat([row, row]) == row["mat"] > 1.0  # the head does get tokens accepted
    for tree in (TreeConfig(depth=3, top_k=3, total_tokens=8), TreeConfig(2, 4, 6)):
        (row,) = tree_mat(head, fs, tree)
        dec = HedgeSpecDecoder(target, [head], tree=tree, policy="fixed:0")
        res = dec.generate(prompt.view(1, -1), max_new_tokens=30, temperature=0.0)
        assert res.sequences[0, 5:].tolist() == out[5:].tolist()
        assert row["rounds"] == res.stats["target_calls"] and row["tokens"] == 30
        assert row["accepted"] == res.stats["accepted"], tree
        assert max(row["accepted"]) <= tree.depth
    with pytest.raises(ValueError, match="tree must be a TreeConfig"):
        tree_mat(head, fs, 3)


def test_a_bfloat16_head_reads_float_features_and_decodes_the_targets_answer(data, answer):
    """The heads in bfloat16 (half the weight traffic on a CPU) over a float32 target and
    float16 cached features: the replays and both decoders run, and the output is the
    target's; acceptance stays the float32 head's up to the rounding of near-ties."""
    target, _ = data
    prompt, out, fs, head = answer
    half = copy.deepcopy(head).to(torch.bfloat16).bind(target)
    assert half.fc.weight.dtype == torch.bfloat16 and half.inv_freq.dtype == torch.float32
    (row,) = chain_mat(half, fs, 3)
    (ref,) = chain_mat(head, fs, 3)
    assert abs(row["mat"] - ref["mat"]) <= 0.25 * ref["mat"] and row["mat"] > 1.0
    assert tree_mat(half, fs, TreeConfig(3, 3, 8))[0]["mat"] > 1.0
    for dec in (HedgeSpecDecoder(target, [half], tree=TreeConfig(3, 3, 8), policy="fixed:0"),
                ChainDecoder(target, HeadDrafters([half], target), draft_length=3,
                             policy="fixed:0")):
        res = dec.generate(prompt.view(1, -1), max_new_tokens=30, temperature=0.0)
        assert res.sequences[0].tolist() == out.tolist()
        assert sum(res.stats["accepted"]) > 0


def test_vocab_coverage_counts_the_most_frequent_tokens_mass():
    ids = torch.tensor([5] * 6 + [2] * 3 + [9])
    assert vocab_coverage(ids, 12, [1, 2, 3, 12]) == {1: 0.6, 2: 0.9, 3: 1.0, 12: 1.0}
