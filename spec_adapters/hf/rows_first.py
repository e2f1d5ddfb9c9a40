"""Linear layers computed as ``(W X^T)^T`` for the few rows of a decoding step (CPU).

On one of this project's 2-core CPUs (torch 2.13, float32), ``F.linear(X, W)`` for ``X`` of
1-8 rows was slow and its cost not monotone in the rows: a full SmolLM2-135M forward with the
KV cache (2 threads) took ~41 ms for 1 new token, ~71 ms for 2, ~92 ms for 3 and ~61 ms for 5
(``benchmarks/verify_cost.py``; docs/decoding.md, "Verification cost"). The same products
written as one GEMM with the weight on the left, ``torch.mm(W, X^T)^T``, read each weight once
for all rows: the forward then took ~27 ms for 1 token (the row duplicated: a 2-column GEMM
beat the matrix-vector kernel), ~28 ms for 2 and ~38 ms for 5. On another machine of the same
kind (an AMX-capable Xeon, the same torch and MKL) it is the other way round: ``F.linear``
runs 1-5 rows in ~35-54 ms and this layout in ~66-76 ms. Which one a decoder uses is therefore
measured on the machine (:func:`spec_adapters.hf.target.fastest_net`).

The values are the same products summed in another order: they differ from ``F.linear`` by
float32 rounding (~3e-5 in the logits of the default target), exactly as a verification pass
over ``K + 1`` rows already differs from ``K + 1`` one-row steps. Greedy decoding is
unaffected except at exact near-ties, which the benchmarks check on every prompt (output
identical to ``model.generate``).

:func:`rows_first_twin` returns a twin of a model that shares its parameters and buffers
(no weight is copied) with every ``nn.Linear`` computing this way for 1..``MAX_ROWS`` rows,
and as before for more (a prompt's prefill). The model itself is left unchanged, so
``model.generate`` (the baseline) runs as it always did.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional

__all__ = ["MAX_ROWS", "RowsFirstLinear", "rows_first_twin"]

MAX_ROWS = 8


class RowsFirstLinear(nn.Linear):
    """``nn.Linear`` whose forward over 1..:data:`MAX_ROWS` rows is ``(W X^T)^T`` (+ bias)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        m = rows.shape[0]
        if m > MAX_ROWS or m == 0:
            return functional.linear(x, self.weight, self.bias)
        cols = rows if m > 1 else torch.cat([rows, rows])  # 2 columns: a GEMM, not a GEMV
        out = torch.mm(self.weight, cols.T).T[:m]
        if self.bias is not None:
            out = out + self.bias
        return out.contiguous().view(*x.shape[:-1], -1)


def rows_first_twin(model: nn.Module) -> nn.Module:
    """A copy of ``model``'s module tree sharing all its parameters and buffers, whose plain
    ``nn.Linear`` layers are :class:`RowsFirstLinear` (subclasses of ``nn.Linear`` are left
    as they are: their forward may do more)."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    twin = copy.deepcopy(model, shared)
    for module in twin.modules():
        if type(module) is nn.Linear:
            module.__class__ = RowsFirstLinear
    return twin
