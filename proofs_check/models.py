"""Small random models where every quantity can be enumerated exactly.

A *model* is a Markov chain of order ``r >= 1`` over a vocabulary of ``V`` tokens: the next
token's logits depend on the last ``r`` tokens, so distributions depend on the prefix (which is
what makes Theorem 3's estimator subtle). Targets and drafters are such chains; a
:class:`Problem` bundles a target, a pool of drafters, a prompt, the draft length ``K`` and the
:class:`~spec_adapters.core.sampling.SamplingConfig` that warps both.

Enumeration helpers here compute exact outcome distributions of one decoding round *through the
product's own rules* (:func:`spec_adapters.core.sampling.speculative_accept_distribution` and
:func:`~spec_adapters.core.sampling.tree_accept_distribution`), so the checks test the product,
not a
re-implementation of it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from spec_adapters.core.sampling import (
    SamplingConfig,
    speculative_accept_distribution,
    tree_accept_distribution,
)

DTYPE = torch.float64

#: Logit families: smooth (Gaussian), peaked (near-deterministic: one token holds 1 - ~1e-6),
#: sparse (random support per context, so target and drafter supports are often disjoint).
KINDS = ("smooth", "peaked", "sparse")


@dataclass(frozen=True)
class Chain:
    """Markov chain of order ``order``: ``logits[index(last order tokens)]`` = next logits."""

    logits: torch.Tensor  # (V ** order, V), float64, -inf allowed
    order: int
    name: str = "chain"

    @property
    def vocab_size(self) -> int:
        return self.logits.shape[1]

    def index(self, seq: tuple[int, ...]) -> int:
        idx = 0
        for t in seq[-self.order :]:
            idx = idx * self.vocab_size + t
        return idx

    def warped(self, cfg: SamplingConfig) -> WarpedChain:
        return WarpedChain(self, cfg.probs(self.logits))


@dataclass(frozen=True)
class WarpedChain:
    """A chain with its warped next-token probabilities precomputed for every context."""

    chain: Chain
    table: torch.Tensor  # (V ** order, V) probabilities

    @property
    def vocab_size(self) -> int:
        return self.table.shape[1]

    def dist(self, seq: tuple[int, ...]) -> torch.Tensor:
        """Next-token distribution after ``seq`` (``len(seq) >= order``)."""
        return self.table[self.chain.index(seq)]

    def dists_along(self, seq: tuple[int, ...], tokens: tuple[int, ...]) -> torch.Tensor:
        """``(len(tokens) + 1, V)``: distributions after ``seq``, ``seq + tokens[:1]``, ..."""
        return torch.stack([self.dist(seq + tokens[:j]) for j in range(len(tokens) + 1)])

    def seq_prob(self, seq: tuple[int, ...], tokens: tuple[int, ...]) -> float:
        """Probability that the chain generates ``tokens`` after ``seq``."""
        prob = 1.0
        for j, t in enumerate(tokens):
            prob *= float(self.dist(seq + tokens[:j])[t])
        return prob


def random_chain(
    rng: np.random.Generator, V: int, order: int, kind: str, name: str = "chain"
) -> Chain:
    """A random chain whose logits come from the family ``kind`` (see :data:`KINDS`)."""
    rows = V**order
    if kind == "smooth":
        logits = rng.normal(0.0, 1.5, size=(rows, V))
    elif kind == "peaked":
        logits = rng.normal(0.0, 0.5, size=(rows, V))
        logits[np.arange(rows), rng.integers(0, V, size=rows)] += 14.0
    elif kind == "sparse":
        logits = rng.normal(0.0, 1.0, size=(rows, V))
        for r in range(rows):
            keep = rng.choice(V, size=int(rng.integers(1, max(2, V // 2 + 1))), replace=False)
            drop = np.setdiff1d(np.arange(V), keep)
            logits[r, drop] = -np.inf
    else:
        raise ValueError(f"unknown chain kind {kind!r}; expected one of {KINDS}")
    return Chain(torch.tensor(logits, dtype=DTYPE), order, name)


def perturbed_chain(
    rng: np.random.Generator,
    base: Chain,
    noise: float,
    order: int | None = None,
    name: str = "close",
) -> Chain:
    """A drafter close to ``base``: its logits plus Gaussian noise (same support)."""
    logits = base.logits + torch.tensor(rng.normal(0.0, noise, size=tuple(base.logits.shape)))
    return Chain(logits, base.order, name)


@dataclass
class Problem:
    """A target, a drafter pool, a prompt, a draft length and a sampling config."""

    target: Chain
    drafters: list[Chain]
    prompt: tuple[int, ...]
    K: int
    cfg: SamplingConfig
    name: str = ""
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def V(self) -> int:  # noqa: N802 - the paper's symbol
        return self.target.vocab_size

    @cached_property
    def p(self) -> WarpedChain:
        return self.target.warped(self.cfg)

    @cached_property
    def qs(self) -> list[WarpedChain]:
        return [d.warped(self.cfg) for d in self.drafters]

    def describe(self) -> str:
        cfg = self.cfg
        warp = "greedy" if cfg.greedy else f"T={cfg.temperature:g}"
        if cfg.top_k is not None:
            warp += f",top_k={cfg.top_k}"
        if cfg.top_p < 1:
            warp += f",top_p={cfg.top_p:g}"
        kinds = "/".join(d.name for d in self.drafters)
        return f"V={self.V} K={self.K} r={self.target.order} {self.target.name}<-{kinds} {warp}"


CONFIGS = (
    SamplingConfig(),
    SamplingConfig(temperature=1.0),
    SamplingConfig(temperature=0.7, top_k=2),
    SamplingConfig(temperature=1.3, top_p=0.8),
)


def random_problems(
    rng: np.random.Generator,
    count: int,
    *,
    V_range=(2, 6),
    K_range=(1, 4),
    n_drafters: int = 1,
    max_cells: int = 1300,
) -> list[Problem]:
    """``count`` random problems cycling through sampling configs and logit families.

    ``max_cells`` caps ``V ** K`` (the number of drafts enumerated per context).
    """
    out = []
    for i in range(count):
        cfg = CONFIGS[i % len(CONFIGS)]
        V = int(rng.integers(V_range[0], V_range[1] + 1))
        K = int(rng.integers(K_range[0], K_range[1] + 1))
        while K > 1 and max_cells < V**K:
            K -= 1
        order = int(rng.integers(1, 3)) if V <= 4 else 1
        tkind = KINDS[(i // len(CONFIGS)) % len(KINDS)]
        target = random_chain(rng, V, order, tkind, name=tkind)
        drafters = []
        for j in range(n_drafters):
            dkind = ["close", *KINDS][(i + j) % (len(KINDS) + 1)]
            if dkind == "close" and tkind != "sparse":
                drafters.append(perturbed_chain(rng, target, 0.7, name="close"))
            else:
                dk = dkind if dkind != "close" else "smooth"
                drafters.append(
                    random_chain(rng, V, int(rng.integers(1, 3)) if V <= 4 else 1, dk, name=dk)
                )
        prompt = tuple(int(t) for t in rng.integers(0, V, size=2))
        out.append(Problem(target, drafters, prompt, K, cfg, name=f"#{i}"))
    return out


def toy_problem() -> Problem:
    """The toy case of REFERENCES.md where the paper's estimator is biased.

    Tokens a=0, b=1, prompt s=2. Target after s: (1/2, 1/2, 0); the drafter proposes a
    deterministically. After a the drafter equals the target (gamma_2(a) = 1); after b their
    supports are disjoint (gamma_2(b) = 0). With K = 2: P(L >= 1) = 1/2, P(L >= 2) = 1/2, so
    E[tokens per call] = 2, while E[1 + gamma_1 + gamma_1 gamma_2] = 1.75.
    """
    ninf = -math.inf
    t = torch.tensor([[0.0, 0.0, 0.0], [0.0, ninf, ninf], [0.0, 0.0, ninf]], dtype=DTYPE)
    d = torch.tensor([[0.0, 0.0, 0.0], [ninf, 0.0, ninf], [0.0, ninf, ninf]], dtype=DTYPE)
    return Problem(
        Chain(t, 1, "toy"),
        [Chain(d, 1, "toy")],
        (2,),
        2,
        SamplingConfig(temperature=1.0),
        name="toy",
    )


# --------------------------------------------------------------------------------------------
# enumeration of one round, through the product's rules
# --------------------------------------------------------------------------------------------
def enumerate_drafts(q: WarpedChain, ctx: tuple[int, ...], K: int):
    """Yield ``(draft, weight)`` for every draft of positive probability under ``q``."""

    def rec(prefix: tuple[int, ...], w: float):
        if len(prefix) == K:
            yield prefix, w
            return
        dist = q.dist(ctx + prefix)
        for t in torch.nonzero(dist > 0).flatten().tolist():
            yield from rec((*prefix, t), w * float(dist[t]))

    yield from rec((), 1.0)


def single_round(problem: Problem, i: int, ctx: tuple[int, ...]) -> dict[tuple[int, ...], float]:
    """Exact distribution of the tokens one single-draft round with drafter ``i`` appends.

    Drafts are enumerated from ``q_i``; each is verified by
    :func:`spec_adapters.core.sampling.speculative_accept_distribution`. Keys are
    ``draft[:n_accepted] + (next_token,)``.
    """
    key = ("single", i, ctx)
    if key in problem._cache:
        return problem._cache[key]
    p, q, K = problem.p, problem.qs[i], problem.K
    out: dict[tuple[int, ...], float] = {}
    for draft, w in enumerate_drafts(q, ctx, K):
        pk = p.dists_along(ctx, draft)
        qk = q.dists_along(ctx, draft)[:K]
        dist = speculative_accept_distribution(pk, qk, torch.tensor(draft))
        for (n, nxt), pr in dist.items():
            new = (*draft[:n], nxt)
            out[new] = out.get(new, 0.0) + w * pr
    problem._cache[key] = out
    return out


def accepted_count_distribution(problem: Problem, i: int, ctx: tuple[int, ...]) -> list[float]:
    """``P(n_accepted = m)`` for ``m = 0..K`` of one single-draft round (from the rule)."""
    probs = [0.0] * (problem.K + 1)
    for new, pr in single_round(problem, i, ctx).items():
        probs[len(new) - 1] += pr
    return probs


@dataclass(frozen=True)
class Tree:
    """A draft tree: node 0 is the root; ``parents[i] < i``; siblings in the order tried."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]

    def path(self, i: int) -> tuple[int, ...]:
        toks = []
        while i > 0:
            toks.append(self.tokens[i])
            i = self.parents[i]
        return tuple(reversed(toks))

    def children(self, i: int) -> list[int]:
        return [c for c in range(1, len(self.parents)) if self.parents[c] == i]


def eagle_tree(q: WarpedChain, ctx: tuple[int, ...], depth: int, top_k: int, total: int) -> Tree:
    """EAGLE-2's dynamic tree from drafter ``q`` at ``ctx``, deterministically.

    Expand the ``top_k`` most probable children of the ``top_k`` best frontier nodes (by
    cumulative log-probability) for ``depth`` levels; keep the best ``total`` nodes (ancestors
    before descendants on ties); siblings ordered by decreasing drafter probability.
    """
    nodes = [(-1, ctx[-1], 0.0, 0)]  # (parent, token, cum logprob, depth)
    frontier = [0]
    for level in range(1, depth + 1):
        frontier = sorted(frontier, key=lambda n: (-nodes[n][2], n))[:top_k]
        new = []
        for n in frontier:
            path = _path(nodes, n)
            dist = q.dist(ctx + path)
            order = sorted(range(len(dist)), key=lambda t: (-float(dist[t]), t))
            for t in order[:top_k]:
                if float(dist[t]) > 0:
                    nodes.append((n, t, nodes[n][2] + math.log(float(dist[t])), level))
                    new.append(len(nodes) - 1)
        frontier = new
    kept = sorted(range(1, len(nodes)), key=lambda n: (-nodes[n][2], nodes[n][3], n))[:total]
    kept_set = set(kept)
    kept = [n for n in kept if _ancestors_in(nodes, n, kept_set)]
    # reindex: by depth, then parent's new index, then decreasing drafter probability
    new_index = {0: 0}
    ordered: list[int] = []
    for level in range(1, depth + 1):
        at = [n for n in kept if nodes[n][3] == level]
        at.sort(key=lambda n: (new_index[nodes[n][0]], -nodes[n][2], n))
        for n in at:
            new_index[n] = len(ordered) + 1
            ordered.append(n)
    parents = (-1, *(new_index[nodes[n][0]] for n in ordered))
    tokens = (ctx[-1], *(nodes[n][1] for n in ordered))
    return Tree(parents, tokens)


def _path(nodes, n) -> tuple[int, ...]:
    toks = []
    while n > 0:
        toks.append(nodes[n][1])
        n = nodes[n][0]
    return tuple(reversed(toks))


def _ancestors_in(nodes, n, kept) -> bool:
    n = nodes[n][0]
    while n > 0:
        if n not in kept:
            return False
        n = nodes[n][0]
    return True


def random_tree(rng: np.random.Generator, V: int, root_token: int, size: int, depth: int) -> Tree:
    """A random tree shape with random sibling tokens (repeats allowed: never accepted twice)."""
    parents, tokens, depths = [-1], [root_token], [0]
    for _ in range(size):
        candidates = [n for n in range(len(parents)) if depths[n] < depth]
        a = int(rng.choice(candidates))
        parents.append(a)
        tokens.append(int(rng.integers(0, V)))
        depths.append(depths[a] + 1)
    return Tree(tuple(parents), tuple(tokens))


def tree_round(problem: Problem, tree: Tree, ctx: tuple[int, ...]):
    """Exact ``{(path, next_token): prob}`` of verifying ``tree`` at ``ctx`` (product's rule)."""
    p_rows = torch.stack([problem.p.dist(ctx + tree.path(i)) for i in range(len(tree.parents))])
    return tree_accept_distribution(p_rows, list(tree.parents), list(tree.tokens)), p_rows


def all_sequences(V: int, L: int):
    return itertools.product(range(V), repeat=L)
