"""Theorems 1 and 2: the acceptance probability of a speculative step and of a tree node.

Enumerated through ``spec_adapters.core.sampling`` and compared with
``spec_adapters.core.acceptance`` on small random Markov-chain models (:mod:`proofs_check.models`).
"""

from __future__ import annotations

import numpy as np
import torch

from proofs_check.models import (
    Problem,
    Tree,
    eagle_tree,
    random_problems,
    random_tree,
    single_round,
    tree_round,
)
from proofs_check.result import EXACT_TOL, CheckResult, Settings, timed
from spec_adapters.core.acceptance import (
    acceptance_probability,
    greedy_tree_acceptance,
    tree_acceptance,
)


# --------------------------------------------------------------------------------------------
# Check 1: Theorem 1
# --------------------------------------------------------------------------------------------
@timed
def check_theorem1(settings: Settings) -> list[CheckResult]:
    """P(draft k accepted | first k-1 accepted, prefix), enumerated through
    ``speculative_accept_distribution``, equals ``acceptance_probability`` at that prefix."""
    rng = np.random.default_rng(settings.seed + 1)
    problems = random_problems(
        rng, settings.n(12, 48), n_drafters=2, max_cells=settings.n(100, 1300)
    )
    worst, cases = 0.0, 0
    for prob in problems:
        ctx = prob.prompt
        for i in range(len(prob.drafters)):
            num: dict[tuple, float] = {}
            den: dict[tuple, float] = {}
            for new, pr in single_round(prob, i, ctx).items():
                n = len(new) - 1
                for k in range(1, min(n + 1, prob.K) + 1):
                    pre = new[: k - 1]
                    den[pre] = den.get(pre, 0.0) + pr
                    if n >= k:
                        num[pre] = num.get(pre, 0.0) + pr
            prefixes = [pre for pre, d in den.items() if d > 1e-9]
            P = torch.stack([prob.p.dist(ctx + pre) for pre in prefixes])
            Q = torch.stack([prob.qs[i].dist(ctx + pre) for pre in prefixes])
            gamma = acceptance_probability(P, Q)  # batched over all prefixes
            for pre, g in zip(prefixes, gamma.tolist(), strict=True):
                measured = num.get(pre, 0.0) / den[pre]
                # relative to the conditioning event's probability (tiny-probability prefixes
                # carry rounding divided by a small number)
                err = abs(measured - g) * min(1.0, den[pre] / 1e-3)
                worst = max(worst, err)
                cases += 1
    return [
        CheckResult(
            "1 Thm 1",
            "P(accept) of one speculative step = sum_x min(p,q) = 1 - TV(p,q)",
            f"max |enumerated - acceptance_probability| = {worst:.2e} over {cases} prefixes, "
            f"{len(problems)} models",
            f"<= {EXACT_TOL:g}",
            worst <= EXACT_TOL,
            data={"max_abs_error": worst, "cases": cases, "models": len(problems)},
        )
    ]


# --------------------------------------------------------------------------------------------
# Check 2: Theorem 2
# --------------------------------------------------------------------------------------------
def _trees_for(prob: Problem, rng: np.random.Generator, ctx) -> list[Tree]:
    q = prob.qs[0]
    K = prob.K
    trees = [eagle_tree(q, ctx, K, 2, 2 * K + 1), eagle_tree(q, ctx, K, 3, 3 * K)]
    trees.append(random_tree(rng, prob.V, ctx[-1], size=2 * K + 1, depth=K))
    return trees


@timed
def check_theorem2(settings: Settings) -> list[CheckResult]:
    """Per tree node: P(some child accepted | node reached), enumerated through
    ``tree_accept_distribution``, equals ``tree_acceptance`` (sampling) and
    ``greedy_tree_acceptance`` (greedy)."""
    rng = np.random.default_rng(settings.seed + 2)
    problems = random_problems(rng, settings.n(12, 40), K_range=(1, 4), V_range=(2, 6))
    worst = {"sampling": 0.0, "greedy": 0.0}
    cases = {"sampling": 0, "greedy": 0}
    n_trees = 0
    for prob in problems:
        ctx = prob.prompt
        for tree in _trees_for(prob, rng, ctx):
            n_trees += 1
            dist, p_rows = tree_round(prob, tree, ctx)
            M = len(tree.parents)
            reach = [0.0] * M
            through = [0.0] * M
            for (path, _nxt), pr in dist.items():
                reach[0] += pr
                prev = 0
                for node in path:
                    reach[node] += pr
                    through[prev] += pr
                    prev = node
            internal = [v for v in range(M) if tree.children(v) and reach[v] > 1e-9]
            if not internal:
                continue
            C = max(len(tree.children(v)) for v in internal)
            kids = torch.full((len(internal), C), -1, dtype=torch.long)
            mask = torch.zeros((len(internal), C), dtype=torch.bool)
            for r, v in enumerate(internal):
                toks = [tree.tokens[c] for c in tree.children(v)]
                kids[r, : len(toks)] = torch.tensor(toks)
                mask[r, : len(toks)] = True
            P = p_rows[internal]
            mode = "greedy" if prob.cfg.greedy else "sampling"
            if prob.cfg.greedy:
                # greedy_tree_acceptance on the *unwarped* target: argmax is what greedy keeps
                raw = torch.stack(
                    [
                        torch.softmax(prob.target.logits[prob.target.index(ctx + tree.path(v))], -1)
                        for v in internal
                    ]
                )
                expected = greedy_tree_acceptance(raw, kids, mask)
                also = tree_acceptance(P, kids, mask)
                worst[mode] = max(worst[mode], float((expected - also).abs().max()))
            else:
                expected = tree_acceptance(P, kids, mask)
            for r, v in enumerate(internal):
                measured = through[v] / reach[v]
                err = abs(measured - float(expected[r])) * min(1.0, reach[v] / 1e-3)
                worst[mode] = max(worst[mode], err)
                cases[mode] += 1
    rows = []
    for mode, fn in (("sampling", "tree_acceptance"), ("greedy", "greedy_tree_acceptance")):
        rows.append(
            CheckResult(
                f"2 Thm 2 {mode}",
                "P(some child accepted) at a tree node = target mass of kept children"
                if mode == "sampling"
                else "greedy: 1 iff target argmax is a kept child",
                f"max |enumerated - {fn}| = {worst[mode]:.2e} over {cases[mode]} nodes",
                f"<= {EXACT_TOL:g}",
                worst[mode] <= EXACT_TOL and cases[mode] > 0,
                data={"max_abs_error": worst[mode], "nodes": cases[mode], "trees": n_trees},
            )
        )
    return rows
