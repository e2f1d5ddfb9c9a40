"""Sampling: warped target/drafter distributions and the speculative acceptance rules.

Three things live here, all pure torch:

- :class:`SamplingConfig` turns logits into the *warped* probabilities that both the drafter
  (``q``) and the target (``p``) use: temperature, then top-k, then top-p (the order of
  transformers' logits warpers). Temperature 0 gives the one-hot argmax, so greedy decoding runs
  through exactly the same acceptance code as sampling.
- :func:`speculative_accept`: the single-draft rule of speculative sampling (Leviathan et al.
  2023, Chen et al. 2023): accept draft ``x_k`` with probability ``min(1, p_k(x_k) / q_k(x_k))``;
  on the first rejection sample the next token from ``max(0, p_k - q_k)`` normalised; if all ``K``
  drafts are accepted, sample a bonus token from ``p_K``.
- :func:`tree_accept`: EAGLE's recursive rejection sampling over a draft tree.
- :func:`coupled_accept`: point-mass drafts verified with the noise plain decoding would use
  at each position (a seeded request: output identical to plain decoding for its seed).

Each rule is written once, as a function of an abstract source of randomness (``_Chooser``).
The sampling functions run it with a torch generator; :func:`speculative_accept_distribution`
and :func:`tree_accept_distribution` run *the same code* with a chooser that follows every
branch and multiplies the branch probabilities, which gives the exact distribution of the
outcome. ``proofs_check`` verifies Theorems 1-2 and losslessness on those exact distributions, so
a wrong formula in the rule itself fails a check.

Randomness is consumed deterministically: a call draws a fixed number of uniforms up front
(``K + 1`` for a chain of ``K`` drafts, ``M + 1`` for a tree of ``M`` draft nodes), whatever
the outcome, so the generator's state after a round does not depend on what was accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from spec_adapters.core.coupled import coupled_walk
from spec_adapters.core.proposal import Rows, as_rows, check_distribution
from spec_adapters.core.warping import SamplingConfig

__all__ = [
    "SamplingConfig",
    "check_distribution",
    "coupled_accept",
    "coupled_accept_distribution",
    "sample_token",
    "speculative_accept",
    "speculative_accept_distribution",
    "tree_accept",
    "tree_accept_distribution",
    "tree_children",
]

def _check_tokens(tokens: torch.Tensor, name: str, vocab_size: int) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor):
        raise ValueError(f"{name} must be a torch.LongTensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of token ids, got dtype {tokens.dtype}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"{name} has token ids outside [0, {vocab_size}) "
            f"(min {int(tokens.min())}, max {int(tokens.max())})"
        )
    return tokens


# --------------------------------------------------------------------------------------------
class _Chooser:
    """Source of the random decisions of a rule. ``slot`` names the pre-drawn uniform used."""

    def bernoulli(self, prob: float, slot: int) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def categorical(self, weights: torch.Tensor, slot: int) -> int:  # pragma: no cover
        raise NotImplementedError


class _UniformChooser(_Chooser):
    """Decisions from uniforms drawn up front: ``u < prob``, and the inverse CDF."""

    def __init__(self, n_slots: int, generator: torch.Generator | None):
        device = generator.device if generator is not None else torch.device("cpu")
        self.u = torch.rand(
            n_slots, dtype=torch.float64, generator=generator, device=device
        ).tolist()

    def bernoulli(self, prob: float, slot: int) -> bool:
        return self.u[slot] < prob

    def categorical(self, weights: torch.Tensor, slot: int) -> int:
        return _inverse_cdf(weights, self.u[slot])


def _inverse_cdf(weights: torch.Tensor, u: float) -> int:
    """The token whose CDF interval (weights normalised) holds the uniform ``u``."""
    w = weights.to(torch.float64)
    cdf = w.cumsum(-1)
    target = u * float(cdf[-1])
    idx = int(
        torch.searchsorted(
            cdf, torch.tensor([target], dtype=torch.float64, device=cdf.device), right=True
        )
    )
    if idx >= w.shape[0]:  # u * total rounded up to total: take the last positive weight
        idx = int(torch.nonzero(w > 0)[-1])
    return idx


def sample_token(p: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """One token from the distribution ``p`` (``(V,)``) by the inverse CDF of one float64
    uniform from ``generator``: the one draw per position that plain decoding makes, and that
    :func:`coupled_accept` makes at each position for a seeded request."""
    device = generator.device if generator is not None else torch.device("cpu")
    u = float(torch.rand((), dtype=torch.float64, generator=generator, device=device))
    return _inverse_cdf(p, u)


class _Fork(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, options: list[tuple[object, float]]):
        self.options = options


class _ReplayChooser(_Chooser):
    """Replays a fixed prefix of decisions, then forks on the next one (exact enumeration)."""

    def __init__(self, prefix: Sequence[object]):
        self.prefix = prefix
        self.pos = 0

    def _next(self, options: list[tuple[object, float]]):
        if self.pos < len(self.prefix):
            value = self.prefix[self.pos]
            self.pos += 1
            return value
        raise _Fork([(v, pr) for v, pr in options if pr > 0])

    def bernoulli(self, prob: float, slot: int) -> bool:
        return self._next([(True, prob), (False, 1.0 - prob)])

    def categorical(self, weights: torch.Tensor, slot: int) -> int:
        w = weights.to(torch.float64)
        total = float(w.sum())
        return self._next([(int(i), float(w[i]) / total) for i in torch.nonzero(w > 0).flatten()])


def _enumerate(rule, *args) -> dict:
    """Exact outcome distribution of ``rule(*args, chooser)`` by following every branch."""
    dist: dict = {}
    stack: list[tuple[tuple, float]] = [((), 1.0)]
    while stack:
        prefix, prob = stack.pop()
        try:
            outcome = rule(*args, _ReplayChooser(prefix))
        except _Fork as fork:
            stack.extend(((*prefix, v), prob * pr) for v, pr in fork.options)
            continue
        dist[outcome] = dist.get(outcome, 0.0) + prob
    return dist


# --------------------------------------------------------------------------------------------
# single draft
# --------------------------------------------------------------------------------------------
def _check_speculative(p, q, draft, validate: bool = True) -> tuple[int, Rows]:
    q = as_rows(q)
    if validate:
        check_distribution(p, "p")
        q.check("q")
    if not isinstance(p, torch.Tensor) or p.dim() != 2 or len(q.lead) != 1:
        raise ValueError(
            f"p must be (K+1, V) and q (K, V), got p {tuple(getattr(p, 'shape', ()))}, q "
            f"{(*q.lead, q.vocab_size)}"
        )
    K, V = q.lead[0], q.vocab_size
    if p.shape != (K + 1, V):
        raise ValueError(
            f"p must have shape (K+1, V) = ({K + 1}, {V}) to match q {(K, V)}, "
            f"got {tuple(p.shape)}"
        )
    _check_tokens(draft, "draft", V)
    if tuple(draft.shape) != (K,):
        raise ValueError(f"draft must have shape (K,) = ({K},), got {tuple(draft.shape)}")
    q = q.to(p.device)
    qx = q.prob(draft.to(p.device))
    if bool((qx <= 0).any()):
        k = int(torch.nonzero(qx <= 0)[0])
        raise ValueError(f"draft token {k} has q = 0: it cannot have been drawn from q")
    return K, q


def _residual(pk: torch.Tensor, qk: torch.Tensor) -> torch.Tensor:
    """``max(0, p - q)`` (unnormalised). Falls back to ``p`` if it is identically zero, which
    only rounding can cause (exactly, a rejection has probability 0 when ``p == q``)."""
    r = (pk - qk).clamp_min(0)
    return r if bool((r > 0).any()) else pk


def _speculative_rule(p: torch.Tensor, q: Rows, draft: list[int], rand: _Chooser):
    """The speculative-sampling rule, written once (see :func:`speculative_accept`)."""
    K = len(draft)
    qx = q.prob(torch.tensor(draft, dtype=torch.long, device=p.device)).tolist()
    for k, x in enumerate(draft):
        # accept x_k with probability min(1, p_k(x) / q_k(x))
        if rand.bernoulli(min(1.0, float(p[k, x]) / qx[k]), slot=k):
            continue
        # first rejection: the next token comes from max(0, p_k - q_k), normalised (a point
        # mass at x: p_k with x removed)
        return k, rand.categorical(_residual(p[k], q.positions(slice(k, k + 1)).dense()[0]),
                                   slot=K)
    # all K accepted (or none drafted): the token comes from the target's distribution
    return K, rand.categorical(p[K], slot=K)


def speculative_accept(
    p: torch.Tensor,
    q: torch.Tensor | Rows,
    draft: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> tuple[int, int]:
    """Verify ``K`` drafted tokens by speculative sampling.

    For ``k = 1..K``: accept ``x_k`` with probability ``min(1, p_k(x_k) / q_k(x_k))``. At the
    first rejection, stop and sample the next token from ``max(0, p_k - q_k) / Z``. If all
    ``K`` are accepted, sample a bonus token from ``p_{K+1}``. The output is then distributed
    exactly as ``p`` (lossless), and the probability that ``x_k`` is accepted given the prefix is
    ``sum_x min(p_k(x), q_k(x))`` (Theorem 1 of the HedgeSpec paper; see
    :func:`spec_adapters.core.acceptance.acceptance_probability`). ``K = 0`` (the drafter
    abstained) is one plain target step: the token is drawn from ``p_1``.

    Parameters
    ----------
    p : torch.Tensor
        ``(K+1, V)`` warped target probabilities: row ``k`` is the distribution of the token
        after ``[context] + draft[:k]``.
    q : torch.Tensor or Rows
        The warped drafter distributions the drafts were sampled from: ``(K, V)``
        probabilities, or a :mod:`~spec_adapters.core.proposal` form with ``K`` rows. A point
        mass at ``d`` is accepted with probability ``p(d)`` and, on rejection, the token is
        drawn from ``p`` with ``d`` removed (vLLM's rule for drafts without probabilities);
        greedy: accepted iff ``d = argmax p``.
    draft : torch.LongTensor
        ``(K,)`` drafted token ids; ``q_k(draft[k])`` must be positive.
    generator : torch.Generator, optional
        Exactly ``K + 1`` float64 uniforms are drawn from it (on its device; the global CPU
        generator if None), whatever the
        outcome: ``u_k`` for the test of draft ``k``, ``u_K`` for the final token (inverse CDF).
    validate : bool, default True
        Check ``p`` and ``q`` in full (:func:`check_distribution`, :meth:`Rows.check`); a
        decoder that produced them passes ``False``. Shapes and the draft are always checked.

    Returns
    -------
    n_accepted : int
        Number of accepted drafts, in ``[0, K]``.
    next_token : int
        The resampled token (``n_accepted < K``) or the bonus token (``n_accepted == K``).

    Raises
    ------
    ValueError
        Bad probabilities, mismatched shapes, token ids out of range, or a draft with
        ``q = 0``.

    Notes
    -----
    Greedy (one-hot ``p``, and ``q`` one-hot or a point mass): the ratio is 1 or 0, the residual
    is the one-hot of the target's argmax, so this returns the longest prefix that matches the
    argmax and the argmax after it, exactly, with no NaN.
    """
    K, q = _check_speculative(p, q, draft, validate)
    rand = _UniformChooser(K + 1, generator)
    return _speculative_rule(p, q, draft.tolist(), rand)


def speculative_accept_distribution(
    p: torch.Tensor, q: torch.Tensor | Rows, draft: torch.Tensor
) -> dict[tuple[int, int], float]:
    """Exact distribution of :func:`speculative_accept`'s output for a fixed draft.

    Runs the same rule with every random decision enumerated (probabilities multiplied along
    each branch).

    Returns
    -------
    dict
        ``{(n_accepted, next_token): probability}`` over outcomes of positive probability.
    """
    _, q = _check_speculative(p, q, draft)
    return _enumerate(_speculative_rule, p, q, draft.tolist())


# --------------------------------------------------------------------------------------------
# point-mass drafts verified with the request's own noise (seeded requests)
# --------------------------------------------------------------------------------------------
class _DrawChooser(_Chooser):
    """Categorical decisions by the request's own sampler: ``draw(slot, weights)``."""

    def __init__(self, draw: Callable[[int, torch.Tensor], int]):
        self.draw = draw

    def categorical(self, weights: torch.Tensor, slot: int) -> int:
        return int(self.draw(slot, weights))


def _coupled_rule(p: torch.Tensor, draft: list[int], rand: _Chooser):
    """The coupled rule (:func:`~spec_adapters.core.coupled.coupled_walk`) on the rows ``p``,
    position ``k``'s token drawn by ``rand`` (what plain decoding draws there)."""
    return coupled_walk(draft, lambda k: rand.categorical(p[k], slot=k))


def coupled_accept(p: torch.Tensor, draft: Sequence[int],
                   draw: Callable[[int, torch.Tensor], int]) -> tuple[int, int]:
    """Verify point-mass drafts with the noise plain decoding would use (a seeded request).

    At position ``k = 0, 1, ...`` the token plain decoding draws there, ``t_k = draw(k,
    p[k])``, is drawn; draft ``d_k`` is accepted iff ``t_k = d_k``. The first ``t_k != d_k`` is
    the next token; with every draft accepted, ``t_K`` is the bonus token. So:

    - the emitted tokens are ``t_0, t_1, ...``, the tokens plain decoding emits with the same
      noise, *whatever was drafted*: a seeded request's output equals plain decoding's for its
      seed, given one draw per position in position order (``draw`` is the engine's own
      sampler on the request's generator; it is called once for each position emitted, so the
      generator ends where plain decoding's would);
    - ``P(accept d_k) = p_k(d_k)``, and on rejection ``t_k ~ p_k`` restricted to ``t != d_k``:
      the same law as speculative sampling with a point-mass ``q`` (``min(1, p / 1)``, the
      residual ``p`` without ``d_k``), so a seeded request accepts as much as an unseeded one.

    ``proofs_check`` (check ``6 seeded``) verifies both by enumeration.

    Parameters
    ----------
    p : torch.Tensor
        ``(K+1, V)`` warped target probabilities along the draft (as
        :func:`speculative_accept`).
    draft : sequence of int
        ``K`` drafted token ids (point masses: a chain of one token per position).
    draw : callable
        ``draw(k, p_k) -> token``: the request's own sampler for its ``k``-th position of the
        round, on the row ``p_k`` (an engine may draw from its logits instead, as long as the
        law is ``p_k``).

    Returns
    -------
    (n_accepted, next_token)
    """
    if p.dim() != 2 or p.shape[0] != len(draft) + 1:
        raise ValueError(f"p must be (K+1, V) = ({len(draft) + 1}, V) for {len(draft)} drafts, "
                         f"got {tuple(p.shape)}")
    return _coupled_rule(p, [int(x) for x in draft], _DrawChooser(draw))


def coupled_accept_distribution(p: torch.Tensor, draft: Sequence[int]
                                ) -> dict[tuple[int, int], float]:
    """Exact distribution of :func:`coupled_accept`'s output for a fixed draft, ``draw``
    being any exact sampler of its row (every decision enumerated)."""
    return _enumerate(_coupled_rule, p, [int(x) for x in draft])


# --------------------------------------------------------------------------------------------
# draft tree
# --------------------------------------------------------------------------------------------
def tree_children(parents: Sequence[int] | torch.Tensor) -> list[list[int]]:
    """Children lists of a tree given by parent indices (node 0 is the root, ``parents[0] = -1``).

    Children are listed in increasing node index, which is the order siblings are tried in.

    Raises
    ------
    ValueError
        If ``parents[0] != -1`` or some ``parents[i]`` is not in ``[0, i)``.
    """
    par = parents.tolist() if isinstance(parents, torch.Tensor) else list(parents)
    if not par or par[0] != -1:
        raise ValueError("parents[0] must be -1: node 0 is the root (the last verified token)")
    children: list[list[int]] = [[] for _ in par]
    for i in range(1, len(par)):
        a = par[i]
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < i:
            raise ValueError(
                f"parents[{i}] must be an index in [0, {i}) (parents before children), got {a!r}"
            )
        children[a].append(i)
    return children


def _check_tree(p, parents, tokens) -> list[list[int]]:
    check_distribution(p, "p")
    if p.dim() != 2:
        raise ValueError(f"p must be (M+1, V), one row per tree node, got {tuple(p.shape)}")
    if isinstance(parents, torch.Tensor) and (parents.is_floating_point() or parents.dim() != 1):
        raise ValueError("parents must be a 1-D integer tensor or a sequence of ints")
    children = tree_children(parents)
    n = len(children)
    if n < 2:
        raise ValueError("the tree must have at least one draft node besides the root (K >= 1)")
    if p.shape[0] != n:
        raise ValueError(f"p must have one row per tree node ({n}), got {p.shape[0]}")
    if not isinstance(tokens, torch.Tensor):
        tokens = torch.as_tensor(tokens)
    _check_tokens(tokens, "tokens", p.shape[1])
    if tuple(tokens.shape) != (n,):
        raise ValueError(f"tokens must have shape ({n},) like parents, got {tuple(tokens.shape)}")
    return children


def _tree_rule(p: torch.Tensor, children: list[list[int]], tokens: list[int], rand: _Chooser):
    """EAGLE's recursive rejection sampling, written once (see :func:`tree_accept`)."""
    node, path = 0, []
    while True:
        residual = p[node].to(torch.float64).clone()  # p' = current residual target dist
        accepted = None
        for c in children[node]:
            t = tokens[c]
            total = float(residual.sum())
            rest = total - float(residual[t])
            # child c accepted with probability p'(c) (1 when it holds all remaining mass)
            if rand.bernoulli(1.0 if rest <= 0 else float(residual[t]) / total, slot=c):
                accepted = c
                break
            residual[t] = 0.0  # rejected: p'(c) = 0, renormalised implicitly
        if accepted is None:
            # no child accepted: the next token comes from the residual
            return tuple(path), rand.categorical(residual, slot=0)
        path.append(accepted)
        node = accepted


def tree_accept(
    p: torch.Tensor,
    parents: Sequence[int] | torch.Tensor,
    tokens: torch.Tensor | Sequence[int],
    generator: torch.Generator | None = None,
) -> tuple[list[int], int]:
    """Verify a draft tree by EAGLE's recursive rejection sampling.

    The tree is the one the target verifies: node 0 is the root (the last verified token),
    nodes ``1..M`` are drafts, ``parents[i] < i``. Starting at the root with ``p' = p_root``,
    try the root's children in increasing node index: child ``c`` (token ``t_c``) is accepted
    with probability ``p'(t_c) / sum p'``; on rejection set ``p'(t_c) = 0`` (renormalise) and try
    the next sibling. On acceptance descend into ``c`` with ``p' = p_c`` and repeat. When no
    child of the current node is accepted (or it is a leaf), sample the next token from ``p'``.

    The output token sequence is distributed exactly as the target (for any tree chosen from
    the past), and the probability that some child of a node is accepted is the target mass of
    its distinct children tokens (Theorem 2; see
    :func:`spec_adapters.core.acceptance.tree_acceptance`). Drafter probabilities are not needed:
    EAGLE builds the tree deterministically (top-k), so each child is a point proposal.

    Parameters
    ----------
    p : torch.Tensor
        ``(M+1, V)`` warped target probabilities; row ``i`` is the distribution of the token
        after node ``i`` (its root-to-node path).
    parents : sequence of int or torch.LongTensor
        ``(M+1,)``; ``parents[0] = -1``, ``0 <= parents[i] < i``. Put the drafter's most
        likely child first among siblings (EAGLE's order); a repeated sibling token is never
        accepted twice (its residual mass is already 0).
    tokens : torch.LongTensor or sequence of int
        ``(M+1,)`` token ids of the nodes; ``tokens[0]`` (the root's token) is not used.
    generator : torch.Generator, optional
        Exactly ``M + 1`` float64 uniforms are drawn: ``u_i`` for the test of node ``i``,
        ``u_0`` for the final token.

    Returns
    -------
    path : list of int
        Accepted node indices, root-to-leaf, root excluded (``len(path)`` tokens accepted:
        ``tokens[path]``).
    next_token : int
        The token sampled after the last accepted node.

    Raises
    ------
    ValueError
        Bad probabilities, a malformed tree, ``M < 1`` (K < 1), mismatched shapes or token ids
        out of range.

    Notes
    -----
    Greedy (one-hot ``p``): a child is accepted iff it is the target's argmax, so the result is
    the longest root path matching the argmax, then the argmax.
    """
    children = _check_tree(p, parents, tokens)
    tok = torch.as_tensor(tokens).tolist()
    rand = _UniformChooser(len(children), generator)
    path, nxt = _tree_rule(p, children, tok, rand)
    return list(path), nxt


def tree_accept_distribution(
    p: torch.Tensor,
    parents: Sequence[int] | torch.Tensor,
    tokens: torch.Tensor | Sequence[int],
) -> dict[tuple[tuple[int, ...], int], float]:
    """Exact distribution of :func:`tree_accept`'s output (same rule, every branch enumerated).

    Returns
    -------
    dict
        ``{(path, next_token): probability}`` with ``path`` a tuple of accepted node indices.
    """
    children = _check_tree(p, parents, tokens)
    return _enumerate(_tree_rule, p, children, torch.as_tensor(tokens).tolist())
