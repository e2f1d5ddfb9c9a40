"""Losslessness: the exact distribution of a decoder's output equals the target's.

A decoder that picks a drafter each round by a past-only rule is enumerated exactly
(:func:`decode_distribution`); the torch samplers are also checked against the enumerated rule by
chi-square on fixed seeds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy import stats

from proofs_check.models import (
    Problem,
    all_sequences,
    eagle_tree,
    enumerate_drafts,
    random_problems,
    random_tree,
    single_round,
    tree_round,
)
from proofs_check.result import EXACT_TOL, CheckResult, Settings, timed
from spec_adapters.core.acceptance import acceptance_probability
from spec_adapters.core.estimators import tap_loss
from spec_adapters.core.sampling import (
    speculative_accept,
    speculative_accept_distribution,
    tree_accept,
)

Policy = Callable[[Problem, tuple, tuple], list[tuple[int, float]]]
RoundFn = Callable[[Problem, int, tuple], dict]


def fixed_policy(i: int) -> Policy:
    return lambda prob, gen, hist: [(i, 1.0)]


def switch_rule(prob: Problem, gen: tuple, hist: tuple) -> list[tuple[int, float]]:
    """Deterministic switching from the past: tokens so far, rounds so far, last acceptance."""
    last = hist[-1][1] if hist else 0
    return [((sum(gen) + len(hist) + 3 * last) % len(prob.drafters), 1.0)]


def hedge_rule(prob: Problem, gen: tuple, hist: tuple) -> list[tuple[int, float]]:
    """Randomised HedgeSpec-like switching: exponential weights on past full-information TAP
    losses (``1 - acceptance_probability`` at every generated position); the choice is random
    with those weights (all branches enumerated)."""
    N = len(prob.drafters)
    losses = np.zeros(N)
    pos = 0
    for _i, n_new in hist:
        ctxs = [prob.prompt + gen[:j] for j in range(pos, pos + n_new)]
        P = torch.stack([prob.p.dist(c) for c in ctxs])
        Q = torch.stack([torch.stack([q.dist(c) for c in ctxs]) for q in prob.qs])
        losses += tap_loss(acceptance_probability(P, Q)).numpy()  # (N,) from (N, n_new)
        pos += n_new
    w = np.exp(-2.0 * (losses - losses.min()))
    w /= w.sum()
    return [(i, float(w[i])) for i in range(N)]


def single_round_fn(prob: Problem, i: int, ctx: tuple) -> dict:
    return single_round(prob, i, ctx)


def tree_round_fn(prob: Problem, i: int, ctx: tuple) -> dict:
    key = ("tree", i, ctx)
    if key not in prob._cache:
        q = prob.qs[i]
        if i % 2 == 0:
            tree = eagle_tree(q, ctx, prob.K, 2, 2 * prob.K + 1)
        else:  # a random tree, deterministic given the context (repeated siblings allowed)
            seed = sum(t * 7**j for j, t in enumerate(ctx)) + 1000 * i
            tree = random_tree(np.random.default_rng(seed), prob.V, ctx[-1], 2 * prob.K, prob.K)
        dist, _ = tree_round(prob, tree, ctx)
        out: dict = {}
        for (path, nxt), pr in dist.items():
            new = (*(tree.tokens[v] for v in path), nxt)
            out[new] = out.get(new, 0.0) + pr
        prob._cache[key] = out
    return prob._cache[key]


def decode_distribution(prob: Problem, L: int, round_fn: RoundFn, policy: Policy) -> dict:
    """Exact distribution of the first ``L`` generated tokens of a decoder that, each round,
    picks a drafter by ``policy`` (a function of the past only) and runs ``round_fn``."""
    out: dict[tuple, float] = {}
    stack: list[tuple[tuple, tuple, float]] = [((), (), 1.0)]
    while stack:
        gen, hist, pr = stack.pop()
        if len(gen) >= L:
            out[gen[:L]] = out.get(gen[:L], 0.0) + pr
            continue
        for i, wi in policy(prob, gen, hist):
            if wi <= 0:
                continue
            for new, pn in round_fn(prob, i, prob.prompt + gen).items():
                stack.append((gen + new, (*hist, (i, len(new))), pr * wi * pn))
    return out


def _lossless_error(prob: Problem, L: int, round_fn: RoundFn, policy: Policy) -> float:
    dist = decode_distribution(prob, L, round_fn, policy)
    err = 0.0
    for seq in all_sequences(prob.V, L):
        err = max(err, abs(dist.get(seq, 0.0) - prob.p.seq_prob(prob.prompt, seq)))
    return err


def _chi2_pvalue(counts: dict, exact: dict, n: int) -> float:
    keys = sorted(set(exact) | set(counts), key=str)
    obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
    exp = np.array([exact.get(k, 0.0) * n for k in keys])
    if np.any(obs[exp == 0] > 0):
        return 0.0  # an outcome the rule gives probability 0 was sampled
    big = exp >= 5
    o = np.append(obs[big], obs[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    if e[-1] < 5:  # merge the small bin into the smallest big one
        j = int(np.argmin(e[:-1]))
        o[j] += o[-1]
        e[j] += e[-1]
        o, e = o[:-1], e[:-1]
    if len(o) < 2:
        return 1.0
    e *= o.sum() / e.sum()
    return float(stats.chisquare(o, e).pvalue)


def _monte_carlo(settings: Settings) -> tuple[float, int]:
    """Secondary check: samples of ``speculative_accept`` / ``tree_accept`` (the torch
    generator path) against the exact enumerated distributions, chi-square, fixed seeds."""
    rng = np.random.default_rng(settings.seed + 33)
    problems = random_problems(rng, settings.n(4, 12), V_range=(3, 5), K_range=(2, 3))
    n = settings.draws(3000, 20000)
    pmin, tests = 1.0, 0
    for j, prob in enumerate(problems):
        ctx, q = prob.prompt, prob.qs[0]
        draft = max(((d, w) for d, w in enumerate_drafts(q, ctx, prob.K)), key=lambda x: x[1])[0]
        pk = prob.p.dists_along(ctx, draft)
        qk = q.dists_along(ctx, draft)[: prob.K]
        d = torch.tensor(draft)
        exact = speculative_accept_distribution(pk, qk, d)
        gen = torch.Generator().manual_seed(settings.seed + j)
        counts: dict = {}
        for _ in range(n):
            out = speculative_accept(pk, qk, d, gen)
            counts[out] = counts.get(out, 0) + 1
        pmin = min(pmin, _chi2_pvalue(counts, exact, n))
        tree = eagle_tree(q, ctx, prob.K, 2, 2 * prob.K + 1)
        exact_t, p_rows = tree_round(prob, tree, ctx)
        counts = {}
        for _ in range(n):
            path, nxt = tree_accept(p_rows, list(tree.parents), list(tree.tokens), gen)
            counts[(tuple(path), nxt)] = counts.get((tuple(path), nxt), 0) + 1
        pmin = min(pmin, _chi2_pvalue(counts, exact_t, n))
        tests += 2
    return pmin, tests


@timed
def check_lossless(settings: Settings) -> list[CheckResult]:
    """Exact distribution of the first L generated tokens equals the target's, for single-draft
    and tree rounds, a fixed drafter and drafters switched by past-only rules."""
    rng = np.random.default_rng(settings.seed + 3)
    L = 3
    problems = random_problems(
        rng,
        settings.n(6, 24),
        V_range=(2, settings.n(3, 4)),
        K_range=(1, 3),
        n_drafters=3,
        max_cells=settings.n(27, 64),
    )
    cases = {
        "single, fixed drafter": (single_round_fn, fixed_policy(0)),
        "single, switch by past rule": (single_round_fn, switch_rule),
        "single, Hedge-random switch": (single_round_fn, hedge_rule),
        "tree, fixed drafter": (tree_round_fn, fixed_policy(0)),
        "tree, switch by past rule (EAGLE + random trees)": (tree_round_fn, switch_rule),
    }
    worst = dict.fromkeys(cases, 0.0)
    for prob in problems:
        for name, (round_fn, policy) in cases.items():
            worst[name] = max(worst[name], _lossless_error(prob, L, round_fn, policy))
    rows = [
        CheckResult(
            "3 lossless",
            f"{name}: generated tokens ~ target",
            f"max |P_dec(x_1..x_{L}) - P_target| = {err:.2e} over {len(problems)} models",
            f"<= {EXACT_TOL:g}",
            err <= EXACT_TOL,
            data={"max_abs_error": err, "models": len(problems), "L": L},
        )
        for name, err in worst.items()
    ]
    pmin, tests = _monte_carlo(settings)
    rows.append(
        CheckResult(
            "3 sampler MC",
            "speculative_accept / tree_accept samples follow the enumerated rule",
            f"min chi-square p-value {pmin:.3g} over {tests} cases (fixed seeds)",
            ">= 1e-4",
            pmin >= 1e-4,
            data={"min_pvalue": pmin, "cases": tests},
        )
    )
    return rows
