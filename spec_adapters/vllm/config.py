"""Settings of the vLLM proposer: a JSON file named by ``$HEDGESPEC_VLLM_CONFIG``.

Keys (all optional)::

    {"pool": "default",                    # the served model's pool (spec_adapters.vllm
                                           # .target_pool) when built, a pool folder
                                           # (<cache>/pool/<target-id>), or null: prompt
                                           # lookup only
     "cache_dir": "<folder>",              # where "default" looks: $HEDGESPEC_CACHE, ./.cache
     "pool_settings": {"domains": ["sql"]},  # which of the folder's pools: the settings
                                           # it was built with (NGramPoolSettings fields;
                                           # default: train-drafters without options)
     "prompt_lookup": [1, 2, 3, 4],        # prompt-lookup drafters, one per n-gram size
     "suffix": true,                       # a suffix drafter (after the prompt lookups),
     "suffix_max_tokens": 200000,          # its memory of finished requests, shared by all
                                           # requests (the oldest evicted past the cap)
     "consensus": true,                    # one more drafter, last: the majority path of
                                           # the others' drafts (spec_adapters.drafters
                                           # .point.Consensus); needs two drafters or more
     "policy": "normalhedge",              # hedge | adahedge | exp3spec | ucbspec | fixed:<i>
     "k": 4,                               # K, at most vLLM's num_speculative_tokens
     "cost_aware": true,                   # experts (drafter, stop rule), below; else k = K
     "stop_rules": [0, 0.25, 0.5, 0.75],   # the rules' confidence thresholds, each with
                                           # caps 1 .. K, plus k = 0 (no draft)
                                           # (spec_adapters.selection.stop_rules); [0]:
                                           # fixed lengths only, the (drafter, k) experts
     "feedback_budget": 0.02,              # evaluating rounds' share of a step (every
                                           # drafter drafts, every expert is scored): above
                                           # it, a random share of rounds is evaluated
     "time_budget": 0.03,                  # the proposer's whole share of a step: the
                                           # evaluations get what its other work leaves,
                                           # at most feedback_budget, at least a quarter
     "prior_rounds": 8,                    # a new request starts from the stream's
                                           # evidence weighing as many rounds: its
                                           # NormalHedge from the stream's regrets, its
                                           # acceptance estimates from the stream's
                                           # (0: from uniform, the paper)
     "probe": 0.1,                         # share of the rounds that abstain (no draft
                                           # pays) still scored with every drafter
     "explore_steps": 0.05,                # while fewer recent decode steps than this
                                           # share drafted nothing, this share of them is
                                           # made to draft nothing, so that the step-time fit
                                           # sees steps with and without drafts at the same
                                           # load (it tells the price of speculating at all
                                           # from a plain step's)
     "step_costs": null,                   # {"step_s", "row_s", "draft_s"[, "spec_s"]}:
                                           # a fixed step-time model instead of the
                                           # learned one
     "drafting_price": true,               # the price of drafting at all in the gains: the
                                           # step's c [D > 0] and each drafter's own
                                           # proposal time (false: an ablation)
     "stats": "<file.json>",               # counters rewritten as it runs (telemetry)
     "idle_steps": 64,                     # a request absent this many steps is forgotten
     "seed": 0,
     "trace": "<file.jsonl>"}              # one line per request per step (tests, benchmark)

Every problem (unreadable file, malformed JSON, unknown key or policy, missing pool, a bad
value) is a ``ValueError`` naming the file and the problem, raised when the engine starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from spec_adapters.selection.stop_rules import THRESHOLDS, StopRules
from spec_adapters.store.pool_settings import NGramPoolSettings

__all__ = ["ENV_VAR", "ProposerConfig", "config_from_mapping", "config_to_mapping", "load_config",
           "read_config_file"]

ENV_VAR = "HEDGESPEC_VLLM_CONFIG"
POLICIES = ("normalhedge", "hedge", "adahedge", "exp3spec", "ucbspec")
STEP_COSTS = ("step_s", "row_s", "draft_s", "spec_s")  # "step_costs", in the model's order;
# "spec_s" (the step's price of speculating at all) optional


@dataclass(frozen=True)
class ProposerConfig:
    """Validated proposer settings (see the module docstring for the meaning of each)."""

    pool: str | None = "default"
    cache_dir: str | None = None
    pool_settings: NGramPoolSettings = field(default_factory=NGramPoolSettings)
    prompt_lookup: tuple[int, ...] = (1, 2, 3, 4)
    suffix: bool = True
    suffix_max_tokens: int = 200_000
    consensus: bool = True
    policy: str = "normalhedge"
    k: int | None = None
    cost_aware: bool = True
    stop_rules: tuple[float, ...] = THRESHOLDS
    feedback_budget: float = 0.02
    time_budget: float = 0.03
    prior_rounds: int = 8
    probe: float = 0.1
    explore_steps: float = 0.05
    step_costs: tuple[float, ...] | None = None
    drafting_price: bool = True
    stats: str | None = None
    idle_steps: int = 64
    seed: int = 0
    trace: str | None = None
    source: str = field(default="defaults", compare=False)

    def __post_init__(self) -> None:
        def bad(msg: str):
            raise ValueError(f"{ENV_VAR} ({self.source}): {msg}")

        if self.policy not in POLICIES and not self.policy.startswith("fixed:"):
            bad(f"unknown policy {self.policy!r}; expected one of {POLICIES} or 'fixed:<i>'")
        if self.policy.startswith("fixed:") and not self.policy[6:].isdigit():
            bad(f"bad fixed policy {self.policy!r}; expected 'fixed:<drafter index>'")
        if not isinstance(self.prompt_lookup, tuple) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1
                for n in self.prompt_lookup):
            bad(f"prompt_lookup must be a list of integers >= 1, got {self.prompt_lookup!r}")
        for name in ("idle_steps", "seed", "suffix_max_tokens", "prior_rounds") + (
                ("k",) if self.k is not None else ()):
            v, least = getattr(self, name), 0 if name in ("seed", "prior_rounds") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                bad(f"{name} must be an integer >= {least}, got {v!r}")
        try:
            StopRules(1, self.stop_rules)
        except (TypeError, ValueError) as err:
            bad(str(err))
        for name in ("feedback_budget", "time_budget"):
            fb = getattr(self, name)
            if isinstance(fb, bool) or not isinstance(fb, int | float) or not 0 < fb <= 1:
                bad(f"{name} must be a number in (0, 1], got {fb!r}")
        pr = self.probe
        if isinstance(pr, bool) or not isinstance(pr, int | float) or not 0 <= pr <= 1:
            bad(f"probe must be a number in [0, 1], got {pr!r}")
        ex = self.explore_steps
        if isinstance(ex, bool) or not isinstance(ex, int | float) or not 0 <= ex < 1:
            bad(f"explore_steps must be a number in [0, 1), got {ex!r}")
        sc = self.step_costs
        if sc is not None and not (isinstance(sc, tuple) and len(sc) in (3, 4) and all(
                isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x < float("inf")
                for x in sc)):
            bad(f"step_costs must be an object of finite seconds >= 0 {list(STEP_COSTS)} "
                f"(spec_s optional), got {sc!r}")
        for name in ("cost_aware", "suffix", "consensus", "drafting_price"):
            if not isinstance(getattr(self, name), bool):
                bad(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("pool", "cache_dir", "trace", "stats"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                bad(f"{name} must be a {'folder' if name in ('pool', 'cache_dir') else 'file'}"
                    f" name or null, got {v!r}")
        if self.pool not in (None, "default") and not Path(self.pool).is_dir():
            bad(f"pool folder {self.pool} does not exist")
        if not isinstance(self.pool_settings, NGramPoolSettings):
            bad(f"pool_settings must be NGramPoolSettings, got {self.pool_settings!r}")
        if self.pool is None and not self.prompt_lookup and not self.suffix:
            bad("no drafters: give a pool folder, prompt_lookup sizes or suffix")


def load_config(environ=None) -> ProposerConfig:
    """Read ``$HEDGESPEC_VLLM_CONFIG`` (defaults when unset).

    Raises
    ------
    ValueError
        The file cannot be read, is not a JSON object, has unknown keys or bad values.
    """
    env = os.environ if environ is None else environ
    path = env.get(ENV_VAR)
    if not path:
        return ProposerConfig()
    return config_from_mapping(read_config_file(path), source=path)


def read_config_file(path: str) -> dict:
    """The JSON object of a settings file, its keys checked (values: :func:`config_from_mapping`).

    Raises
    ------
    ValueError
        The file cannot be read, is not a JSON object, or has unknown keys.
    """
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as err:
        raise ValueError(f"{ENV_VAR}: cannot read {path}: {err}") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{ENV_VAR} ({path}): malformed JSON: {err}") from err
    if not isinstance(raw, dict):
        raise ValueError(f"{ENV_VAR} ({path}): expected a JSON object, got {type(raw).__name__}")
    known = {f.name for f in fields(ProposerConfig)} - {"source"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{ENV_VAR} ({path}): unknown keys {unknown}; expected {sorted(known)}")
    return raw


def config_from_mapping(raw: dict, source: str) -> ProposerConfig:
    """A :class:`ProposerConfig` from a JSON object's keys (lists where the config holds
    tuples); ``ValueError`` naming ``source`` and the problem."""
    raw = dict(raw)
    for key in ("prompt_lookup", "stop_rules"):
        if isinstance(raw.get(key), list):
            raw[key] = tuple(raw[key])
    sc = raw.get("step_costs")
    if isinstance(sc, dict):
        if sorted(sc) not in (sorted(STEP_COSTS), sorted(STEP_COSTS[:3])):
            raise ValueError(f"{ENV_VAR} ({source}): step_costs must have the keys "
                             f"{list(STEP_COSTS)} (spec_s optional), got {sorted(sc)}")
        raw["step_costs"] = tuple(sc[k] for k in STEP_COSTS if k in sc)
    if "pool_settings" in raw:
        try:
            raw["pool_settings"] = NGramPoolSettings.from_mapping(raw["pool_settings"])
        except ValueError as err:
            raise ValueError(f"{ENV_VAR} ({source}): pool_settings: {err}") from None
    return ProposerConfig(**raw, source=source)


def config_to_mapping(config: ProposerConfig) -> dict:
    """The JSON object that :func:`config_from_mapping` reads back to ``config``."""
    out = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "source"}
    out["pool_settings"] = {**asdict(config.pool_settings),
                            "domains": list(config.pool_settings.domains)}
    out["prompt_lookup"] = list(config.prompt_lookup)
    out["stop_rules"] = list(config.stop_rules)
    if config.step_costs is not None:
        out["step_costs"] = dict(zip(STEP_COSTS, config.step_costs, strict=False))
    return out
