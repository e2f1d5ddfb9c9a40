"""EagleHead: persistence, target checks, reduced vocabulary, batched pool evaluation."""

from __future__ import annotations

import json

import pytest
import torch

from spec_adapters.eagle import EagleHead, EagleHeadConfig, HeadPool
from spec_adapters.eagle.head import build_draft_vocab, default_feature_layers
from tests.conftest import make_tiny_llama
from tests.spec_adapters.eagle.helpers import (
    features,
    peaked_target,
    random_head,
    setup,
    teacher_forced_logits,
)


def test_save_and_load_round_trip(tmp_path):
    target, corpus, heads = setup()
    head = heads[0]
    head.save_pretrained(tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "eagle_config.json").read_text())
    assert cfg["target_vocab_size"] == 96 and cfg["hidden_size"] == 32
    assert cfg["feature_layers"] == list(head.config.feature_layers)
    assert cfg["target_num_layers"] == 2 and cfg["target_fingerprint"]
    loaded = EagleHead.from_pretrained(tmp_path / "h", target=target)
    assert torch.equal(loaded.d2t, head.d2t)
    seq = corpus[15, :30]
    torch.testing.assert_close(teacher_forced_logits(loaded, target, seq),
                               teacher_forced_logits(head, target, seq), atol=0, rtol=0)


def test_loading_a_head_for_another_target_is_a_clear_error(tmp_path):
    _target, _, heads = setup()
    heads[0].save_pretrained(tmp_path / "h")
    other_vocab = make_tiny_llama(vocab_size=128)
    with pytest.raises(ValueError, match=r"trained for target.*vocab size 128 != 96"):
        EagleHead.from_pretrained(tmp_path / "h", target=other_vocab)
    deeper = make_tiny_llama(num_hidden_layers=3)
    with pytest.raises(ValueError, match="layers 3 != 2"):
        EagleHead.from_pretrained(tmp_path / "h", target=deeper)
    same_shape = peaked_target(seed=1)  # same architecture, different weights
    with pytest.raises(ValueError, match="fingerprint"):
        EagleHead.from_pretrained(tmp_path / "h", target=same_shape)
    with pytest.raises(ValueError, match="trained for target"):
        HeadPool([heads[0]], other_vocab)
    with pytest.raises(ValueError, match="not a saved EagleHead"):
        EagleHead.from_pretrained(tmp_path / "nothing")


def test_head_without_target_needs_bind(tmp_path):
    _, corpus, heads = setup()
    heads[1].save_pretrained(tmp_path / "h")
    head = EagleHead.from_pretrained(tmp_path / "h")
    with pytest.raises(RuntimeError, match="bind"):
        head.embed(corpus[0, :3])


def test_distribution_is_zero_outside_the_draft_vocabulary():
    target, corpus, heads = setup()
    head = heads[0]
    probs = head.full_probs(teacher_forced_logits(head, target, corpus[3, :40]))
    assert probs.shape == (39, 96)
    torch.testing.assert_close(probs.sum(-1), torch.ones(39, dtype=probs.dtype))
    outside = torch.ones(96, dtype=torch.bool)
    outside[head.d2t] = False
    assert outside.sum() == 96 - 64
    assert torch.all(probs[:, outside] == 0)
    assert torch.all(probs[:, head.d2t] > 0)


def test_draft_vocab_is_the_most_frequent_tokens():
    ids = torch.tensor([5] * 9 + [3] * 7 + [8] * 7 + [1] * 2 + [0])
    assert build_draft_vocab(ids, 10, 3).tolist() == [3, 5, 8]
    assert build_draft_vocab(ids, 10, 3, always=(9,)).tolist() == [3, 5, 9]
    assert build_draft_vocab(ids, 10, 7).tolist() == [0, 1, 2, 3, 4, 5, 8]  # filled by id
    for size in (0, 11):
        with pytest.raises(ValueError, match=rf"draft vocab size must be in \[1, 10\], got {size}"):
            build_draft_vocab(ids, 10, size)
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        build_draft_vocab(torch.tensor([1, 12]), 10, 3)


def test_default_feature_layers_are_low_middle_high():
    assert default_feature_layers(30) == (2, 15, 27)
    assert default_feature_layers(2) == (1, 2)


def test_bad_head_configs_are_value_errors():
    target = peaked_target()
    with pytest.raises(ValueError, match="feature_layers"):
        EagleHeadConfig.for_target(target, 32, feature_layers=(1, 5))
    with pytest.raises(ValueError, match="draft_vocab_size"):
        EagleHeadConfig.for_target(target, 200)
    cfg = EagleHeadConfig.for_target(target, 4)
    with pytest.raises(ValueError, match="d2t"):
        EagleHead(cfg, d2t=torch.tensor([1, 1, 2, 3]))


def _extend_twice(pool, target, seq):
    f = features(target, seq[:-1], pool.feature_layers)
    a = pool.extend(f[:11], seq[1:12])
    b = pool.extend(f[11:], seq[12:])
    return [torch.cat([x, y]) for x, y in zip(a, b, strict=True)]


def test_batched_evaluation_of_n_heads_equals_n_separate_evaluations():
    target, corpus, heads = setup()
    # three trained heads plus two random ones with another draft vocabulary (a second group)
    pool_heads = [*heads, random_head(target, 48, 7), random_head(target, 48, 8)]
    seq = corpus[9, :40]
    batched = HeadPool(pool_heads, target, batched=True)
    assert [g.members for g in batched.groups] == [[0, 1, 2], [3, 4]]
    got = _extend_twice(batched, target, seq)
    for i, head in enumerate(pool_heads):
        alone = HeadPool([head], target)
        ref = _extend_twice(alone, target, seq)[0]
        torch.testing.assert_close(got[i], ref, atol=1e-5, rtol=1e-5)
        # and equal to a from-scratch teacher-forced pass (the KV cache bookkeeping is right)
        torch.testing.assert_close(got[i], teacher_forced_logits(head, target, seq),
                                   atol=1e-4, rtol=1e-4)
        k, _v = batched.cache_of(i)
        torch.testing.assert_close(k, alone.cache_of(0)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batched.pending_hidden[i], alone.pending_hidden[0],
                                   atol=1e-5, rtol=1e-5)


def test_weights_the_heads_share_are_mapped_once_and_change_nothing():
    target, corpus, heads = setup()
    # two specialists of heads[0]: its fc / norm / lm_head, their own decoder layer
    twins = []
    for seed in (1, 2):
        twin = EagleHead(heads[0].config, d2t=heads[0].d2t.clone())
        twin.load_state_dict(heads[0].state_dict())
        with torch.no_grad():
            torch.manual_seed(seed)
            for name, prm in twin.named_parameters():
                if EagleHead.in_midlayer(name):
                    prm.add_(0.05 * torch.randn_like(prm))
        twins.append(twin.bind(target))
    pool = HeadPool([heads[0], *twins], target, batched=True)
    (group,) = pool.groups
    assert {"fc.weight", "lm_head.weight", "norm.weight"} <= group.shared
    assert not any(EagleHead.in_midlayer(k) for k in group.shared)
    seq = corpus[9, :40]
    got = _extend_twice(pool, target, seq)
    for i, head in enumerate([heads[0], *twins]):
        ref = _extend_twice(HeadPool([head], target), target, seq)[0]
        torch.testing.assert_close(got[i], ref, atol=1e-5, rtol=1e-5)
    assert (got[1] - got[2]).abs().max() > 1e-3


def test_heads_differ_so_the_batched_test_has_power():
    target, corpus, heads = setup()
    seq = corpus[9, :20]
    a, b = (teacher_forced_logits(h, target, seq) for h in heads[:2])
    assert (a - b).abs().max() > 1e-2


def test_target_name_is_location_independent(tmp_path):
    target, _, _ = setup()
    old = target.config._name_or_path
    try:
        target.config._name_or_path = "/somewhere/models/TinyTarget-abc123"
        head = random_head(target, 16, 0)
        assert head.config.target_name == "TinyTarget-abc123"
        head.save_pretrained(tmp_path / "h")
        target.config._name_or_path = "/elsewhere/cache/TinyTarget-abc123/"
        EagleHead.from_pretrained(tmp_path / "h", target=target)  # same model, moved
        target.config._name_or_path = "/elsewhere/cache/OtherTarget"
        with pytest.raises(ValueError, match="name 'OtherTarget' != 'TinyTarget-abc123'"):
            EagleHead.from_pretrained(tmp_path / "h", target=target)
    finally:
        target.config._name_or_path = old


def test_a_head_saved_in_the_old_format_is_a_clear_error(tmp_path):
    _, _, heads = setup()
    heads[0].save_pretrained(tmp_path / "h")
    cfg_path = tmp_path / "h" / "eagle_config.json"
    old = json.loads(cfg_path.read_text())
    assert old["format_version"] == 2
    del old["format_version"]  # what heads saved before the EAGLE-3 final norm look like
    cfg_path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"format 1 is not the current format 2.*retrain"):
        EagleHead.from_pretrained(tmp_path / "h")
    with pytest.raises(ValueError, match="format 1 is not"):
        EagleHeadConfig(**{**old, "format_version": 1})
