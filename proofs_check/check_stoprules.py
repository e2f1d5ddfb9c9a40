"""Check 7: stop rules as experts (:mod:`spec_adapters.selection.stop_rules`).

Two claims. (a) A stop rule's counterfactual acceptance, read from the verified tokens as the
engines read it (the drafter's draft cut at the rule's length, its matched prefix), has the
expectation of the tokens the rule would get accepted if played: exact per trajectory when
greedy, unbiased when sampling, because the rule's length is a function of the context at the
round's start (the drafter's own confidences), never of the outcome. (b) Hedge over the
``N R`` (drafter, rule) experts, fed through the product's round book and losses with the
delay of the real loop, stays within its regret bound against the best fixed (drafter, rule),
whose loss is at most the best fixed (drafter, k)'s: the family contains the fixed lengths.
"""

from __future__ import annotations

import numpy as np
import torch

from proofs_check.check_estimators import (
    PointMatchErrors,
    point_draft,
    point_match_errors,
    point_round_fn,
)
from proofs_check.check_lossless import decode_distribution, switch_rule
from proofs_check.models import Problem, random_problems
from proofs_check.regret import bold_hedge_bound
from proofs_check.result import CheckResult, Settings, timed
from spec_adapters.core.sampling import speculative_accept
from spec_adapters.selection.book import RoundBook
from spec_adapters.selection.experts import expert_losses, window_losses
from spec_adapters.selection.stop_rules import StopRules

THRESHOLDS = (0.0, 0.3, 0.6, 0.9)


def _confidence(prob: Problem, j: int, ctx: tuple, draft: tuple) -> np.ndarray:
    """Drafter ``j``'s confidence in each token of its argmax roll-out: its own chain's
    probability of that token (a function of the context alone)."""
    chain, out = prob.drafters[j], []
    for m in range(len(draft)):
        row = torch.softmax(chain.logits[chain.index(ctx + draft[:m])].double(), -1)
        out.append(float(row[draft[m]]))
    return np.array(out)


def _rule_tokens(hit: np.ndarray, lengths: np.ndarray, rules: StopRules) -> np.ndarray:
    """Each rule's accepted tokens from one drafter's matches, through the product's losses:
    the (drafter, k) "mat" losses gathered at the rule lengths, turned back into tokens."""
    K = hit.shape[1]
    mat = rules.losses(expert_losses(hit, None, loss="mat"), lengths)
    return K + 1 - (K + 1) * mat - 1.0


def _unbiased(settings: Settings) -> list[CheckResult]:
    rng = np.random.default_rng(settings.seed + 71)
    problems = random_problems(rng, settings.n(8, 32), V_range=(2, settings.n(3, 4)),
                               K_range=(2, 3), n_drafters=3, max_cells=settings.n(27, 64))
    errors, cut = PointMatchErrors(), 0
    for prob in problems:
        ctx, K = prob.prompt, prob.K
        rules = StopRules(K, THRESHOLDS)
        out = decode_distribution(prob, K, point_round_fn, switch_rule)
        for j in range(len(prob.drafters)):
            draft = point_draft(prob, j, ctx, K)
            lengths = rules.lengths(_confidence(prob, j, ctx, draft)[None, :])
            cut += int((lengths[0] < rules.cap).any())
            errors.add(prob, *point_match_errors(
                prob, out, draft, lengths[0],
                lambda hit, n=lengths, r=rules: _rule_tokens(hit, n, r)))
    return errors.rows("7 stop rules", "E[a rule's matched prefix] = E[tokens the rule gets "
                       "accepted when played], every rule",
                       f" x {len(THRESHOLDS)} thresholds; a rule cut the draft in {cut} of them",
                       ok=cut > 0, data={"cut": cut})


def _world(seed: int, N: int, V: int = 10):
    """A target chain ``P`` (T = 1) and ``N`` drafter chains, one close to it."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 2.0, size=(V, V))
    P = torch.softmax(torch.tensor(base), -1)
    Q = [torch.softmax(torch.tensor(base + rng.normal(0.0, s, size=(V, V))), -1)
         for s in np.linspace(0.3, 2.5, N)]
    return P, torch.stack(Q)


def _simulate(P: torch.Tensor, Q: torch.Tensor, K: int, policy, T: int, seed: int):
    """``T`` rounds of the point-mass loop: every drafter drafts its argmax roll-out with its
    chain's probabilities as confidences, the played (drafter, rule) is verified by the
    point-mass rule, the round book scores every expert once its ``K`` positions are
    verified (time loss, a round of ``k`` drafts costing ``1 + 0.4 k`` steps)."""
    rules = StopRules(K, THRESHOLDS)
    N = Q.shape[0]
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    costs = 1.0 + 0.4 * np.arange(K + 1)
    book = RoundBook(N, K, corrected=False)
    seq = [0]
    book.reset(1)
    expected, total, fed, most = 0.0, np.zeros(N * len(rules)), 0, 0
    by_length = np.zeros(N * (K + 1))
    for _ in range(T):
        most = max(most, len(policy.outstanding))
        w = policy.weights
        rid, e = policy.play(rng)
        i, r = divmod(e, len(rules))
        drafts = np.zeros((N, K), np.int64)
        confidence = np.zeros((N, K))
        for j in range(N):
            c = seq[-1]
            for m in range(K):
                drafts[j, m] = int(Q[j, c].argmax())
                confidence[j, m] = float(Q[j, c].max())
                c = int(drafts[j, m])
        lengths = rules.lengths(confidence)
        k = int(lengths[i, r])
        d = torch.tensor(drafts[i, :k])
        rows = torch.tensor([seq[-1], *drafts[i, :k]])
        q = torch.nn.functional.one_hot(d, P.shape[0]).double()
        n_acc, nxt = speculative_accept(P[rows], q, d, gen)
        new = [*drafts[i, :n_acc].tolist(), nxt]
        book.open(rid, len(seq), drafts, data=(w, lengths))
        seq += new
        book.record(new)
        for win in book.pop_completed():
            w_done, lengths_done = win.data
            per_length = window_losses(win, "time", False, costs, 1.0)
            f = rules.losses(per_length, lengths_done)
            policy.feed(win.round_id, f)
            expected += float(w_done @ f)
            total += f
            by_length += per_length
            fed += 1
    return fed, expected - total.min(), total.min(), by_length.min(), most


def _regret(settings: Settings) -> CheckResult:
    from onlinelearn import Hedge, NormalHedge
    from onlinelearn.delayed import BOLD, OnArrival

    T = settings.n(400, 3000)
    grid = [(3, 2)] if settings.quick else [(2, 2), (3, 3), (4, 4)]
    worst, ok, nh_worst, gain, detail = 0.0, True, 0.0, 0.0, []
    for N, K in grid:
        P, Q = _world(settings.seed + 10 * N + K, N)
        n = N * len(StopRules(K, THRESHOLDS))
        pol = BOLD(lambda n=n: Hedge(n))
        fed, regret, best_rule, best_length, most = _simulate(P, Q, K, pol, T, settings.seed)
        bound = bold_hedge_bound(n, fed, len(pol.pool))
        ok &= regret <= bound + 1e-9 and most <= K and best_rule <= best_length + 1e-9
        worst = max(worst, regret / bound)
        nh = _simulate(P, Q, K, OnArrival(NormalHedge(n)), T, settings.seed)
        nh_worst = max(nh_worst, nh[1] / bound)
        gain = max(gain, (best_length - best_rule) / fed)
        detail.append({"N": N, "K": K, "experts": n, "rounds": fed, "regret": regret,
                       "bound": bound, "normalhedge_regret": nh[1],
                       "best_rule_loss": best_rule, "best_length_loss": best_length})
    return CheckResult(
        "7 stop rules regret",
        "Hedge over (drafter, rule), delayed feedback through the round book: regret <= "
        "BOLD's bound over N R experts; best rule <= best fixed length",
        f"max regret / bound = {worst:.3f} over {len(grid)} worlds (T = {T}); NormalHedge "
        f"(on arrival) {nh_worst:.3f}; the best rule's loss below the best length's by up to "
        f"{gain:.4f} a round",
        "sqrt(2 (K+1) T ln(N R)) + (K+1) sqrt(ln(N R) / 8)",
        ok and worst <= 1.0,
        data={"runs": detail},
    )


@timed
def check_stoprules(settings: Settings) -> list[CheckResult]:
    """Check 7 (module docstring)."""
    return [*_unbiased(settings), _regret(settings)]
