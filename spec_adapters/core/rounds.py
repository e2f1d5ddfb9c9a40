"""Per-position acceptance statistics and round windows, shared by the decoders.

Every verified position ``j`` of the generated sequence gets, for each drafter ``i``,

- ``gamma[i, j]``: the probability that drafter ``i`` would have had its token at ``j``
  accepted, given the verified prefix (Theorem 1: ``sum_x min(p_j(x), q_ij(x))``; the EAGLE
  decoder stores the tree form of Theorem 2 instead);
- ``rho[i, j] = min(1, q_ij(x_j) / p_j(x_j))`` for the realized token ``x_j``.

A round that starts with ``s`` verified tokens drafts positions ``s .. s+K-1``; it *completes*
when those ``K`` positions are verified, which may take several later rounds (delay <= K-1).
Its loss per drafter is computed from that window with :mod:`spec_adapters.core.estimators`:

- EAL: ``(K + 1 - AL_hat) / (K + 1)``, with the corrected estimator
  ``AL = 1 + sum_k (prod_{j<k} rho_j) gamma_k`` when sampling (unbiased), the paper's
  ``AL = 1 + sum_k prod_{j<=k} gamma_j`` when greedy (then ``rho = gamma`` and the two forms
  coincide);
- TAP: the acceptance-probability loss of :func:`spec_adapters.core.estimators.tap_loss` on the
window.

Rounds still open when generation stops (EOS, max_new_tokens) stay in
:attr:`RoundTable.open_rounds`; the decoder censors them explicitly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from spec_adapters.core import estimators
from spec_adapters.core.proposal import PointMass, Rows, as_rows, stack_rows

__all__ = ["LOSSES", "RoundTable", "Window", "greedy_stats", "position_stats", "window_loss"]

LOSSES = ("eal", "tap")


def position_stats(p: torch.Tensor, q, tokens: torch.LongTensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gamma, rho and abstentions of ``N`` drafters at ``m`` verified positions.

    Parameters
    ----------
    p : torch.Tensor
        ``(m, V)`` warped target distributions at the positions.
    q : torch.Tensor, Rows or sequence of Rows
        The drafters' warped distributions given the same verified prefixes: ``(N, m, V)``
        probabilities, one stacked :mod:`~spec_adapters.core.proposal` form with lead
        ``(N, m)``, or one form per drafter (lead ``(m,)``, forms may differ between drafters:
        the drafters of each form are stacked and evaluated together).
    tokens : torch.LongTensor
        ``(m,)`` realized (verified) tokens.

    Returns
    -------
    gamma, rho : torch.Tensor
        ``(N, m)`` each, float64: ``gamma = sum_x min(p, q)`` (Theorem 1, via
        :func:`spec_adapters.core.acceptance.acceptance_probability`) and
        ``rho = min(1, q(x) / p(x))`` (:func:`spec_adapters.core.estimators.realized_ratio`).
    proposes : torch.Tensor
        ``(N, m)`` bool: ``False`` where the drafter abstains (a zero row: it would have
        drafted nothing from there; its ``gamma`` is 0).

    Nothing is validated here: ``p`` and ``q`` are checked where they are produced. Point
    masses cost two gathers for all drafters; under greedy decoding :func:`greedy_stats` needs
    not even those.
    """
    from spec_adapters.core.acceptance import acceptance_probability
    from spec_adapters.core.estimators import realized_ratio

    tokens = tokens.to(p.device)
    if isinstance(q, torch.Tensor | Rows):
        q = as_rows(q)
        gamma = acceptance_probability(p, q, validate=False)  # p broadcasts over drafters
        rho = realized_ratio(p, q, tokens, validate=False)
        proposes = q.dense().sum(-1) > 0 if not isinstance(q, PointMass) else q.tokens >= 0
        return gamma.double(), rho.double(), proposes
    q = [as_rows(rows) for rows in q]
    if q and all(type(rows) is PointMass for rows in q):
        return _point_stats(p, torch.stack([rows.tokens for rows in q]), tokens)
    gamma = torch.zeros(len(q), p.shape[0], dtype=torch.float64, device=p.device)
    rho = torch.zeros_like(gamma)
    kinds: dict[type, list[int]] = {}
    for i, rows in enumerate(q):
        kinds.setdefault(type(rows), []).append(i)
    for members in kinds.values():
        stacked = stack_rows([q[i] for i in members])
        idx = torch.tensor(members, device=p.device)
        gamma[idx] = acceptance_probability(p, stacked, validate=False).double()
        rho[idx] = realized_ratio(p, stacked, tokens, validate=False).double()
    proposes = torch.stack([rows.argmax().to(p.device) >= 0 for rows in q])
    return gamma, rho, proposes


def _point_stats(p: torch.Tensor, drafts: torch.LongTensor, tokens: torch.LongTensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`position_stats` of point masses ``drafts`` ``(N, m)`` (``-1``: abstained) in a
    few tensor operations: ``gamma = p(d)`` and ``rho = min(1, 1{x = d} / p(x))``, i.e.
    ``1{x = d}`` where ``p(x) > 0`` and 1 on the probability-zero event ``p(x) = 0`` (as
    :func:`~spec_adapters.core.estimators.realized_ratio`)."""
    if drafts.shape[1] != p.shape[0] or tokens.shape != (p.shape[0],):
        raise ValueError(f"p {tuple(p.shape)}, drafts {tuple(drafts.shape)} and tokens "
                         f"{tuple(tokens.shape)} do not broadcast")
    drafts = drafts.to(p.device)
    at = torch.arange(p.shape[0], device=p.device)
    proposes = drafts >= 0
    gamma = torch.where(proposes, p[at, drafts.clamp_min(0)].double(), 0.0)
    rho = torch.where((drafts == tokens) | (p[at, tokens] == 0), 1.0, 0.0).double()
    return gamma, rho, proposes


def greedy_stats(drafts: np.ndarray, tokens: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`position_stats` under greedy decoding, in numpy on ``N m`` entries.

    Greedy, the target's warped ``p_j`` is the point mass at its argmax, which is the verified
    token ``x_j``, and every drafter's warped ``q_ij`` is the point mass at its argmax
    ``d_ij`` (``-1``: it abstains), so Theorem 1 gives ``gamma_ij = sum_x min(p, q) =
    1{d_ij = x_j}`` and ``rho_ij = min(1, q(x_j) / p(x_j)) = 1{d_ij = x_j}``: nothing of the
    vocabulary's size, not even a gather of ``p``.

    Parameters
    ----------
    drafts : numpy.ndarray
        ``(N, m)`` int, each drafter's argmax at the verified positions (``-1``: abstains).
    tokens : numpy.ndarray
        ``(m,)`` int, the verified tokens.

    Returns
    -------
    gamma, rho, proposes : numpy.ndarray
        ``(N, m)``: gamma = rho float64, proposes bool (``drafts >= 0``).
    """
    hit = (drafts == tokens).astype(np.float64)
    return hit, hit, drafts >= 0


class Window(NamedTuple):
    """A completed round's window of ``K`` verified positions.

    Attributes
    ----------
    round_id : int
    gamma, rho : torch.Tensor
        ``(n, K)`` float64.
    lengths : numpy.ndarray
        ``(n,)`` int: the tokens each drafter would have drafted in the window, i.e. its
        leading positions before its first abstention (``K`` if it never abstains); a
        cost-aware expert ``(i, k)`` pays for ``min(k, lengths[i])`` drafts.
    """

    round_id: int
    gamma: torch.Tensor
    rho: torch.Tensor
    lengths: np.ndarray


class RoundTable:
    """The gamma/rho table of one query and the windows of its open rounds.

    Parameters
    ----------
    n : int
        Number of drafters.
    draft_length : int
        ``K``, the window length of every round.
    corrected : bool
        Windows feed the corrected (unbiased) acceptance-length estimator (the decoders pass
        ``temperature > 0``); irrelevant for greedy decoding, where both forms coincide.

    Notes
    -----
    Positions are absolute indices into the verified sequence (prompt included); the table
    starts at the prompt length given to :meth:`reset`. Windows are read from a live block
    that starts at the oldest open round, so a round costs ``O(N K)`` whatever the query length;
    :attr:`gamma` / :attr:`rho` concatenate the whole history once, when asked.
    """

    def __init__(self, n: int, draft_length: int, corrected: bool = True):
        self.n, self.k, self.corrected = n, draft_length, corrected
        self.reset(0)

    def reset(self, first_position: int) -> None:
        self.first = first_position
        self._gamma: list[np.ndarray] = []  # one (n, m) block per record() call
        self._rho: list[np.ndarray] = []
        self.end = first_position  # positions first .. end-1 are recorded
        self.open_rounds: dict[int, int] = {}  # round_id -> start position
        self._live = first_position  # positions live .. end-1 are in the live block
        self._live_gamma = np.zeros((self.n, 0))
        self._live_rho = np.zeros((self.n, 0))
        self._live_proposes = np.zeros((self.n, 0), bool)

    def open(self, round_id: int, start: int) -> None:
        """A round drafting positions ``start .. start+K-1`` was played.

        Raises
        ------
        ValueError
            ``start`` before the positions still kept (every open round's window was already
            complete there), or ``round_id`` already open.
        """
        if start < self._live:
            raise ValueError(f"round {round_id} starts at position {start}, before the first "
                             f"position still kept ({self._live})")
        if round_id in self.open_rounds:
            raise ValueError(f"round {round_id} is already open")
        self.open_rounds[round_id] = start

    def record(self, gamma, rho, proposes=None) -> None:
        """Append the stats ``(n, m)`` of the next ``m`` verified positions (tensors or
        arrays); ``proposes`` (bool, ``None``: everywhere) marks where each drafter would have
        drafted at all."""
        gamma, rho = _float64(gamma), _float64(rho)
        proposes = np.ones(gamma.shape, bool) if proposes is None else \
            np.asarray(proposes.cpu() if isinstance(proposes, torch.Tensor) else proposes, bool)
        if gamma.shape != rho.shape or gamma.shape != proposes.shape or gamma.ndim != 2 \
                or gamma.shape[0] != self.n:
            raise ValueError(f"gamma, rho and proposes must all be ({self.n}, m), got "
                             f"{gamma.shape}, {rho.shape} and {proposes.shape}")
        self._gamma.append(gamma)
        self._rho.append(rho)
        self._live_gamma = np.concatenate([self._live_gamma, gamma], 1)
        self._live_rho = np.concatenate([self._live_rho, rho], 1)
        self._live_proposes = np.concatenate([self._live_proposes, proposes], 1)
        self.end += gamma.shape[1]

    @property
    def gamma(self) -> torch.Tensor:
        """All recorded gamma, ``(n, end - first)`` float64."""
        return torch.from_numpy(np.concatenate(self._gamma, 1) if self._gamma
                                else np.zeros((self.n, 0)))

    @property
    def rho(self) -> torch.Tensor:
        """All recorded rho, ``(n, end - first)`` float64."""
        return torch.from_numpy(np.concatenate(self._rho, 1) if self._rho
                                else np.zeros((self.n, 0)))

    def pop_completed(self) -> list[Window]:
        """Remove and return the :class:`Window` of every round whose ``K`` positions are
        verified; the paper's loss of a window is :func:`window_loss` ``(w.gamma, w.rho,
        loss, table.corrected)``."""
        done = sorted((rid, s) for rid, s in self.open_rounds.items() if s + self.k <= self.end)
        out = []
        for rid, s in done:
            del self.open_rounds[rid]
            lo = s - self._live
            proposes = self._live_proposes[:, lo:lo + self.k]
            # leading positions each drafter proposes at: the first False, or K
            lengths = np.where(proposes.all(1), self.k, np.argmin(proposes, 1))
            out.append(Window(rid, torch.from_numpy(self._live_gamma[:, lo:lo + self.k]),
                              torch.from_numpy(self._live_rho[:, lo:lo + self.k]), lengths))
        keep = min(self.open_rounds.values(), default=self.end)  # drop what no round reads
        if keep > self._live:
            cut = keep - self._live
            self._live_gamma = self._live_gamma[:, cut:]
            self._live_rho = self._live_rho[:, cut:]
            self._live_proposes = self._live_proposes[:, cut:]
            self._live = keep
        return out


def _float64(x) -> np.ndarray:
    """A recorded statistic as a float64 array of its own (a tensor: detached, on the CPU)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.array(x, dtype=np.float64)


def window_loss(gamma: torch.Tensor, rho: torch.Tensor, loss: str, corrected: bool
                ) -> np.ndarray:
    """Per-drafter loss of one round window: ``gamma``, ``rho`` are ``(n, K)``."""
    if loss == "tap":
        values = estimators.tap_loss(gamma)
    else:
        al = (estimators.corrected_acceptance_length(gamma, rho) if corrected
              else estimators.paper_acceptance_length(gamma))
        values = estimators.eal_loss(al, gamma.shape[-1])
    return np.clip(np.asarray(torch.as_tensor(values).double().cpu()), 0.0, 1.0).reshape(-1)
