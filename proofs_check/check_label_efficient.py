"""Check 8: label-efficient scoring (the vLLM proposer's feedback budget; docs/theory.md,
"Evaluating a random share of the rounds").

Every round is played; a coin drawn before the round's outcome, independently of it, decides
with probability ``rho`` whether the round is scored (every expert's loss fed, once its window
completes, ``K - 1`` rounds later at most) or censored. Claim: for losses in ``[0, 1]`` fixed in
advance, BOLD over anytime Hedge run this way has expected regret over all ``T`` rounds at most

    (1 / rho) E[R_BOLD(Q)] <= sqrt(2 K T ln N / rho) + K sqrt(ln N / 8) / rho,

``Q ~ Binomial(T, rho)`` the scored rounds. Checked on loss sequences that favour different
experts in turn (an adversarial-looking shift) and stochastic ones, the expectation over the
coins estimated over seeds, through ``onlinelearn``'s ``play`` / ``feed`` / ``censor``.
"""

from __future__ import annotations

import math

import numpy as np

from proofs_check.result import CheckResult, Settings, timed


def _losses(kind: str, rng: np.random.Generator, T: int, N: int) -> np.ndarray:
    """``(T, N)`` losses in [0, 1]: ``"shift"``, the best expert changes every T/4 rounds and
    returns; ``"stochastic"``, Bernoulli losses of means spread in [0.3, 0.7]."""
    if kind == "stochastic":
        return (rng.random((T, N)) < np.linspace(0.3, 0.7, N)).astype(float)
    good = (np.arange(T) * 4 // T) % 2  # experts 0 and 1 take turns at being best
    out = rng.uniform(0.4, 0.9, size=(T, N))
    out[np.arange(T), good] = rng.uniform(0.0, 0.5, size=T)
    return out


def _regret(losses: np.ndarray, rho: float, K: int, seed: int) -> float:
    """Regret of BOLD over anytime Hedge on ``losses``, a round scored with probability
    ``rho`` and fed after a random delay of at most ``K - 1`` rounds."""
    from onlinelearn import Hedge
    from onlinelearn.delayed import BOLD

    T, N = losses.shape
    rng = np.random.default_rng(seed)
    policy = BOLD(lambda: Hedge(N))
    due: dict[int, list[int]] = {}
    expected = 0.0
    for t in range(T):
        expected += float(policy.weights @ losses[t])
        rid, _arm = policy.play(rng)
        if rng.random() < rho:
            due.setdefault(t + int(rng.integers(0, K)), []).append(rid)
        else:
            policy.censor(rid)
        for r in due.pop(t, []):
            policy.feed(r, losses[r])  # round r's losses (round ids count from 0)
    for rounds in due.values():
        for r in rounds:
            policy.censor(r)
    return expected - float(losses.sum(axis=0).min())


def label_efficient_bound(N: int, T: int, K: int, rho: float) -> float:
    """``sqrt(2 K T ln N / rho) + K sqrt(ln N / 8) / rho`` (module docstring)."""
    return math.sqrt(2 * K * T * math.log(N) / rho) + K * math.sqrt(math.log(N) / 8) / rho


@timed
def check_label_efficient(settings: Settings) -> list[CheckResult]:
    """Check 8 (module docstring)."""
    T, K, N = settings.n(600, 4000), 3, 8
    seeds = settings.n(6, 20)
    rhos = (1.0, 0.5, 0.2, 0.05)
    worst, table = 0.0, []
    for kind in ("shift", "stochastic"):
        losses = _losses(kind, np.random.default_rng(settings.seed + 5), T, N)
        for rho in rhos:
            mean = float(np.mean([_regret(losses, rho, K, settings.seed + s)
                                  for s in range(seeds)]))
            bound = label_efficient_bound(N, T, K, rho)
            worst = max(worst, mean / bound)
            table.append({"losses": kind, "rho": rho, "mean_regret": mean, "bound": bound})
    shown = ", ".join(f"rho {r['rho']:g}: {r['mean_regret']:.1f} / {r['bound']:.1f}"
                      for r in table if r["losses"] == "shift")
    return [CheckResult(
        "8 label-efficient",
        "BOLD/Hedge scored on a random rho-share of rounds (delays <= K - 1): E[regret] <= "
        "(1 / rho) E[R(Q)]",
        f"max mean regret / bound = {worst:.3f}, N = {N}, K = {K}, T = {T}, {seeds} seeds "
        f"each; shifting losses, regret / bound: {shown}",
        "sqrt(2 K T ln N / rho) + K sqrt(ln N / 8) / rho",
        worst <= 1.0,
        data={"table": table},
    )]
