"""benchmarks/pool_votes.py: a replayed decode keeps what a real one keeps, for chains, the
consensus and trees."""

from __future__ import annotations

import numpy as np

from tests.benchmarks.scripts import load_script

pv = load_script("pool_votes")


def test_a_tree_keeps_the_answers_path_through_its_most_shared_nodes():
    table = np.array([[5, 6, 7, 8], [5, 6, 9, -1], [5, 1, -1, -1], [2, -1, -1, -1]])
    # shares: (5) 3, (5, 6) 2, then (2), (5, 1), (5, 6, 7), (5, 6, 9), (5, 6, 7, 8): 1 each
    assert pv.tree_kept(table, [5, 6, 9, 4], 2) == (2, 2)
    assert pv.tree_kept(table, [5, 6, 9, 4], 5) == (2, 5)  # (2), (5, 1), (5, 6, 7) before
    assert pv.tree_kept(table, [5, 6, 9, 4], 40) == (3, 7)
    assert pv.tree_kept(table, [3], 40) == (0, 7)
    assert pv.kept(np.array([5, 6, 7]), [5, 6, 9]) == 2
    assert pv.kept(np.array([5, 6]), [5]) == 1


def test_the_replay_advances_each_way_by_what_it_keeps_plus_the_bonus_token():
    """Two drafters over one 8-token answer; every number worked by hand."""
    answer = [10, 11, 12, 13, 14, 15, 16, 17]
    seq = [0, *answer]  # a one-token prompt
    right = {s: np.array([seq[s], seq[s + 1]] if s + 1 < len(seq) else [seq[s], -1])
             for s in range(1, len(seq))}
    tables = [{s: np.stack([right[s], np.array([99, 98])]) for s in right}]
    out = pv.replay([1], [seq], tables, ["right", "wrong"], 2)
    # "right" keeps 2 a round: rounds at 1, 4, 7 keep 2, 2, and at 7 two tokens are left
    assert out["right"] == {"mat": 8 / 3, "rows_per_round": 3.0}
    assert out["wrong"] == {"mat": 1.0, "rows_per_round": 3.0}
    # the leader is drafter 0 from the first round on (ties: the first); the consensus ties
    # 1-1 at depth 0 and takes the first member's token
    assert out["follow-the-leader"]["mat"] == 8 / 3
    assert out["consensus"]["mat"] == 8 / 3
    assert out["tree-4"] == {"mat": 8 / 3, "rows_per_round": 5.0}


def test_first_token_hits_count_any_draft_and_the_best_drafter_alone():
    seq = [0, 1, 2, 3]
    tables = [{1: np.array([[1, 9], [7, 9]]), 2: np.array([[5, 9], [2, 9]]),
               3: np.array([[3, -1], [3, -1]])}]
    # some draft right at all 3 positions; drafter 0 at positions 1 and 3, drafter 1 at 2, 3
    assert pv.first_token_hits([seq], tables) == (1.0, 2 / 3)
