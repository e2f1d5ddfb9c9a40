"""Shipped heads: a midlayer-only specialist shares its base's tensors, the int8 folder loads
back within the quantisation error, and every way a folder can be wrong is refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from spec_adapters.eagle.head import EagleHead
from spec_adapters.eagle.shipped import (
    MANIFEST,
    dequantize_int8,
    load_shipped,
    quantize_int8,
    ship_heads,
)
from spec_adapters.eagle.train import TrainConfig, train_head
from tests.spec_adapters.eagle.helpers import peaked_target, random_head, sample_corpus


@pytest.fixture(scope="module")
def pool():
    target = peaked_target()
    corpus = sample_corpus(target, n_seq=6, length=48, seed=3).reshape(-1)
    base = random_head(target, 48, seed=0)
    cfg = TrainConfig(steps=3, batch_size=2, seq_len=24, lr=1e-2, draft_vocab_size=48,
                      eval_every=99, midlayer_only=True)
    spec, _ = train_head(target, corpus, None, cfg, head=_copy(base, target), progress=False,
                         log=None)
    return target, base, spec


def _copy(head: EagleHead, target) -> EagleHead:
    twin = EagleHead(head.config, d2t=head.d2t.clone())
    twin.load_state_dict(head.state_dict())
    return twin.bind(target)


def test_midlayer_only_training_moves_the_decoder_layer_and_nothing_else(pool):
    _target, base, spec = pool
    moved = {k for k, v in spec.state_dict().items() if not torch.equal(v, base.state_dict()[k])}
    assert moved and all(EagleHead.in_midlayer(k) for k in moved)
    assert "q_proj.weight" in moved and not EagleHead.in_midlayer("lm_head.weight")


def test_int8_rows_are_within_half_a_step():
    w = torch.randn(7, 33) * torch.logspace(-3, 1, 7).view(-1, 1)
    w[3] = 0.0
    q, s = quantize_int8(w)
    assert q.dtype == torch.int8 and s.shape == (7, 1)
    err = (dequantize_int8(q, s) - w).abs()
    assert torch.all(err <= s / 2 + 1e-7) and torch.all(err[3] == 0)


def test_a_shipped_folder_loads_back_as_the_heads_within_quantisation(pool, tmp_path):
    target, base, spec = pool
    manifest = ship_heads({"general": base, "code": spec}, tmp_path / "h", "make heads")
    assert manifest["heads"]["code"]["base"] == "general"
    assert not (tmp_path / "h.tmp").exists()
    stored = (tmp_path / "h" / "code" / "model.safetensors").stat().st_size
    assert stored < (tmp_path / "h" / "general" / "model.safetensors").stat().st_size
    heads = load_shipped(tmp_path / "h", target)
    assert list(heads) == ["general", "code"]
    for name, orig in (("general", base), ("code", spec)):
        got = heads[name].state_dict()
        for key, value in orig.state_dict().items():
            if value.is_floating_point() and value.dim() == 2:  # int8: half a step per row
                step = value.abs().amax(1, keepdim=True) / 127
                assert torch.all((got[key] - value).abs() <= step / 2 + 1e-6), (name, key)
            else:
                torch.testing.assert_close(got[key], value, atol=1e-3, rtol=1e-3)
        assert heads[name].config.extra["name"] == name
    torch.testing.assert_close(heads["code"].lm_head.weight, heads["general"].lm_head.weight)
    half = load_shipped(tmp_path / "h", target, names=["code"], dtype=torch.bfloat16)["code"]
    for key, value in heads["code"].state_dict().items():  # the float32 load, rounded once
        want = value.to(torch.bfloat16) if value.is_floating_point() else value
        assert torch.equal(half.state_dict()[key], want), key
    assert half.embed(torch.tensor([1])).dtype == torch.bfloat16  # bound, in its dtype


def test_foreign_changed_or_incomplete_folders_are_refused_by_name(pool, tmp_path):
    target, base, spec = pool
    with pytest.raises(ValueError, match=r"does not share d2t with .general."):
        ship_heads({"general": base, "other": random_head(target, 48, seed=5)},
                   tmp_path / "x", "cmd")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="no base head 'general'"):
        ship_heads({"code": spec}, tmp_path / "x", "cmd")
    ship_heads({"general": base, "code": spec}, tmp_path / "h", "cmd")
    foreign = r"trained for target .*\(fingerprint \w+\), not .*\(fingerprint"
    with pytest.raises(ValueError, match=foreign):
        load_shipped(tmp_path / "h", peaked_target(seed=1))
    with pytest.raises(ValueError, match=r"no heads \['sql'\]"):
        load_shipped(tmp_path / "h", target, ["sql"])
    weights = tmp_path / "h" / "code" / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 1
    weights.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"code/model\.safetensors has SHA-256 .* changed"):
        load_shipped(tmp_path / "h", target)
    assert set(load_shipped(tmp_path / "h", target, ["general"])) == {"general"}
    m = json.loads((tmp_path / "h" / MANIFEST).read_text())
    del m["heads"]["general"]
    (tmp_path / "h" / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ValueError, match="built on 'general', which the folder lacks"):
        load_shipped(tmp_path / "h", target)
    with pytest.raises(ValueError, match="not a shipped heads folder"):
        load_shipped(tmp_path, target)
