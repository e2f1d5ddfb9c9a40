"""Greedy speculative decoding with one fixed drafter, replayed without the target.

Under greedy decoding the output is the target's own greedy continuation ``y`` whatever the
drafter (losslessness), and a round accepts exactly the longest prefix of the draft that
agrees with ``y``, then adds ``y``'s next token. So, given ``y`` (from one plain greedy run),
every fixed drafter's rounds can be replayed exactly with no target call::

    pos = 0
    while pos < len(y):
        d = drafter.propose(min(K, len(y) - pos), greedy)
        a = longest common prefix of d and y[pos:]
        drafter.extend(y[pos : pos + a + 1]);  pos += a + 1;  rounds += 1

MAT = ``len(y) / rounds``. It is what a fixed-drafter decoding run measures (the same
rounds, the same accepted tokens in each but the last, which a run counts past the length
limit where the replay cannot see), in milliseconds instead of seconds per query, which is what
lets the benchmark give Table 1 (every drafter on every domain) at 256 tokens on this CPU. It
gives MAT, not time: a replayed record has ``seconds = nan``.
"""

from __future__ import annotations

import math

import torch

from spec_adapters.app.args import check_int
from spec_adapters.core.warping import SamplingConfig

__all__ = ["replay_fixed"]

_GREEDY = SamplingConfig(0.0)


def replay_fixed(drafter, prompt_ids: torch.LongTensor, continuation: list[int], k: int
                 ) -> dict:
    """Replay greedy speculative decoding of ``continuation`` with ``drafter`` alone.

    Parameters
    ----------
    drafter : Drafter
        Started here on ``prompt_ids`` (a drafter that learns from the stream, like the suffix
        drafter, keeps what it learnt from the queries replayed before).
    prompt_ids : torch.LongTensor
        1-D prompt.
    continuation : list of int
        The target's greedy output after the prompt.
    k : int
        Draft length ``K`` (>= 1).

    Returns
    -------
    dict
        A benchmark record: ``new_tokens``, ``target_calls`` (rounds), ``accepted`` per round,
        ``seconds`` (nan: not timed), ``replayed``.
    """
    check_int("k", k, 1)
    drafter.start(prompt_ids.view(-1))
    pos, accepted = 0, []
    while pos < len(continuation):
        want = continuation[pos:pos + k]
        draft = drafter.propose(len(want), _GREEDY, None).tokens.tolist()
        a = next((j for j, (d, y) in enumerate(zip(draft, want, strict=False)) if d != y),
                 min(len(draft), len(want)))
        a = min(a, len(continuation) - pos - 1)  # the last token is the bonus token
        drafter.extend(torch.tensor(continuation[pos:pos + a + 1], dtype=torch.long))
        pos += a + 1
        accepted.append(a)
    return {"new_tokens": len(continuation), "target_calls": len(accepted),
            "accepted": accepted, "seconds": math.nan, "replayed": True}
