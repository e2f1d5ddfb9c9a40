"""The majority path of several drafts: the consensus drafter's rule (numpy only).

From ``M`` drafts ``d_m`` (each a path of up to ``k`` tokens, ``-1`` from where it drafts
nothing), depth by depth: the drafts still on the path so far that have a token there vote
for it; the token with the most votes extends the path (a tie: the token of the earliest
draft among the tied), and only its voters stay on the path. The path stops where no draft
on it has a token. The share of the votes the winner got at depth ``j``,

.. math:: c_j = \\frac{|\\{m \\in A_j : d_{mj} = x_j\\}|}{|\\{m \\in A_j : d_{mj}
          \\text{ drafted}\\}|}, \\qquad A_{j+1} = \\{m \\in A_j : d_{mj} = x_j\\},

is the path's confidence there: the running product ``prod_{l<=j} c_l`` is the share of
the first depth's voters behind the whole path up to ``j``.

Two users: :class:`spec_adapters.drafters.point.Consensus` drafts with it (the point-mass
engines), and :func:`spec_adapters.selection.book.consensus_stats` scores the consensus of
the transformers loop with it, from its members' per-position argmaxes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["majority_path"]


def majority_path(drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The majority path of the draft table ``drafts`` ``(M, k)`` (``-1``: no draft there) and
    its vote share per depth (module docstring): ``(tokens, share)``, int64 and float64, of
    the same length ``<= k``."""
    rows = np.asarray(drafts).tolist()  # a dozen drafts: plain Python beats numpy calls
    on_path = list(range(len(rows)))
    out, share = [], []
    for j in range(np.shape(drafts)[1]):
        votes: dict[int, int] = {}  # in the order of each token's earliest voter
        for m in on_path:
            if rows[m][j] >= 0:
                votes[rows[m][j]] = votes.get(rows[m][j], 0) + 1
        if not votes:
            break
        x = max(votes, key=votes.__getitem__)  # the first of the tied: earliest voter
        out.append(x)
        share.append(votes[x] / sum(votes.values()))
        on_path = [m for m in on_path if rows[m][j] == x]
    return np.asarray(out, np.int64), np.asarray(share, np.float64)
