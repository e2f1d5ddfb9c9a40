"""Theorem 4: regret of the simulated HedgeSpec loop, and the bandit versus full-information
table.
"""

from __future__ import annotations

import math

import numpy as np

from proofs_check.result import CheckResult, Settings, timed


def _policies(N: int, K: int) -> dict:
    from onlinelearn import UCB1, Exp3, Hedge, NormalHedge
    from onlinelearn.delayed import BOLD, QPMD, OnArrival

    return {
        "Hedge/BOLD": lambda: BOLD(lambda: Hedge(N)),
        "NormalHedge/QPMD": lambda: QPMD(NormalHedge(N)),
        "EXP3Spec": lambda: OnArrival(Exp3(N)),
        "UCBSpec": lambda: OnArrival(UCB1(N)),
    }


@timed
def check_theorem4(settings: Settings) -> list[CheckResult]:
    """Average regret of the simulated HedgeSpec loop (BOLD over anytime Hedge, delayed
    feedback through ``onlinelearn.delayed``) within ``C sqrt(K ln N / T)`` (TAP) and, in tokens,
    ``C sqrt((K+1)^3 ln N / T)`` (EAL), ``C = 2`` (see ``regret.theorem4_constant``); plus the
    regret table of HedgeSpec versus BanditSpec's EXP3Spec / UCBSpec for N = 2..64."""
    from proofs_check.regret import C_THM4, bold_hedge_bound, make_world, simulate

    T = settings.n(300, 2000)
    grid = [(2, 4), (4, 16)] if settings.quick else [(1, 2), (2, 4), (3, 8), (4, 16), (4, 64)]
    seeds = range(settings.n(1, 2))
    rows = []
    for loss in ("tap", "eal"):
        worst_ratio, ok_exact, ok_delay, runs, nh_ratio = 0.0, True, True, 0, 0.0
        detail = []
        for K, N in grid:
            for seed in seeds:
                world = make_world(settings.seed + 100 * seed + N + K, N, K)
                pol = _policies(N, K)["Hedge/BOLD"]()
                res = simulate(world, pol, T, loss, seed=settings.seed + seed)
                scale = 1.0 if loss == "tap" else K + 1.0  # EAL regret in tokens per call
                rate = math.sqrt((K if loss == "tap" else (K + 1) ** 3) * math.log(N) / res.rounds)
                ratio = scale * res.average_regret / (C_THM4 * rate)
                worst_ratio = max(worst_ratio, ratio)
                ok_exact &= res.regret <= bold_hedge_bound(N, res.rounds, len(pol.pool)) + 1e-9
                ok_delay &= res.max_outstanding <= K - 1 and len(pol.pool) <= K
                runs += 1
                detail.append(
                    {
                        "K": K,
                        "N": N,
                        "seed": seed,
                        "avg_regret": res.average_regret,
                        "bound_rate": C_THM4 * rate / scale,
                        "pool": len(pol.pool),
                        "max_outstanding": res.max_outstanding,
                    }
                )
                nh = simulate(
                    world, _policies(N, K)["NormalHedge/QPMD"](), T, loss, seed=settings.seed + seed
                )
                nh_ratio = max(nh_ratio, scale * nh.average_regret / (C_THM4 * rate))
        bound = "C sqrt(K ln N / T)" if loss == "tap" else "C sqrt((K+1)^3 ln N / T) [tokens]"
        rows.append(
            CheckResult(
                f"5 Thm 4 {loss.upper()}",
                f"average regret of HedgeSpec ({loss.upper()} loss, delayed feedback, BOLD+Hedge)",
                f"max avg-regret / bound = {worst_ratio:.3f} over {runs} runs (K, N in {grid}, "
                f"T={T}); exact BOLD bound ok={ok_exact}; outstanding <= K-1, pool <= K: "
                f"{ok_delay}; paper's NormalHedge/QPMD: {nh_ratio:.3f} of the bound",
                f"{bound}, C = {C_THM4:g}",
                worst_ratio <= 1.0 and ok_exact and ok_delay,
                data={"worst_ratio": worst_ratio, "normalhedge_ratio": nh_ratio, "runs": detail},
            )
        )
    rows.append(_bandit_table(settings))
    return rows


def _bandit_table(settings: Settings) -> CheckResult:
    from proofs_check.regret import C_THM4, make_world, simulate

    K = 3
    T = settings.n(200, 1500)
    Ns = [2, 8, 32] if settings.quick else [2, 4, 8, 16, 32, 64]
    seeds = range(settings.n(1, 2))
    table = []
    for N in Ns:
        row = {"N": N, "bound": C_THM4 * math.sqrt(K * math.log(N) / T) * (K + 1)}
        for name, make in _policies(N, K).items():
            regs = []
            for seed in seeds:
                world = make_world(settings.seed + 7 * seed + N, N, K)
                regs.append((K + 1) * simulate(world, make(), T, "eal", seed=seed).average_regret)
            row[name] = float(np.mean(regs))
        table.append(row)
    names = list(_policies(2, K))
    header = f"{'N':>4} " + " ".join(f"{n:>17}" for n in names) + f" {'C sqrt(...)':>12}"
    lines = [header] + [
        f"{r['N']:>4} " + " ".join(f"{r[n]:>17.4f}" for n in names) + f" {r['bound']:>12.4f}"
        for r in table
    ]
    last = table[-1]
    full_ok = all(r["Hedge/BOLD"] <= r["bound"] for r in table)
    return CheckResult(
        "5 table",
        "average EAL regret (tokens/call) vs N: full information vs bandits (BanditSpec)",
        f"K={K}, T={T}, {len(seeds)} seed(s); at N={last['N']}: Hedge {last['Hedge/BOLD']:.3f}, "
        f"NormalHedge {last['NormalHedge/QPMD']:.3f}, EXP3Spec {last['EXP3Spec']:.3f}, "
        f"UCBSpec {last['UCBSpec']:.3f}\n" + "\n".join("         " + ln for ln in lines),
        "full information within C sqrt((K+1)^3 ln N / T) for every N",
        full_ok,
        data={"table": table, "K": K, "T": T},
    )
