"""Rows-first linear layers: the same function as ``F.linear``, weights shared, model untouched."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.nn import functional

from spec_adapters.hf import target as target_module
from spec_adapters.hf.rows_first import MAX_ROWS, RowsFirstLinear, rows_first_twin
from spec_adapters.hf.target import TargetModel, fastest_net

torch.set_num_threads(1)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (1, 5), (3, 5), (1, 7, 5), (2, 3, 5), (1, 12, 5),
                                   (0, 5)])
def test_rows_first_linear_equals_f_linear(shape, bias):
    torch.manual_seed(0)
    layer = nn.Linear(5, 9, bias=bias)
    x = torch.randn(*shape)
    want = functional.linear(x, layer.weight, layer.bias)
    layer.__class__ = RowsFirstLinear
    got = layer(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_the_twin_shares_every_weight_and_leaves_the_model_as_it_was(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=0)

    class Scaled(nn.Linear):  # a subclass may do more than a product: kept as it is
        pass

    model.model.layers[0].mlp.down_proj.__class__ = Scaled
    twin = rows_first_twin(model)
    assert {id(p) for p in twin.parameters()} == {id(p) for p in model.parameters()}
    kinds = {type(m) for m in model.modules() if isinstance(m, nn.Linear)}
    assert kinds == {nn.Linear, Scaled}
    twin_kinds = {type(m) for m in twin.modules() if isinstance(m, nn.Linear)}
    assert twin_kinds == {RowsFirstLinear, Scaled}
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)  # the twin sees the model's weights, not a copy
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        torch.testing.assert_close(twin(input_ids=ids).logits, model(input_ids=ids).logits,
                                   atol=1e-5, rtol=1e-5)


def test_target_model_verifies_through_the_twin_on_cpu_with_the_same_logits(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=1)
    fast, plain = TargetModel(model, rows_first=True), TargetModel(model, rows_first=False)
    assert fast.net is not model and plain.net is model
    seq = torch.tensor([5, 9, 11, 3, 7, 8])
    for target in (fast, plain):
        target.prefill(seq)
    for n in range(MAX_ROWS + 2):  # 1 .. MAX_ROWS + 1 rows: rows-first, then F.linear
        drafts = torch.arange(3, 3 + n)
        got = fast.verify(seq[-1:], drafts)
        torch.testing.assert_close(got, plain.verify(seq[-1:], drafts), atol=1e-5, rtol=1e-5)
        fast.crop(seq.numel() - 1)
        plain.crop(seq.numel() - 1)


class _Slowed(nn.Module):
    """``net`` with every forward 30 ms longer."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net, self.config = net, net.config

    def forward(self, input_ids, cache=None, use_cache=True):
        time.sleep(0.03)
        return self.net(input_ids=input_ids, cache=cache, use_cache=use_cache)


def test_fastest_net_measures_which_layout_runs_a_step_faster(tiny_llama):
    model = tiny_llama(vocab_size=64, seed=2)
    best, costs = fastest_net([_Slowed(model), rows_first_twin(model)], repeats=1)
    assert best == 1 and costs[0] > costs[1] + 0.05  # two step sizes, each 30 ms slower
    best, _ = fastest_net([model, _Slowed(rows_first_twin(model))], repeats=1)
    assert best == 0


def test_target_model_takes_the_measured_layout_once_per_model(tiny_llama, monkeypatch):
    calls = []

    def twin_first(nets, **kw):
        calls.append(len(nets))
        return 1, [2.0, 1.0]

    monkeypatch.setattr(target_module, "fastest_net", twin_first)
    model = tiny_llama(vocab_size=64, seed=3)
    first, second = TargetModel(model), TargetModel(model)
    assert first.net is not model and second.net is not model and calls == [2]
    monkeypatch.setattr(target_module, "fastest_net", lambda nets, **kw: (0, [1.0, 2.0]))
    other = tiny_llama(vocab_size=64, seed=4)
    assert TargetModel(other).net is other
    assert TargetModel(other, rows_first=True).net is not other  # asked for: no measuring
