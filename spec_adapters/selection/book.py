"""The round book: every open round of one request, and the verified positions they read.

A round that starts with ``s`` verified tokens drafts positions ``s .. s+K-1``; it *completes*
when those ``K`` positions are verified, which may take several later rounds (delay <= K-1;
the learner is fed through a delayed-feedback reduction, :mod:`onlinelearn.delayed`). Its
window holds, per drafter ``i`` and position ``j`` of the window,

- ``gamma[i, j]``: the probability that drafter ``i`` would have had its token at ``j``
  accepted (Theorem 1: ``sum_x min(p_j(x), q_ij(x))``; the EAGLE decoder stores the tree form
  of Theorem 2 instead);
- ``rho[i, j] = min(1, q_ij(x_j) / p_j(x_j))`` for the realized token ``x_j``;
- ``lengths[i]``: how many tokens the drafter would have drafted (its leading positions before
  its first abstention), what a cost-aware expert ``(i, k)`` pays for.

The statistics come in one of two ways, and every engine uses this one book:

- **per position** (the transformers loop, drafters with distributions): after each
  verification every drafter is fed the verified tokens and :meth:`RoundBook.record` gets their
  ``gamma, rho, proposes`` there (:func:`spec_adapters.core.position_stats.position_stats`, or
  :func:`greedy_stats` under greedy decoding);
- **per round** (engines whose drafters are deterministic point masses: the vLLM proposer, the
  llama.cpp engine): :meth:`RoundBook.open` keeps every drafter's draft made at that round, and
  :meth:`RoundBook.record` gets the verified tokens alone; a window is then ``gamma = rho =
  1{draft = verified}`` (:func:`greedy_stats`), exact under greedy decoding and an unbiased
  estimate when sampling (``python -m proofs_check --only pointmass``).

The losses of a window are :func:`spec_adapters.selection.experts.window_losses`. Rounds still
open when generation stops are taken out by :meth:`RoundBook.close`, for the learner to censor.
numpy only.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from spec_adapters.drafters.vote import majority_path

__all__ = ["RoundBook", "Window", "consensus_stats", "greedy_stats"]


def greedy_stats(drafts: np.ndarray, tokens: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every drafter's statistics at verified positions under greedy decoding, in numpy.

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


def consensus_stats(argmax: np.ndarray, p_argmax: np.ndarray, tokens: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""A consensus drafter's statistics over one round's window, from its members'.

    A consensus drafts the majority path of its members' drafts made where the round starts
    (:func:`~spec_adapters.drafters.vote.majority_path`), so its token at a position depends
    on where the draft started: it has no per-position row of its own, and its window is
    scored here. A member on the path at depth ``j`` has drafted the verified tokens before
    ``j`` (for the depth to count the path must have been accepted so far), so its token at
    ``j`` is its argmax given the verified prefix, ``argmax[m, j]``, the same per-position
    prediction every other drafter is scored by. The path it would have drafted is then
    ``w = majority_path(argmax)`` and, a point mass (Theorem 1),

    .. math:: \gamma_j = p_j(w_j), \qquad \rho_j = \min(1, 1\{w_j = x_j\} / p_j(x_j))
              = 1\{w_j = x_j\},

    ``p_j(w_j)`` read off ``p_argmax`` at a member whose argmax is ``w_j``; from where the path
    stops, nothing is proposed (``gamma = rho = 0``).

    Parameters
    ----------
    argmax : numpy.ndarray
        ``(M, K)`` int, the members' argmaxes at the window's positions, in the consensus's
        tie-breaking order (``-1``: the member abstains there).
    p_argmax : numpy.ndarray
        ``(M, K)`` float, the target's warped probability of each of those tokens (greedy:
        ``1{argmax = x}``; any value where ``argmax`` is ``-1``).
    tokens : numpy.ndarray
        ``(K,)`` int, the verified tokens.

    Returns
    -------
    gamma, rho, proposes : numpy.ndarray
        ``(K,)``: float64, float64, bool.
    """
    argmax = np.asarray(argmax)
    path, _share = majority_path(argmax)
    n = path.size
    gamma, rho = np.zeros(argmax.shape[1]), np.zeros(argmax.shape[1])
    proposes = np.arange(argmax.shape[1]) < n
    if n:
        voter = np.argmax(argmax[:, :n] == path, 0)  # the first member with each path token
        gamma[:n] = np.asarray(p_argmax)[voter, np.arange(n)]
        rho[:n] = path == np.asarray(tokens)[:n]
    return gamma, rho, proposes


class Window(NamedTuple):
    """A completed round's window of ``K`` verified positions.

    Attributes
    ----------
    round_id : int
    gamma, rho : numpy.ndarray
        ``(n, K)`` float64.
    lengths : numpy.ndarray
        ``(n,)`` int: the tokens each drafter would have drafted in the window, i.e. its
        leading positions before its first abstention (``K`` if it never abstains); a
        cost-aware expert ``(i, k)`` pays for ``min(k, lengths[i])`` drafts.
    data : Any
        What the engine attached to the round at :meth:`RoundBook.open` (the vLLM proposer:
        the played expert and its step costs), else ``None``.
    """

    round_id: int
    gamma: np.ndarray
    rho: np.ndarray
    lengths: np.ndarray
    data: Any = None


class RoundBook:
    """The open rounds of one request and the verified positions their windows read.

    Parameters
    ----------
    n : int
        Number of drafters.
    draft_length : int
        ``K``, the window length of every round.
    corrected : bool, default True
        Windows feed the corrected (unbiased) acceptance-length estimator (the decoders pass
        ``temperature > 0``); irrelevant under greedy decoding, where both forms coincide.
    consensus : dict, optional
        ``{row: member rows}``: rows that are consensus drafters over those members, scored
        per window by :func:`consensus_stats` from the members' per-position ``argmax`` and
        ``p_argmax`` that :meth:`record` then needs (their own per-position statistics are
        not read: record ``NaN`` there).

    Notes
    -----
    Positions are absolute indices into the verified sequence (prompt included); the book
    starts at the position given to :meth:`reset`. Windows are read from a live block that
    starts at the oldest open round, so a round costs ``O(N K)`` whatever the request's length;
    :attr:`gamma` / :attr:`rho` concatenate the per-position history once, when asked.
    """

    def __init__(self, n: int, draft_length: int, corrected: bool = True,
                 consensus: dict[int, list[int]] | None = None) -> None:
        self.n, self.k, self.corrected = int(n), int(draft_length), bool(corrected)
        self.consensus = {int(c): [int(m) for m in ms] for c, ms in (consensus or {}).items()}
        rows = [r for c, ms in self.consensus.items() for r in (c, *ms)]
        if any(not 0 <= r < self.n for r in rows) or any(
                c in ms or set(ms) & self.consensus.keys() or not ms
                for c, ms in self.consensus.items()):
            raise ValueError(f"consensus must map rows in [0, {self.n}) to non-empty lists of "
                             f"other, non-consensus rows, got {consensus!r}")
        self.reset(0)

    def reset(self, first_position: int) -> None:
        """Forget everything; the next recorded token is at ``first_position``."""
        self.first = self.end = self._live = int(first_position)
        self._gamma: list[np.ndarray] = []  # one (n, m) block per record() with statistics
        self._rho: list[np.ndarray] = []
        self.open_rounds: dict[int, tuple[int, np.ndarray | None, Any]] = {}
        self._live_tokens = np.zeros(0, np.int64)
        self._live_gamma = np.zeros((self.n, 0))
        self._live_rho = np.zeros((self.n, 0))
        self._live_proposes = np.zeros((self.n, 0), bool)
        self._live_argmax = np.zeros((self.n, 0), np.int64)  # with consensus rows only
        self._live_p_argmax = np.zeros((self.n, 0))

    def open(self, round_id: int, start: int, drafts: np.ndarray | None = None,
             data: Any = None) -> None:
        """A round drafting positions ``start .. start+K-1`` was played.

        Parameters
        ----------
        round_id : int
            The learner's id of the round.
        start : int
            Its first drafted position (the verified length when it was played).
        drafts : numpy.ndarray, optional
            ``(n, K)`` int: every drafter's point-mass draft made at this round (``-1`` from
            where it drafted nothing); the window is scored from them. ``None``: from the
            per-position statistics :meth:`record` gets.
        data : Any, optional
            Handed back in the round's :class:`Window`.

        Raises
        ------
        ValueError
            ``start`` before the positions still kept (every open round's window was already
            complete there), ``round_id`` already open, ``drafts`` not ``(n, K)``.
        """
        if start < self._live:
            raise ValueError(f"round {round_id} starts at position {start}, before the first "
                             f"position still kept ({self._live})")
        if round_id in self.open_rounds:
            raise ValueError(f"round {round_id} is already open")
        if drafts is not None:
            drafts = np.asarray(drafts, np.int64)
            if drafts.shape != (self.n, self.k):
                raise ValueError(f"drafts must be ({self.n}, {self.k}), got {drafts.shape}")
        self.open_rounds[round_id] = (int(start), drafts, data)

    def record(self, tokens, gamma=None, rho=None, proposes=None, argmax=None, p_argmax=None
               ) -> None:
        """Append the next ``m`` verified ``tokens`` and, for rounds opened without drafts, every
        drafter's ``gamma, rho`` ``(n, m)`` there (numpy arrays or tensors; ``proposes``, bool,
        ``None``: everywhere, marks where each drafter would have drafted at all); with
        consensus rows also every drafter's ``argmax`` there (int, ``-1``: abstains) and the
        target's warped probability of it, ``p_argmax`` (:func:`consensus_stats`)."""
        tokens = np.asarray(tokens, np.int64).reshape(-1)
        m = tokens.size
        if gamma is None and not self.open_rounds:  # no round reads them (a new round starts
            self.end += m                           # at or after the end): nothing to keep
            self._live = self.end
            return
        if gamma is not None:
            gamma, rho = _float64(gamma), _float64(rho)
            proposes = np.ones(gamma.shape, bool) if proposes is None else _bool(proposes)
            if gamma.shape != (self.n, m) or rho.shape != gamma.shape \
                    or proposes.shape != gamma.shape:
                raise ValueError(f"gamma, rho and proposes must all be ({self.n}, {m}) for {m} "
                                 f"tokens, got {gamma.shape}, {rho.shape} and "
                                 f"{proposes.shape}")
            if self.consensus:
                if argmax is None or p_argmax is None:
                    raise ValueError("a book with consensus rows records every drafter's "
                                     "argmax and p_argmax with the statistics")
                argmax, p_argmax = np.asarray(argmax, np.int64), _float64(p_argmax)
                if argmax.shape != gamma.shape or p_argmax.shape != gamma.shape:
                    raise ValueError(f"argmax and p_argmax must be ({self.n}, {m}), got "
                                     f"{argmax.shape} and {p_argmax.shape}")
            # the statistics cover the live positions up to here (NaN where none came)
            self._pad_statistics(self.end - self._live)
            if not np.isnan(gamma).all():
                self._gamma.append(gamma)
                self._rho.append(rho)
            self._live_gamma = np.concatenate([self._live_gamma, gamma], 1)
            self._live_rho = np.concatenate([self._live_rho, rho], 1)
            self._live_proposes = np.concatenate([self._live_proposes, proposes], 1)
            if self.consensus:
                self._live_argmax = np.concatenate([self._live_argmax, argmax], 1)
                self._live_p_argmax = np.concatenate([self._live_p_argmax, p_argmax], 1)
        # without statistics (point-mass drafters): rounds opened with drafts read the tokens
        # alone; one opened without finds NaN there (pop_completed says so)
        self._live_tokens = np.concatenate([self._live_tokens, tokens])
        self.end += m

    def _pad_statistics(self, length: int) -> None:
        """The live statistics cover the first live positions, those recorded without any
        (``NaN``, never proposing) after the last recorded with: pad them to ``length``."""
        gap = length - self._live_gamma.shape[1]
        if gap > 0:
            nan = np.full((self.n, gap), np.nan)
            self._live_gamma = np.concatenate([self._live_gamma, nan], 1)
            self._live_rho = np.concatenate([self._live_rho, nan], 1)
            self._live_proposes = np.concatenate(
                [self._live_proposes, np.zeros((self.n, gap), bool)], 1)
            if self.consensus:
                self._live_argmax = np.concatenate(
                    [self._live_argmax, np.full((self.n, gap), -1, np.int64)], 1)
                self._live_p_argmax = np.concatenate([self._live_p_argmax, nan], 1)

    @property
    def gamma(self) -> np.ndarray:
        """Every per-position gamma recorded, ``(n, end - first)`` float64."""
        return np.concatenate(self._gamma, 1) if self._gamma else np.zeros((self.n, 0))

    @property
    def rho(self) -> np.ndarray:
        """Every per-position rho recorded, ``(n, end - first)`` float64."""
        return np.concatenate(self._rho, 1) if self._rho else np.zeros((self.n, 0))

    def pop_completed(self) -> list[Window]:
        """Remove and return the :class:`Window` of every round whose ``K`` positions are
        verified, in round-id order."""
        done = sorted((rid, start) for rid, (start, _d, _x) in self.open_rounds.items()
                      if start + self.k <= self.end)
        if not done:  # most rounds: nothing completes, nothing to drop
            return []
        out = []
        for rid, start in done:
            _start, drafts, data = self.open_rounds[rid]
            lo, hi = start - self._live, start - self._live + self.k
            if drafts is not None:
                gamma, rho, proposes = greedy_stats(drafts, self._live_tokens[lo:hi])
            else:
                self._pad_statistics(hi)
                gamma, rho = self._live_gamma[:, lo:hi], self._live_rho[:, lo:hi]
                proposes = self._live_proposes[:, lo:hi]
                if self.consensus:
                    gamma, rho, proposes = self._consensus_window(gamma, rho, proposes, lo, hi)
                if np.isnan(gamma).any():
                    raise ValueError(f"round {rid} was opened without drafts but positions "
                                     f"{start}..{start + self.k - 1} were recorded without "
                                     "statistics")
            # leading positions each drafter proposes at: the first False, or K
            lengths = np.where(proposes.all(1), self.k, np.argmin(proposes, 1))
            out.append(Window(rid, gamma, rho, lengths, data))
        for rid, _start in done:  # taken out only once every window could be read
            del self.open_rounds[rid]
        self._drop_unread()
        return out

    def _consensus_window(self, gamma, rho, proposes, lo: int, hi: int):
        """Copies of a window's statistics with the consensus rows scored
        (:func:`consensus_stats`; unscorable, ``NaN``, where a member's argmax was not
        recorded)."""
        gamma, rho, proposes = gamma.copy(), rho.copy(), proposes.copy()
        for c, members in self.consensus.items():
            p_argmax = self._live_p_argmax[members, lo:hi]
            argmax = self._live_argmax[members, lo:hi]
            if np.isnan(p_argmax[argmax >= 0]).any() or np.isnan(gamma[members]).any():
                continue  # left NaN: pop_completed says so
            gamma[c], rho[c], proposes[c] = consensus_stats(
                argmax, p_argmax, self._live_tokens[lo:hi])
        return gamma, rho, proposes

    def close(self) -> list[int]:
        """Take out every open round (generation stopped before its window completed); their
        ids in order, for the learner to censor."""
        ids = sorted(self.open_rounds)
        self.open_rounds.clear()
        self._drop_unread()
        return ids

    def _drop_unread(self) -> None:
        """Drop the live positions no open round reads."""
        keep = min((s for s, _d, _x in self.open_rounds.values()), default=self.end)
        if keep > self._live:
            cut = keep - self._live
            self._live_tokens = self._live_tokens[cut:]
            self._live_gamma = self._live_gamma[:, cut:]
            self._live_rho = self._live_rho[:, cut:]
            self._live_proposes = self._live_proposes[:, cut:]
            self._live_argmax = self._live_argmax[:, cut:]
            self._live_p_argmax = self._live_p_argmax[:, cut:]
            self._live = keep


def _float64(x) -> np.ndarray:
    """A recorded statistic as a float64 array of its own (a tensor: detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.array(x, dtype=np.float64)


def _bool(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, bool)
