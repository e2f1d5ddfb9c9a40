"""The selection core: everything HedgeSpec decides, under every engine (numpy only).

An engine adapter (the transformers loop :mod:`spec_adapters.decoding`, the vLLM proposer
:mod:`spec_adapters.vllm`, the llama.cpp engine) owns the target and its verification; this
package owns the choice of drafter and draft length and what it learns from:

``book``            :class:`RoundBook`: the open rounds of a request and the verified positions
                    their windows read (per-position statistics or per-round point-mass drafts)
``experts``         the (drafter, k) losses of a window (:func:`window_losses`; Theorem 3's
                    estimators, the Dinkelbach time loss)
``costs``           what a step costs, measured online: :class:`StepCosts` (one request at a
                    time), :class:`StepTimeModel` (a batch)
``abstention``      :class:`AcceptanceBook`, :func:`expected_gains`, :func:`paying_k`: draft only
                    where the expected gain pays the step's cost
``stop_rules``      :class:`StopRules`: (drafter, stop rule) experts, a rule cutting a draft where
                    its running confidence falls below a threshold
``policies``        :func:`make_policy`: HedgeSpec (NormalHedge...), the bandits, fixed
``session``         :class:`SelectionSession`: one request's play / open / record / feed /
                    censor / close over the above, the same verbs in every engine;
                    :class:`Stream`: what the requests of a stream share; :class:`RoundInfo`:
                    what a round did, as every engine reports it to ``on_round``

The drafters it chooses among are :mod:`spec_adapters.drafters` (the point-mass ones, which
the vLLM and llama.cpp engines use: :mod:`spec_adapters.drafters.point`). Importing it never
imports torch (tested).
"""

from __future__ import annotations

from spec_adapters.selection.abstention import AcceptanceBook, expected_gains, paying_k
from spec_adapters.selection.book import RoundBook, Window, greedy_stats
from spec_adapters.selection.costs import StepCosts, StepTimeModel
from spec_adapters.selection.experts import (
    LENGTH_LOSSES,
    LOSSES,
    acceptance_lengths,
    expert_losses,
    expert_of,
    n_experts,
    window_losses,
)
from spec_adapters.selection.policies import make_policy
from spec_adapters.selection.session import Play, RoundInfo, Scored, SelectionSession, Stream
from spec_adapters.selection.stop_rules import StopRules

__all__ = ["LENGTH_LOSSES", "LOSSES", "AcceptanceBook", "Play", "RoundBook", "RoundInfo", "Scored",
           "SelectionSession", "StepCosts", "StepTimeModel", "StopRules", "Stream", "Window",
           "acceptance_lengths", "expected_gains", "expert_losses", "expert_of",
           "greedy_stats", "make_policy", "n_experts", "paying_k", "window_losses"]
