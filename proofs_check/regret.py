"""A simulated HedgeSpec loop on a synthetic Markov target (Theorem 4 and the bandit table).

Each round follows the paper's figure, with the product's functions at every step:

1. select  ``round_id, i = policy.play(rng)``        (an ``onlinelearn.delayed`` reduction)
2. draft   ``K`` tokens from drafter ``i`` (sampled from its warped Markov chain)
3. verify  :func:`spec_adapters.core.sampling.speculative_accept`
4. evaluate every drafter at each newly verified position:
   :func:`~spec_adapters.core.acceptance.acceptance_probability` and
   :func:`~spec_adapters.core.estimators.realized_ratio`
5. update  a round that started with ``s`` verified tokens is complete once positions
   ``s+1..s+K`` are verified; its loss vector (TAP: :func:`~spec_adapters.core.estimators.tap_loss`;
   EAL: :func:`~spec_adapters.core.estimators.eal_loss` of
   :func:`~spec_adapters.core.estimators.corrected_acceptance_length`) is fed to the policy
   (``feed(round_id, losses)``); rounds still open at the end are censored.

Bandit policies (BanditSpec's EXP3Spec and UCBSpec) instead get, right after the round, the loss
``(K + 1 - Y) / K`` of the drafter they played, ``Y = n_accepted + 1``. For every policy the
full-information loss vectors are still computed, to measure regret against the best drafter in
hindsight on the same rounds: ``R_T = sum_t <w_t, f_t> - min_i sum_t f_t[i]``, ``w_t`` the
policy's distribution at the play of round ``t``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from spec_adapters.core.acceptance import acceptance_probability
from spec_adapters.core.estimators import (
    corrected_acceptance_length,
    eal_loss,
    realized_ratio,
    tap_loss,
)
from spec_adapters.core.sampling import SamplingConfig, speculative_accept


@dataclass
class World:
    """Target ``P[c]`` and drafters ``Q[i, c]``: warped next-token tables of order-1 chains."""

    P: torch.Tensor  # (V, V)
    Q: torch.Tensor  # (N, V, V)
    K: int
    best: int  # the drafter built to be best (for information; regret uses hindsight)

    @property
    def N(self) -> int:  # noqa: N802 - the paper's symbol
        return self.Q.shape[0]


def make_world(seed: int, N: int, K: int, V: int = 12, temperature: float = 1.0) -> World:
    """A target and ``N`` drafters: one close to the target, the others noisier copies or
    unrelated chains, so the best drafter is clear but not trivially so."""
    rng = np.random.default_rng(seed)
    cfg = SamplingConfig(temperature=temperature)
    base = rng.normal(0.0, 2.0, size=(V, V))
    P = cfg.probs(torch.tensor(base))
    best = int(rng.integers(0, N))
    Qs = []
    for i in range(N):
        if i == best:
            logits = base + rng.normal(0.0, 0.4, size=(V, V))
        elif i % 3 == 2:
            logits = rng.normal(0.0, 2.0, size=(V, V))  # an unrelated drafter
        else:
            logits = base + rng.normal(0.0, rng.uniform(1.0, 2.5), size=(V, V))
        Qs.append(cfg.probs(torch.tensor(logits)))
    return World(P, torch.stack(Qs), K, best)


@dataclass
class SimResult:
    rounds: int  # rounds whose loss was computed (fed or, for bandits, complete)
    expected_loss: float  # sum_t <w_t, f_t>
    best_loss: float  # min_i sum_t f_t[i]
    max_outstanding: int  # largest number of outstanding rounds at a play
    censored: int
    tokens: int
    target_calls: int

    @property
    def regret(self) -> float:
        return self.expected_loss - self.best_loss

    @property
    def average_regret(self) -> float:
        return self.regret / max(1, self.rounds)


def simulate(world: World, policy, T: int, loss: str, seed: int) -> SimResult:
    """Run ``T`` rounds of the HedgeSpec loop with ``policy`` (a ``DelayedLearner``)."""
    if loss not in ("tap", "eal"):
        raise ValueError(f"loss must be 'tap' or 'eal', got {loss!r}")
    K, P, Q = world.K, world.P, world.Q
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    bandit = not policy.full_information
    seq = [0]
    gammas: list[torch.Tensor] = []  # per generated position: (N,)
    rhos: list[torch.Tensor] = []
    open_rounds: dict[int, tuple[int, np.ndarray]] = {}
    exp_loss, cum = 0.0, np.zeros(world.N)
    fed, max_out = 0, 0
    for _ in range(T):
        # 1. select
        max_out = max(max_out, len(policy.outstanding))
        w = policy.weights
        rid, arm = policy.play(rng)
        start = len(seq) - 1  # generated tokens so far
        # 2. draft
        ctx, draft = seq[-1], []
        for _k in range(K):
            draft.append(int(torch.multinomial(Q[arm, ctx], 1, generator=gen)))
            ctx = draft[-1]
        d = torch.tensor(draft)
        rows = torch.tensor([seq[-1], *draft])
        # 3. verify
        n_acc, nxt = speculative_accept(P[rows], Q[arm, rows[:K]], d, gen)
        new = [*draft[:n_acc], nxt]
        # 4. evaluate every drafter at the newly verified positions
        ctxs = torch.tensor([seq[-1], *new[:-1]])
        Pn, Qn = P[ctxs], Q[:, ctxs]  # (m, V), (N, m, V)
        g = acceptance_probability(Pn, Qn)  # (N, m)
        r = realized_ratio(Pn, Qn, torch.tensor(new))  # (N, m)
        gammas.extend(g.T)
        rhos.extend(r.T)
        seq.extend(new)
        if bandit:
            policy.feed(rid, (K - n_acc) / K)  # BanditSpec: (L + 1 - Y) / L
        open_rounds[rid] = (start, w)
        # 5. update: rounds whose K positions are all verified
        for done in [i for i, (s, _) in open_rounds.items() if len(gammas) >= s + K]:
            s, w_done = open_rounds.pop(done)
            gw = torch.stack(gammas[s : s + K], dim=1)  # (N, K)
            if loss == "tap":
                f = tap_loss(gw)
            else:
                rw = torch.stack(rhos[s : s + K], dim=1)
                f = eal_loss(corrected_acceptance_length(gw, rw), K)
            f = f.numpy()
            if not bandit:
                policy.feed(done, f)
            exp_loss += float(w_done @ f)
            cum += f
            fed += 1
    if not bandit:
        for rid in list(open_rounds):
            policy.censor(rid)
    return SimResult(fed, exp_loss, float(cum.min()), max_out, len(open_rounds), len(seq) - 1, T)


def bold_hedge_bound(N: int, T: int, pool: int) -> float:
    """Regret bound of BOLD over anytime-Hedge copies on ``T`` fed rounds with ``pool`` copies.

    Each copy ``j`` sees an undelayed sequence of ``T_j`` rounds, so (PLG Thm 2.3)
    ``R_j <= sqrt(2 T_j ln N) + sqrt(ln N / 8)``; summing and Cauchy-Schwarz
    (``sum_j sqrt(T_j) <= sqrt(pool T)``): ``R_T <= sqrt(2 pool T ln N) + pool sqrt(ln N / 8)``.
    """
    log_n = math.log(N)
    return math.sqrt(2 * pool * T * log_n) + pool * math.sqrt(log_n / 8)


#: The constant of Theorem 4 as checked here (derivation in :func:`theorem4_constant`).
C_THM4 = 2.0


def theorem4_constant(K: int, T: int) -> float:
    """The smallest ``C`` for which ``bold_hedge_bound(N, T, K) <= C T sqrt(K ln N / T)``.

    The loss of round ``t`` is known once positions ``s_t+1..s_t+K`` are verified; every round
    verifies at least one token, so ``s_{t'} >= s_t + (t' - t)`` and at most ``K - 1`` rounds
    are outstanding at a play: BOLD needs at most ``K`` copies. Dividing
    ``sqrt(2 K T ln N) + K sqrt(ln N / 8)`` by ``T sqrt(K ln N / T)`` gives
    ``C(K, T) = sqrt(2) + sqrt(K / (8 T))``, which is ``<= 2`` as soon as
    ``T >= K / (8 (2 - sqrt 2)^2) ~ 0.36 K``. Hence ``C = 2`` for every run here. The losses are
    in ``[0, 1]`` for TAP and for normalised EAL; in tokens per call the EAL regret is ``K + 1``
    times larger, ``<= 2 (K + 1) sqrt(K ln N / T) <= 2 sqrt((K + 1)^3 ln N / T)``, the paper's
    EAL rate.
    """
    return math.sqrt(2.0) + math.sqrt(K / (8.0 * T))
