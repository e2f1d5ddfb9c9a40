"""The benchmark's settings: ``BenchConfig``, the methods it knows and the named presets
(``hedgespec bench --preset NAME``); :mod:`spec_adapters.app.bench.run` runs them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DECODER_POLICIES", "POLICIES", "PRESETS", "TOP_P", "VARIANTS", "BenchConfig"]

TOP_P = 0.9  # the chat setting's nucleus, with a temperature (hedgespec bench-vllm)

POLICIES = ("normalhedge", "normalhedge-cost", "normalhedge-cost-consensus",
            "normalhedge-carry", "hedge", "adahedge", "exp3spec", "ucbspec", "metasd-ucb")
# a benchmark method name -> (the decoder's policy, cost_aware, carry_state, consensus):
# "-carry" keeps the learner's state from one query of the stream to the next (the paper
# resets it per query); "-consensus" adds the pool's majority draft as one more drafter
DECODER_POLICIES = {m: (m, False, False, False) for m in POLICIES} | {
    "normalhedge-cost": ("normalhedge", True, False, False),
    "normalhedge-cost-consensus": ("normalhedge", True, False, True),
    "normalhedge-carry": ("normalhedge", False, True, False)}
VARIANTS = {
    "prefix": "You are a careful assistant. Read the request below and reply helpfully.\n\n{p}",
    "twice": "{p}\n\nAnswer twice and pick the better answer.",
}


@dataclass
class BenchConfig:
    """Sizes and settings of one benchmark run (see :data:`PRESETS`).

    Attributes
    ----------
    queries_per_domain : int
        Greedy mixed stream: held-out prompts per domain.
    sampled_queries_per_domain : int
        Sampled stream (``temperature``): prompts per domain (the first ones of the greedy
        stream); 0 skips it.
    max_new_tokens, draft_length : int
    temperature : float
    top_p : float
        The sampled stream's nucleus, in ``(0, 1]``, for every method (1.0: none; the other
        engines' chat setting is :data:`TOP_P`).
    policies : tuple of str
        Learners to run greedy (subset of :data:`POLICIES`).
    sampled_policies, poolsize_policies : tuple of str
        Learners of the sampled stream and of the pool-size sweep.
    hf_lookup : bool
        Also transformers' prompt lookup decoding (``K`` tokens), greedy and sampled.
    hf_static_compiled : bool
        Also transformers' fastest documented single-request setting, a static KV cache and
        ``model.forward`` compiled with ``torch.compile``
        (:class:`~spec_adapters.app.bench.static_compiled.StaticCompiledTarget`;
        ``hf-static-compiled``), greedy and sampled; with ``hf_lookup`` also its prompt lookup
        on that compiled static cache (``hf-static-compiled-lookup``).
    rows_first_target : bool
        Also the target alone through the layout HedgeSpec verifies with (rows-first where
        it measures faster, :class:`~spec_adapters.hf.target.TargetModel`;
        ``target-rows-first``), greedy and sampled.
    compile_target : bool
        HedgeSpec's decoders and ``target-rows-first`` verify through the target compiled
        (:func:`~spec_adapters.hf.target.compiled_step`: ``torch.compile``, once per process
        before anything is timed; ~7 min for the default target with an empty inductor
        cache, seconds with a full one); the transformers
        baselines (``target``, ``hf-prompt-lookup``) run ``model.generate`` as a user would.
    fixed : bool
        Also every pool drafter and baseline fixed, each alone in its decoder (Table 1, and
        the generalist / specialist / router / oracle rows and the regret curves, which are
        read off those runs).
    sampled_fixed : bool
        Also the fixed drafters on the sampled stream (decoded: a replay needs greedy).
    replay_fixed : bool
        Greedy fixed-drafter rows replayed against the target's greedy output
        (:mod:`spec_adapters.app.bench.replay`: exact MAT, no time, milliseconds per query) instead
        of decoded.
    variant_queries_per_domain : int
        Router robustness: prompts per domain decoded in their "twice" variant (0 skips);
        ``router_accuracy_prompts`` per domain are only classified.
    pool_sizes : tuple of int
        Fig. 5b pool sizes (needs shard-trained extras in the pool for N > base pool).
    poolsize_queries_per_domain : int
    overhead : bool
        Table 2 micro-measurements.
    seeded : bool
        Sampled single-draft HedgeSpec methods draw from a generator seeded as the target's
        ``model.generate`` run of the same prompt (``generate(generator=...)``, the coupled
        rule), so their sampled tokens equal the target's, checked as greedy ones are;
        otherwise they run speculative sampling with the prompt's seed (the target's law,
        other tokens).
    seed : int
        Stream order and per-query seeds.
    """

    queries_per_domain: int = 2
    sampled_queries_per_domain: int = 1
    max_new_tokens: int = 64
    draft_length: int = 4
    temperature: float = 0.7
    top_p: float = 1.0
    policies: tuple[str, ...] = POLICIES
    sampled_policies: tuple[str, ...] = ("normalhedge", "exp3spec", "ucbspec")
    hf_lookup: bool = True
    hf_static_compiled: bool = False
    rows_first_target: bool = False
    compile_target: bool = False
    fixed: bool = True
    sampled_fixed: bool = True
    replay_fixed: bool = False
    variant_queries_per_domain: int = 1
    router_accuracy_prompts: int = 30
    pool_sizes: tuple[int, ...] = (2, 8, 32)
    poolsize_queries_per_domain: int = 1
    poolsize_policies: tuple[str, ...] = ("normalhedge", "exp3spec")
    overhead: bool = True
    seeded: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [p for p in (*self.policies, *self.sampled_policies, *self.poolsize_policies)
               if p not in POLICIES]
        if bad:
            raise ValueError(f"unknown policies {bad}; expected a subset of {POLICIES}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.queries_per_domain < 1 or self.max_new_tokens < 1 or self.draft_length < 1:
            raise ValueError("queries_per_domain, max_new_tokens and draft_length must be >= 1")
        self.policies = tuple(self.policies)
        self.sampled_policies = tuple(self.sampled_policies)
        self.poolsize_policies = tuple(self.poolsize_policies)
        self.pool_sizes = tuple(int(n) for n in self.pool_sizes)


PRESETS: dict[str, BenchConfig] = {
    # make demo: the comparison table on one prompt per domain, minutes on 2 cores
    "demo": BenchConfig(queries_per_domain=1, sampled_queries_per_domain=0, max_new_tokens=40,
                        policies=("normalhedge-cost", "normalhedge", "exp3spec"), hf_lookup=True,
                        rows_first_target=True, replay_fixed=True,
                        variant_queries_per_domain=0, router_accuracy_prompts=0,
                        pool_sizes=(), overhead=False),
    # every section, smallest sizes: ~1 hour on a busy 2-core machine
    "small": BenchConfig(queries_per_domain=1, max_new_tokens=40),
    # the speed comparison on 2 CPU cores in ~10 min with the default target and pool: target,
    # HF prompt lookup and every learner (not the fixed drafters: --fixed adds them), greedy
    "speed": BenchConfig(queries_per_domain=2, sampled_queries_per_domain=0, max_new_tokens=128,
                         policies=("normalhedge-cost", "normalhedge", "exp3spec", "ucbspec",
                                   "metasd-ucb"), fixed=False, variant_queries_per_domain=0,
                         router_accuracy_prompts=0, pool_sizes=(), overhead=False),
    # "The round without waste" (docs/benchmark-history.md "Speed"): 5 prompts per domain,
    # 256 tokens, greedy and 0.7; the target (transformers, and ours in the layout HedgeSpec uses,
    # compiled), HF prompt lookup, HedgeSpec cost-aware and MAT-only, the bandits (greedy),
    # every fixed drafter's MAT by replay
    "round": BenchConfig(queries_per_domain=5, sampled_queries_per_domain=5, max_new_tokens=256,
                         policies=("normalhedge-cost", "normalhedge", "exp3spec", "ucbspec",
                                   "metasd-ucb"),
                         sampled_policies=("normalhedge-cost", "normalhedge"),
                         rows_first_target=True, compile_target=True, replay_fixed=True,
                         sampled_fixed=False,
                         variant_queries_per_domain=0, router_accuracy_prompts=0,
                         pool_sizes=(), overhead=False),
    # the headline setting (docs/benchmark.md, "Current results"): 3 prompts per domain, 128
    # tokens, greedy and 0.7; transformers as users run it (generate, its prompt lookup, its
    # static cache compiled), our target step compiled, cost-aware HedgeSpec verifying through
    # it, without and with the consensus drafter
    "headline": BenchConfig(queries_per_domain=3, sampled_queries_per_domain=3,
                            max_new_tokens=128,
                            policies=("normalhedge-cost", "normalhedge-cost-consensus"),
                            sampled_policies=("normalhedge-cost", "normalhedge-cost-consensus"),
                            hf_static_compiled=True,
                            rows_first_target=True, compile_target=True, fixed=False,
                            sampled_fixed=False, variant_queries_per_domain=0,
                            router_accuracy_prompts=0, pool_sizes=(), overhead=False),
    # the specialists' benchmark (docs/benchmark-history.md "Specialists"): 5 prompts per domain,
    # 256 tokens; every drafter's MAT by replay; HedgeSpec reset per query and carried across the
    # stream, cost-aware, greedy; the target and HedgeSpec at 0.7 on 2 prompts per domain
    "specialists": BenchConfig(queries_per_domain=5, sampled_queries_per_domain=2,
                               max_new_tokens=256, policies=("normalhedge", "normalhedge-carry",
                                                             "normalhedge-cost"),
                               sampled_policies=("normalhedge",), sampled_fixed=False,
                               replay_fixed=True,
                               variant_queries_per_domain=0, router_accuracy_prompts=0,
                               pool_sizes=(), overhead=False),
    # its temperature-0.7 half at full size: 5 prompts per domain, the target, HF prompt lookup
    # and HedgeSpec reset per query / carried across the stream (the greedy part: the target)
    "specialists-sampled": BenchConfig(queries_per_domain=5, sampled_queries_per_domain=5,
                                       max_new_tokens=256, policies=(),
                                       sampled_policies=("normalhedge", "normalhedge-carry"),
                                       fixed=False, sampled_fixed=False,
                                       variant_queries_per_domain=0,
                                       router_accuracy_prompts=0, pool_sizes=(),
                                       overhead=False),
    # every method and section: 5 prompts per domain, greedy and 0.7 on the same prompts, 256
    # new tokens (or EOS)
    "full": BenchConfig(queries_per_domain=5, sampled_queries_per_domain=5,
                        max_new_tokens=256, sampled_policies=POLICIES,
                        variant_queries_per_domain=2, router_accuracy_prompts=100,
                        pool_sizes=(1, 2, 4, 8, 16, 32), poolsize_queries_per_domain=2,
                        poolsize_policies=("normalhedge", "exp3spec", "ucbspec")),
}
