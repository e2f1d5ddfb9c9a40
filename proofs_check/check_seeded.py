"""Seeded requests speculate losslessly: point-mass drafts verified with the request's own noise.

A seeded request draws each token with its own generator, one draw per position. The coupled
rule (:func:`spec_adapters.core.sampling.coupled_accept`) draws, at each drafted position, the
token plain decoding would draw there and accepts the draft iff they are equal. Three claims,
each checked through the product's functions:

1. *Same law as speculative sampling*: for every point-mass draft, the exact law of
   ``(n_accepted, next_token)`` equals speculative sampling's with ``q`` the point mass
   (acceptance ``p_k(d_k)``, the residual ``p_k`` without ``d_k``).
2. *Lossless*: the exact law of the first ``L`` decoded tokens equals the target's, drafts
   from drafters switched by a past-only rule.
3. *Identical to plain decoding for the same noise*: with one uniform per absolute position
   (the request's noise), every decode, whatever was drafted (the drafters' argmax chains and
   random junk), emits exactly plain decoding's tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from proofs_check.check_lossless import _lossless_error, fixed_policy, switch_rule
from proofs_check.models import Problem, random_problems
from proofs_check.result import EXACT_TOL, CheckResult, Settings, timed
from spec_adapters.core.sampling import (
    coupled_accept,
    coupled_accept_distribution,
    speculative_accept_distribution,
)


def _argmax_chain(prob: Problem, i: int, ctx: tuple) -> tuple[int, ...]:
    """Drafter ``i``'s point-mass draft: its most likely token, ``K`` times along."""
    draft: tuple[int, ...] = ()
    for _ in range(prob.K):
        draft = (*draft, int(prob.qs[i].dist(ctx + draft).argmax()))
    return draft


def _coupled_round(prob: Problem, i: int, ctx: tuple) -> dict:
    """Exact law of the tokens one coupled round with drafter ``i``'s point-mass draft adds."""
    key = ("coupled", i, ctx)
    if key not in prob._cache:
        draft = _argmax_chain(prob, i, ctx)
        out: dict = {}
        for (n, nxt), pr in coupled_accept_distribution(prob.p.dists_along(ctx, draft),
                                                        draft).items():
            new = (*draft[:n], nxt)
            out[new] = out.get(new, 0.0) + pr
        prob._cache[key] = out
    return prob._cache[key]


def _inverse_cdf(row: torch.Tensor, u: float) -> int:
    cdf = row.to(torch.float64).cumsum(0)
    idx = int(torch.searchsorted(cdf, torch.tensor([u * float(cdf[-1])],
                                                   dtype=torch.float64), right=True))
    return min(idx, int(torch.nonzero(row > 0)[-1]))


def _plain(prob: Problem, noise: np.ndarray) -> tuple[int, ...]:
    """Plain decoding: the token at position t by the inverse CDF of ``noise[t]``."""
    gen: tuple[int, ...] = ()
    for u in noise:
        gen = (*gen, _inverse_cdf(prob.p.dist(prob.prompt + gen), float(u)))
    return gen


def _coupled_decode(prob: Problem, noise: np.ndarray, drafts) -> tuple[int, ...]:
    """Rounds of :func:`coupled_accept` whose ``draw`` takes the uniform of its absolute
    position; ``drafts(ctx)`` gives each round's draft."""
    gen: tuple[int, ...] = ()
    while len(gen) < len(noise):
        ctx = prob.prompt + gen
        draft = drafts(ctx)[: len(noise) - len(gen) - 1]
        base = len(gen)
        n, nxt = coupled_accept(prob.p.dists_along(ctx, draft), draft,
                                lambda k, row, base=base: _inverse_cdf(row, float(noise[base + k])))
        gen = (*gen, *draft[:n], nxt)
    return gen


@timed
def check_seeded(settings: Settings) -> list[CheckResult]:
    """The coupled rule for seeded requests: speculative sampling's law, lossless, and the
    same tokens as plain decoding for the same noise."""
    rng = np.random.default_rng(settings.seed + 6)
    problems = random_problems(rng, settings.n(6, 24), V_range=(2, settings.n(3, 4)),
                               K_range=(1, 3), n_drafters=3, max_cells=settings.n(27, 64))
    law_err, cases = 0.0, 0
    for prob in problems:
        ctx = prob.prompt
        for flat in range(prob.V ** prob.K):  # every draft of length K
            draft = tuple(int(flat // prob.V ** j) % prob.V for j in range(prob.K))
            pk = prob.p.dists_along(ctx, draft)
            onehot = torch.nn.functional.one_hot(torch.tensor(draft), prob.V).to(pk.dtype)
            ours = coupled_accept_distribution(pk, draft)
            ref = speculative_accept_distribution(pk, onehot, torch.tensor(draft))
            law_err = max(law_err, max(abs(ours.get(o, 0.0) - ref.get(o, 0.0))
                                       for o in set(ours) | set(ref)))
            cases += 1
    L = 3
    loss_err = max(max(_lossless_error(prob, L, _coupled_round, policy)
                       for policy in (fixed_policy(0), switch_rule)) for prob in problems)
    runs, mismatches = settings.n(40, 200), 0
    for prob in problems:
        for _ in range(runs):
            noise = rng.random(settings.n(8, 16))
            plain = _plain(prob, noise)
            junk = lambda ctx, prob=prob: tuple(int(x) for x in rng.integers(prob.V, size=prob.K))  # noqa: E731
            for drafts in (lambda ctx, prob=prob: _argmax_chain(prob, 0, ctx), junk):
                mismatches += _coupled_decode(prob, noise, drafts) != plain
    n_decodes = 2 * runs * len(problems)
    return [
        CheckResult("6 seeded law", "coupled point-mass rule: (accepted, next) law = "
                    "speculative sampling's with q the point mass",
                    f"max |difference| = {law_err:.2e} over {cases} drafts",
                    f"<= {EXACT_TOL:g}", law_err <= EXACT_TOL,
                    data={"max_abs_error": law_err, "drafts": cases}),
        CheckResult("6 seeded lossless", f"coupled rounds: x_1..x_{L} ~ target (fixed "
                    "drafter and a past-rule switch)",
                    f"max |P_dec - P_target| = {loss_err:.2e} over {len(problems)} models",
                    f"<= {EXACT_TOL:g}", loss_err <= EXACT_TOL,
                    data={"max_abs_error": loss_err, "models": len(problems), "L": L}),
        CheckResult("6 seeded identical", "same noise per position: coupled decoding emits "
                    "plain decoding's tokens whatever was drafted",
                    f"{mismatches} of {n_decodes} decodes differ (argmax and random drafts)",
                    "0", mismatches == 0,
                    data={"mismatches": mismatches, "decodes": n_decodes}),
    ]
