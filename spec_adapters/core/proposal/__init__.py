"""Draft distributions in their cheapest exact form: point mass, sparse mixture, reduced
vocabulary, dense.

A drafter's distribution ``q`` at ``m`` positions (and, stacked, for ``N`` drafters) is a
:class:`Rows` object in one of four forms:

- :class:`PointMass`: ``q_j = delta(d_j)``: greedy drafting (any drafter), or a deterministic
  drafter; ``d_j = -1`` is the zero measure (the drafter abstains at ``j``);
- :class:`Sparse`: ``q_j(x) = v_j(x)`` on a small support ``S_j`` and ``lam_j b(x)`` off it,
  with ``b`` a fixed full-support :class:`Base` (an n-gram's Witten-Bell mixture: its matches
  plus ``lam`` times the unigram or uniform base);
- :class:`Reduced`: ``(..., m, Vd)`` probabilities on a fixed subset of ``Vd`` token ids, 0
  off it (an EAGLE-3 head's draft vocabulary): every operation costs ``Vd``, not ``V``;
- :class:`Dense`: ``(..., m, V)`` probabilities (model drafters).

Each form computes what the decoders need without building what it does not need:
``q(x)`` at given tokens (:meth:`Rows.prob`, for ``rho`` and the acceptance test) and the
overlap ``sum_x min(p(x), q(x))`` with a dense target row (:meth:`Rows.overlap`, Theorem 1's
gamma). A point mass needs one gather (``gamma = p(d)``); a sparse mixture gathers over its
support and adds the off-support term ``sum_{x not in S} min(p(x), lam b(x))``, which is exact
but needs one pass over ``V`` (it only arises at temperature > 0: greedy warps every form to a
point mass, see :func:`warp`).

:func:`warp` applies a :class:`~spec_adapters.core.sampling.SamplingConfig` to a drafter's
prediction (logits or an unwarped form): greedy gives the point mass at the argmax (for a
sparse mixture, found among its support and the base's top token off the support, no V-sized
tensor); temperature keeps a sparse mixture sparse in closed form (``q^{1/T}`` normalised, with
the base tempered once and cached); top-k / top-p on a sparse mixture fall back to dense.
Model-free drafters build their sparse rows in numpy (:meth:`Sparse.from_arrays`) with the
argmax already found by the compiled
:func:`~spec_adapters.drafters.ngram_kernel.sparse_argmax` (the rule of :meth:`Sparse.argmax`),
so greedy decoding turns them into point masses without building a tensor.
:func:`draw` samples one row. :func:`check_distribution` validates dense probabilities.

One module per form (:mod:`.point`, :mod:`.sparse`, :mod:`.reduced`, :mod:`.dense`), the
interface they share (:mod:`.rows`) and what the decoders do with any of them
(:mod:`.operations`); everything is importable from here.
"""

from spec_adapters.core.proposal.dense import Dense
from spec_adapters.core.proposal.operations import (
    as_rows,
    cat_rows,
    draw,
    stack_rows,
    target_and_draft,
    warp,
)
from spec_adapters.core.proposal.point import PointMass
from spec_adapters.core.proposal.reduced import Reduced
from spec_adapters.core.proposal.rows import Proposal, Rows, check_distribution
from spec_adapters.core.proposal.sparse import Base, Sparse

__all__ = ["Base", "Dense", "PointMass", "Proposal", "Reduced", "Rows", "Sparse", "as_rows",
           "cat_rows", "check_distribution", "draw", "stack_rows", "target_and_draft", "warp"]
