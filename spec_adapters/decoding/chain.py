"""HedgeSpec single-draft speculative decoding on transformers models.

A pool may mix kinds: n-gram, suffix and prompt-lookup drafters, small transformers models and
EAGLE heads (``spec_adapters.eagle.chain.HeadDrafters``: drafters that also read the target's
features, which :meth:`ChainScheme.verify` takes from the same verification pass).

The round is :class:`spec_adapters.decoding.loop.RoundLoop`'s; :class:`ChainScheme` supplies
its single-draft steps:

2. **draft**: drafter ``i`` samples ``K`` tokens from its warped distributions ``q``
   (``propose``; fewer at the context limit or where the drafter abstains, none: a plain
   target step), ``q`` in its cheapest exact form (:mod:`spec_adapters.core.proposal`: a point
   mass under greedy decoding), checked once here for shape, range and values;
3. **verify**: the target scores ``[last] + drafts`` in one pass (``p``, ``K + 1`` rows),
   speculative sampling accepts ``n`` drafts and yields one more token, the target's KV cache is
   cropped past the rejected drafts; a sampled request drawing from its own generator
   (``Query.coupled``) drafts each drafter's argmax instead and is verified by the coupled
   rule, drawing each emitted token as ``generate(do_sample=True)`` does, so its output is
   plain decoding's for that generator;
4. **evaluate**: every drafter appends the verified tokens (``extend``, keeping its cache in
   sync) and returns its predictions there, warped to the same forms, giving ``gamma``
   (Theorem 1) and ``rho`` per drafter and position, the drafters of each form together
   (greedy: ``gamma = rho = 1{d = x}`` from each drafter's argmax ``d``, nothing of the
   vocabulary's size).

With ``consensus=True`` the pool gains one slot, last: the *consensus*, the majority path of
every drafter's greedy draft (:func:`~spec_adapters.drafters.vote.majority_path`, as the
point-mass engines' :class:`~spec_adapters.drafters.point.Consensus`), drafted as a point
mass. Its token at a position depends on where its draft started, so it has no per-position
row: the round book scores each window of it from the drafters' argmaxes there and the
target's probability of each (:func:`~spec_adapters.selection.book.consensus_stats`).

Bandit policies (EXP3Spec, UCBSpec) and ``fixed:<i>`` skip step 4: they only need the chosen
drafter's accepted length, and a drafter catches up on the verified tokens lazily when next
chosen. MetaSD-UCB skips it too: ``verify`` gives its feedback, the chosen drafter's gamma over
the drafted block from the same target pass (``Verdict.block_gamma``).
"""

from __future__ import annotations

import numpy as np
import torch

from spec_adapters.core.acceptance import acceptance_probability
from spec_adapters.core.position_stats import position_stats
from spec_adapters.core.proposal import PointMass, Proposal, Rows, as_rows, warp
from spec_adapters.core.sampling import SamplingConfig, coupled_accept, speculative_accept
from spec_adapters.decoding.loop import GenerateOutput, Query, RoundLoop, Verdict
from spec_adapters.decoding.schemes import scheme_builder
from spec_adapters.decoding.settings import PolicySettings
from spec_adapters.drafters import Drafter, as_drafter, check_vocab, expand_drafters
from spec_adapters.drafters.base import GREEDY_VERB
from spec_adapters.drafters.vote import majority_path
from spec_adapters.hf.target import TargetModel
from spec_adapters.selection.book import greedy_stats

__all__ = ["ChainScheme", "GenerateOutput", "HedgeSpecDecoder"]

GREEDY = SamplingConfig(0.0)


def _check_distinct(drafters: list) -> None:
    """One object per slot: a drafter holds per-query state (its context, its cache), so an
    object in two slots would be advanced twice per verified chunk."""
    slots: dict[int, list[int]] = {}
    for i, d in enumerate(drafters):
        slots.setdefault(id(d), []).append(i)
    repeated = [s for s in slots.values() if len(s) > 1]
    if repeated:
        where = "; ".join(", ".join(map(str, s)) for s in repeated)
        raise ValueError(f"the same drafter object fills slots {where}: a drafter keeps "
                         "per-query state, so each slot needs its own object (pass a copy)")


class ChainScheme:
    """Single-draft proposals: a :class:`~spec_adapters.drafters.Drafter` proposes ``K``
    tokens, speculative sampling verifies them.

    Parameters
    ----------
    target : TargetModel
    drafters : list of Drafter
        Distinct objects sharing the target's vocabulary.
    k : int
        Draft length ``K >= 1``.
    consensus : bool, default False
        Add the consensus slot (module docstring), named ``"consensus"``, after the drafters.

    Attributes
    ----------
    consensus : dict
        ``{slot: member slots}``: ``{N: [0 .. N-1]}`` with the consensus, else empty.
    """

    computes_block_gamma = True  # verify fills Verdict.block_gamma when asked (MetaSD-UCB)
    couples_seeds = True  # a coupled query drafts argmaxes, verified by the coupled rule

    def __init__(self, target: TargetModel, drafters: list[Drafter], k: int,
                 consensus: bool = False) -> None:
        self.target, self.drafters, self.draft_length = target, drafters, k
        self.names = [d.name for d in drafters]
        self.consensus = {len(drafters): list(range(len(drafters)))} if consensus else {}
        if consensus:
            self.names.append("consensus")
        self._synced: list[int] = []  # verified tokens each drafter has appended
        self._spare = torch.Generator(device=target.device)  # drafting's, for coupled queries
        # drafters that read target features (EAGLE heads): always extended, with the features
        self.readers = {i for i, d in enumerate(drafters) if _feature_layers(d) is not None}
        if self.readers and target.feature_layers is None:
            raise ValueError("drafters that read target features need a TargetModel built "
                             "with their feature_layers")

    def start(self, prompt: torch.LongTensor) -> None:
        features = self.target.prefill(prompt)
        for i, drafter in enumerate(self.drafters):
            if i in self.readers:
                drafter.start(prompt, features)
            else:
                drafter.start(prompt)
        self._synced = [prompt.numel()] * len(self.drafters)

    def draft(self, i: int, q: Query, k: int) -> Proposal:
        """Drafter ``i`` proposes up to ``k <= K`` tokens (fewer at the context limit or where it
        abstains); ``k = 0`` asks the drafter nothing (a plain target step). A coupled query
        drafts point masses and never past its length limit or an EOS token, so that its
        round draws no more than plain decoding would."""
        if q.coupled:
            k = min(k, q.limit - len(q.seq) - 1)
        if k <= 0:
            return Proposal(torch.zeros(0, dtype=torch.long, device=self.target.device),
                            PointMass(torch.zeros(0, dtype=torch.long, device=self.target.device),
                                      self.target.vocab_size))
        room = self.target.max_length  # >= len(q.seq) + 1: the loop stops at the context
        k = k if room is None else min(k, room - len(q.seq))
        if i in self.consensus:
            tokens, dists = self._vote(self.consensus[i], q, k)
        else:
            # a coupled query's rule verifies point masses (each drafter's argmax), and its
            # generator is plain decoding's: a drafter that draws even so draws from a spare one
            sampling, gen = (GREEDY, self._spare) if q.coupled else (q.sampling, q.gen)
            tokens, dists = self._propose(i, q, k, sampling, gen)
        if q.coupled:  # cut before an EOS: the walk's next draw is plain's draw there
            eos = next((j for j, t in enumerate(tokens.tolist()) if t in q.eos), None)
            if eos is not None:
                tokens = tokens[:eos]
                dists = PointMass(tokens, self.target.vocab_size)
        return Proposal(tokens.to(self.target.device).long(), dists.to(self.target.device))

    def _propose(self, i: int, q: Query, k: int, sampling: SamplingConfig,
                 gen: torch.Generator) -> tuple[torch.Tensor, Rows]:
        """Drafter ``i``'s checked proposal of up to ``k`` tokens, caught up first."""
        if self._synced[i] < len(q.seq):  # lazy catch-up (bandit / fixed policies)
            self._extend(i, torch.tensor(q.seq[self._synced[i]:]), len(q.seq))
        tokens, dists = self.drafters[i].propose(k, sampling, gen)
        return tokens, self._check_proposal(i, k, tokens, dists)

    def _vote(self, members: list[int], q: Query, k: int) -> tuple[torch.Tensor, PointMass]:
        """The consensus draft: the majority path of the ``members``' greedy drafts."""
        table = np.full((len(members), k), -1, np.int64)
        for row, m in enumerate(members):
            tokens = self._propose(m, q, k, GREEDY, self._spare)[0].numpy()
            table[row, :tokens.size] = tokens
        tokens = torch.from_numpy(majority_path(table)[0])
        return tokens, PointMass(tokens, self.target.vocab_size)

    def verify(self, draft: Proposal, q: Query) -> Verdict:
        """One target pass over ``[last] + drafts``, speculative acceptance, crop (no draft:
        one plain target step)."""
        tokens, dists = draft
        length = len(q.seq)
        last, feats = torch.tensor([q.seq[-1]]), None
        if self.readers:  # the same pass also yields the features heads read
            logits, feats = self.target.verify_features(last, tokens)
        else:
            logits = self.target.verify(last, tokens)
        # p is valid by construction (SamplingConfig.probs), q was checked by draft()
        p = q.sampling.probs(logits)
        if q.coupled:  # plain decoding's draw per emitted position: generate's multinomial
            n_accepted, nxt = coupled_accept(p, tokens.tolist(), lambda _, row: int(
                torch.multinomial(row, 1, generator=q.gen)))
        else:
            n_accepted, nxt = speculative_accept(p, dists, tokens, q.gen, validate=False)
        self.target.crop(length + n_accepted)  # cache = new sequence minus its last token
        block = None
        if q.block_gamma:  # MetaSD: the window's mean of gamma_j = sum_x min(p_j, q_j)
            n = tokens.numel()  # a position not drafted (abstention, context limit) counts 0
            block = 0.0 if n == 0 else float(
                acceptance_probability(p[:n], dists, validate=False).sum()) / self.draft_length
        return Verdict(n_accepted, [*tokens[:n_accepted].tolist(), int(nxt)], p[:n_accepted + 1],
                       None if feats is None else feats[:n_accepted + 1],
                       drafted=int(tokens.numel()), block_gamma=block)

    def evaluate(self, verdict: Verdict, q: Query, counterfactual: bool
                 ) -> tuple | None:
        """Every drafter appends the verified tokens; gamma, rho and where each abstains, at
        each of them (greedy: :func:`~spec_adapters.selection.book.greedy_stats`, numpy);
        with the consensus also every drafter's argmax there and the target's probability
        of it, the consensus's own row ``NaN`` (the book scores it per window).
        Without ``counterfactual`` only the feature readers append (they have no lazy
        catch-up: the features of earlier rounds are gone)."""
        if not counterfactual:
            for i in self.readers:
                self._extend_argmax(i, torch.tensor(verdict.tokens), len(q.seq),
                                    verdict.features)
            return None
        new, V = torch.tensor(verdict.tokens), self.target.vocab_size
        if q.sampling.greedy or q.coupled:  # every q a point mass at the drafter's argmax
            drafts = np.stack([self._extend_argmax(i, new, len(q.seq), verdict.features)
                               for i in range(len(self.drafters))])
            if q.sampling.greedy:  # p too: gamma = rho = 1{d = x}
                stats = greedy_stats(drafts, new.numpy())
            else:  # coupled: gamma = p(d), the coupled rule's acceptance
                stats = position_stats(verdict.p, [PointMass(torch.from_numpy(d), V)
                                                   for d in drafts], new.to(verdict.p.device))
            return self._with_consensus(stats, drafts, stats[0]) if self.consensus else stats
        preds = [self._extend(i, new, len(q.seq), verdict.features)
                 for i in range(len(self.drafters))]
        dists = [warp(pred, q.sampling).to(verdict.p.device) for pred in preds]
        stats = position_stats(verdict.p, dists, new.to(verdict.p.device))
        if not self.consensus:
            return stats
        drafts = np.stack([warp(pred, GREEDY).tokens.cpu().numpy() for pred in preds])
        return self._with_consensus(stats, drafts, PointMass(
            torch.from_numpy(drafts).to(verdict.p.device), V).overlap(verdict.p))

    @staticmethod
    def _with_consensus(stats: tuple, drafts: np.ndarray, p_drafts) -> tuple:
        """``(gamma, rho, proposes, argmax, p_argmax)`` with the consensus's row appended to
        each: ``NaN`` / never / ``-1`` / ``NaN`` (the book scores its windows from the
        others' ``argmax``, ``drafts``, and ``p_argmax``, ``p_drafts``)."""
        def grow(x, fill):
            x = np.asarray(x.cpu() if isinstance(x, torch.Tensor) else x)
            return np.concatenate([x, np.full((1, x.shape[1]), fill, x.dtype)])

        gamma, rho, proposes = stats
        return (grow(gamma, np.nan), grow(rho, np.nan), grow(proposes, False),
                grow(drafts, -1), grow(p_drafts, np.nan))

    def stats(self) -> dict:
        return {}

    def _extend(self, i: int, tokens: torch.LongTensor, synced: int, features=None
                ) -> torch.Tensor | Rows:
        """Drafter ``i`` appends ``tokens`` (a feature reader: with their ``features``); its
        predictions of them: logits ``(m, V)`` or a form with ``m`` rows."""
        pred = self.drafters[i].extend(tokens, features) if i in self.readers else \
            self.drafters[i].extend(tokens)
        shape = (tokens.numel(), self.target.vocab_size)
        if isinstance(pred, Rows):
            got = (*pred.lead, pred.vocab_size)
        else:
            got = tuple(pred.shape) if isinstance(pred, torch.Tensor) else type(pred).__name__
        if got != shape:
            raise ValueError(f"drafter {self.names[i]!r} (slot {i}): extend of {shape[0]} "
                             f"tokens must return logits or rows of shape {shape}, got {got}")
        self._synced[i] = synced
        return pred

    def _extend_argmax(self, i: int, tokens: torch.LongTensor, synced: int, features=None
                       ) -> np.ndarray:
        """Drafter ``i`` appends ``tokens``; the argmax of its prediction of each (``-1``: it
        abstains), by its ``extend_argmax`` where it has one, else ``warp(extend, greedy)``."""
        fast = getattr(self.drafters[i], GREEDY_VERB, None)
        if fast is None:
            return warp(self._extend(i, tokens, synced, features), GREEDY).tokens.cpu().numpy()
        top = fast(tokens.numpy(), features) if i in self.readers else fast(tokens.numpy())
        if not isinstance(top, np.ndarray) or top.shape != (tokens.numel(),) \
                or top.dtype.kind not in "iu":
            got = top.shape if isinstance(top, np.ndarray) else type(top).__name__
            raise ValueError(f"drafter {self.names[i]!r} (slot {i}): {GREEDY_VERB} of "
                             f"{tokens.numel()} tokens must return {tokens.numel()} integer "
                             f"ids, got {got}")
        self._synced[i] = synced
        return top

    def _check_proposal(self, i: int, k: int, tokens, dists) -> Rows:
        """``propose`` must return ``j <= k`` integer ids in ``[0, V)`` and ``q`` with ``j``
        valid rows (a form, or probabilities ``(j, V)``), each giving its token ``q > 0``.
        This is the one validation of ``q`` per round; returns it as rows."""
        V = self.target.vocab_size
        problem, rows = None, None
        if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() \
                or tokens.is_complex() or tokens.dtype == torch.bool:
            problem = f"tokens must be an integer tensor, got {_describe(tokens)}"
        elif tokens.dim() != 1 or tokens.numel() > k:
            problem = (f"tokens must have shape ({k},) or shorter (abstention), got "
                       f"{tuple(tokens.shape)}")
        elif tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
            problem = f"token ids must be in [0, {V}), got {tokens.tolist()}"
        elif not isinstance(dists, Rows) and (not isinstance(dists, torch.Tensor)
                                              or not dists.is_floating_point()):
            problem = f"q must be a floating tensor or rows, got {_describe(dists)}"
        else:
            rows = as_rows(dists)
            j = tokens.numel()
            if (*rows.lead, rows.vocab_size) != (j, V):
                problem = f"q must have shape ({j}, {V}), got {(*rows.lead, rows.vocab_size)}"
            else:
                try:
                    rows.check("q")
                    if j and bool((rows.prob(tokens) <= 0).any()):
                        problem = "a drafted token has q = 0: it cannot have been drawn from q"
                except ValueError as err:
                    problem = str(err)
        if problem is not None:
            raise ValueError(f"drafter {self.names[i]!r} (slot {i}): propose({k}) returned a "
                             f"bad proposal: {problem}")
        return rows


def _feature_layers(drafter) -> tuple[int, ...] | None:
    """The target layers a drafter reads (EAGLE heads' ``feature_layers``), else ``None``."""
    layers = getattr(drafter, "feature_layers", None)
    return None if layers is None else tuple(layers)


def _describe(x) -> str:
    return f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__


class HedgeSpecDecoder(RoundLoop):
    """Lossless speculative decoding with online drafter selection: the one decoder.

    A pool of :class:`~spec_adapters.drafters.Drafter` objects runs single drafts
    (:class:`ChainScheme`); a pool of EAGLE heads runs draft trees (the scheme
    :mod:`spec_adapters.eagle` registers, :mod:`spec_adapters.decoding.schemes`);
    ``spec_adapters.eagle.HedgeSpecDecoder`` is this class.

    Parameters
    ----------
    target : transformers.PreTrainedModel or TargetModel
        The causal LM whose distribution is reproduced exactly.
    drafters : list
        :class:`~spec_adapters.drafters.Drafter` objects, transformers causal LMs (wrapped as
        :class:`~spec_adapters.drafters.HFDrafter`) or
        :class:`~spec_adapters.drafters.StackedHFDrafters` groups (expanded into their members,
        evaluated in one batched pass) or ``spec_adapters.eagle.chain.HeadDrafters`` groups
        (EAGLE heads drafting chains, evaluated in one batched pass, reading the target
        features of the verification pass); all share the target's vocabulary. Each slot needs
        its own object: the same object twice is refused (it would share its context between
        two slots). Or :class:`~spec_adapters.eagle.EagleHead` objects, every one trained for
        ``target``: draft trees (not mixed with other drafters).
    draft_length : int, optional
        ``K >= 1`` tokens drafted per round (the depth of a tree); default 5, for heads
        ``tree.depth``.
    tree : TreeConfig, optional
        EAGLE heads only: the draft tree (default ``TreeConfig(depth=draft_length)``: top_k 8,
        48 tokens).
    batched : bool, default True
        EAGLE heads only: evaluate same-architecture heads in one vmapped call.
    consensus : bool, default False
        Single drafts only: one more drafter, last, named ``"consensus"``: the majority path
        of every drafter's greedy draft, a point mass (:class:`ChainScheme`).
    **settings
        The fields of :class:`~spec_adapters.decoding.loop.PolicySettings`: ``policy``,
        ``loss``, ``delay``, ``carry_state``, ``cost_aware`` (single drafts only).

    Notes
    -----
    ``generate(input_ids, max_new_tokens, temperature, top_p, top_k, seed, eos_token_id,
    streamer, on_round)`` is :meth:`spec_adapters.decoding.loop.RoundLoop.generate`. With
    heads, ``accepted`` counts accepted tree nodes per round, ``stats["tree_nodes"]`` lists
    the drafted tree sizes and ``stats["tree"]`` the TreeConfig.

    Raises
    ------
    ValueError
        Empty drafter pool, heads mixed with other drafters, ``consensus`` with heads, the
        same drafter object in two slots, a drafter whose vocabulary differs from the
        target's, ``K < 1``, a ``tree`` for single drafts or one whose depth is not
        ``draft_length``, an unknown setting,
        policy, loss or delay, ``cost_aware`` with a bandit or fixed policy or with heads.
    """

    def __init__(self, target, drafters, draft_length: int | None = None, *, tree=None,
                 batched: bool = True, consensus: bool = False, **settings) -> None:
        policy = PolicySettings.of(**settings)
        drafters = [] if drafters is None else list(drafters)
        if not drafters:
            raise ValueError("empty drafter pool: pass at least one drafter")
        if not isinstance(consensus, bool):
            raise ValueError(f"consensus must be True or False, got {consensus!r}")
        build = scheme_builder(drafters)
        if build is not None and consensus:
            raise ValueError("consensus=True is for single drafts: EAGLE heads draft trees")
        if build is not None:
            scheme = build(target, drafters, draft_length, tree, batched)
            if policy.cost_aware:
                raise ValueError("cost_aware=True is for single drafts: a tree's verification "
                                 "cost is not a function of a draft length")
        else:
            if tree is not None:
                raise ValueError("tree= applies to EAGLE heads; single drafts take "
                                 "draft_length")
            scheme = self._chain(target, drafters, 5 if draft_length is None else draft_length,
                                 consensus)
        self.drafters = list(scheme.drafters)
        super().__init__(scheme, policy)

    @staticmethod
    def _chain(target, drafters: list, k, consensus: bool) -> ChainScheme:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"draft_length (K) must be an integer >= 1, got {k!r}")
        drafters = expand_drafters(drafters)
        _check_distinct(drafters)
        target = target if isinstance(target, TargetModel) else TargetModel(target)
        drafters = [as_drafter(d, i) for i, d in enumerate(drafters)]
        check_vocab(drafters, target.vocab_size)
        layers = {_feature_layers(d) for d in drafters} - {None}
        if len(layers) > 1:
            raise ValueError(f"the pool's feature-reading drafters read different target "
                             f"layers {sorted(layers)}: one verification pass captures one set")
        if layers:
            target = target.reading(layers.pop())
        return ChainScheme(target, drafters, int(k), consensus)
