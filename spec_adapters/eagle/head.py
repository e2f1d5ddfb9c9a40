"""EAGLE-3-style draft head: target features + next-token embedding -> one decoder layer.

Indexing (EAGLE's). ``f_t`` is the target's feature at position ``t`` (it has seen
``x_0 .. x_t`` and predicts ``x_{t+1}``). The head's input at its position ``t`` is the pair
``(f_t, e(x_{t+1}))``, the feature and the embedding of the token the target produced from it;
its output predicts ``x_{t+2}``. When drafting deeper than one token the target feature is not
known yet, so the head feeds its own output hidden state ``h_t`` in place of the fused feature
(autoregressive over its own hidden states, EAGLE-1/3).

Architecture (all sizes from :class:`EagleHeadConfig`), EAGLE-3's ``LlamaForCausalLMEagle3``
(SafeAILab/EAGLE ``cnets.py``, SpecForge ``llama3_eagle.py``) equation for equation::

    fused  = fc(concat(f^low, f^mid, f^high))        # EAGLE-3 fusion, F*H -> H
             (EAGLE-3.1 ``fc_norm``: each f^i RMS-normed first)
    h      = fused  (or the head's fed-back hidden when drafting deeper)
    x      = concat(norm_e(e(x_{t+1})), norm_h(h))   # 2H  (input_layernorm, hidden_norm)
    z      = h + o_proj(attn(q(x), k(x), v(x)))      # rotary, causal/tree mask, own KV cache
    z      = z + mlp(norm_post(z))                    # SwiGLU (post_attention_layernorm)
    logits = lm_head(norm(z))                         # final norm; draft vocabulary Vd << V
    fed    = z  (EAGLE-3: pre-norm)  or  norm(z)  (EAGLE-3.1 ``norm_output``)

RMS norms are computed in float32 and cast back (transformers' ``LlamaRMSNorm``), attention
scores are scaled by ``1/sqrt(head_dim)`` and soft-maxed in float32, keys/values have
``num_key_value_heads`` heads (GQA), rotary frequencies use ``rope_theta`` (EAGLE's fallback
10000 when a checkpoint names none) and optionally Llama-3 or linear ``rope_scaling``.
:mod:`.eagle3` reads and writes the published checkpoint format.

The output layer covers only the ``draft_vocab_size`` most frequent target tokens (EAGLE-3's
reduced vocabulary), ``d2t[j]`` being the target id of draft id ``j``. Distributions over the
full target vocabulary (:meth:`EagleHead.full_probs`) put probability 0 on every token outside
the draft vocabulary: the head can never propose those tokens (the target still can produce
them, so losslessness is unaffected; only acceptance drops).

The embedding table is the target's own (frozen, shared by reference, never saved with the
head): :meth:`EagleHead.bind` attaches it and checks that the head was trained for that target.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as fn
from torch import nn

from .target_info import embedding_fingerprint
from .target_info import short_name as _short_name
from .target_info import target_name as _target_name

__all__ = [
    "FORMAT_VERSION",
    "EagleHead",
    "EagleHeadConfig",
    "build_draft_vocab",
    "default_feature_layers",
    "embedding_fingerprint",
    "rope_inv_freq",
    "target_hidden_features",
    "vocab_coverage",
]

CONFIG_NAME = "eagle_config.json"
WEIGHTS_NAME = "model.safetensors"
# 2: EAGLE-3's equations (final norm before lm_head, float32 norms / softmax, head_dim,
#    rope_scaling, fc_norm / norm_output). Heads saved before it (no format_version: no final
#    norm) compute something else and must be retrained.
FORMAT_VERSION = 2


def default_feature_layers(num_hidden_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low / middle / high layers, as indices into ``output_hidden_states``.

    Index 0 is the embedding output, index ``L`` the (normed) last layer. EAGLE-3 takes layer
    2, ``L // 2`` and ``L - 3``; for a 30-layer target that is ``(2, 15, 27)``. Tiny targets
    get the distinct values clamped to ``[1, L]``.
    """
    L = int(num_hidden_layers)
    picks = (min(2, L), max(1, L // 2), max(1, L - 3))
    return tuple(sorted(set(picks)))


def target_hidden_features(hidden_states, feature_layers) -> torch.Tensor:
    """Concatenate the selected layers of ``output_hidden_states`` -> ``(..., F*H)``."""
    return torch.cat([hidden_states[i] for i in feature_layers], dim=-1)


def build_draft_vocab(token_ids, target_vocab_size: int, size: int,
                      always: tuple[int, ...] = ()) -> torch.LongTensor:
    """The ``size`` most frequent target tokens of a corpus (EAGLE-3's reduced vocabulary).

    Ties and missing slots (a corpus with fewer distinct tokens) are filled by increasing id.
    Tokens in ``always`` (e.g. EOS) are included first. Returns ``d2t`` sorted by id.
    """
    if not 1 <= size <= target_vocab_size:
        raise ValueError(f"draft vocab size must be in [1, {target_vocab_size}], got {size}")
    ids = torch.as_tensor(token_ids).reshape(-1).long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= target_vocab_size):
        raise ValueError("corpus token ids outside the target vocabulary")
    counts = torch.bincount(ids, minlength=target_vocab_size).double()
    # order: forced tokens, then by count desc, ties by id (stable sort)
    counts[list(always)] = float("inf")
    order = torch.sort(-counts, stable=True).indices
    return torch.sort(order[:size]).values


def vocab_coverage(token_ids, target_vocab_size: int, sizes) -> dict[int, float]:
    """The share of a corpus's tokens that a draft vocabulary of each size in ``sizes`` covers
    (its most frequent tokens): the mass a head of that size can ever propose, so the bound on
    its acceptance. Pick the draft vocabulary size from this curve."""
    ids = torch.as_tensor(token_ids).reshape(-1).long()
    counts = torch.sort(torch.bincount(ids, minlength=target_vocab_size), descending=True).values
    mass = torch.cumsum(counts.double(), 0) / max(ids.numel(), 1)
    return {int(s): float(mass[min(int(s), target_vocab_size) - 1]) for s in sizes}


@dataclass
class EagleHeadConfig:
    """Architecture of a head and the target it was trained for."""

    target_vocab_size: int
    hidden_size: int
    target_num_layers: int
    feature_layers: tuple[int, ...]
    draft_vocab_size: int
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    head_dim: int | None = None
    rope_scaling: dict | None = None
    fc_norm: bool = False
    norm_output: bool = False
    target_name: str = ""
    target_fingerprint: str = ""
    extra: dict = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(_old_format_message(self.format_version))
        self.feature_layers = tuple(int(i) for i in self.feature_layers)
        if self.intermediate_size is None:
            self.intermediate_size = 2 * self.hidden_size
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError("hidden_size must be divisible by num_attention_heads "
                                 "(or give head_dim)")
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim must be even and >= 2, got {self.head_dim}")
        self.rope_scaling = _check_rope_scaling(self.rope_scaling)
        if not self.feature_layers:
            raise ValueError("feature_layers must name at least one target layer")
        bad = [i for i in self.feature_layers if not 0 <= i <= self.target_num_layers]
        if bad:
            raise ValueError(f"feature_layers {bad} outside [0, {self.target_num_layers}]")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be divisible by num_key_value_heads")
        if not 1 <= self.draft_vocab_size <= self.target_vocab_size:
            raise ValueError("draft_vocab_size must be in [1, target_vocab_size]")

    @classmethod
    def for_target(cls, target, draft_vocab_size: int, feature_layers=None, **kw):
        """Config matching a transformers causal LM ``target``."""
        c = target.config
        L = int(c.num_hidden_layers)
        heads = kw.pop("num_attention_heads", None) or c.num_attention_heads
        kv = kw.pop("num_key_value_heads", None) or getattr(c, "num_key_value_heads", heads)
        rope, scaling = _target_rope(c)
        kw.setdefault("rope_scaling", scaling)
        return cls(
            target_vocab_size=int(target.get_input_embeddings().weight.shape[0]),
            hidden_size=int(c.hidden_size),
            target_num_layers=L,
            feature_layers=tuple(feature_layers or default_feature_layers(L)),
            draft_vocab_size=int(draft_vocab_size),
            num_attention_heads=int(heads),
            num_key_value_heads=int(kv),
            intermediate_size=kw.pop("intermediate_size", None) or int(c.intermediate_size),
            rms_norm_eps=float(getattr(c, "rms_norm_eps", 1e-5)),
            rope_theta=float(rope),
            target_name=_target_name(target),
            target_fingerprint=embedding_fingerprint(target),
            **kw,
        )

    def to_json(self) -> str:
        d = asdict(self)
        d["feature_layers"] = list(self.feature_layers)
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EagleHeadConfig:
        """Parse :meth:`to_json`'s output; ``ValueError`` for a head saved in an older format
        (its weights compute another function: retrain it)."""
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("an EagleHead config must be a JSON object")
        if d.get("format_version") != FORMAT_VERSION:
            raise ValueError(_old_format_message(d.get("format_version")))
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown EagleHead config keys {unknown}")
        return cls(**d)


def _old_format_message(version) -> str:
    return (f"EagleHead format {version or 1} is not the current format {FORMAT_VERSION}: "
            "heads saved before format 2 have no final norm before lm_head (EAGLE-3's "
            "`norm`), so their weights compute a different function; retrain the head "
            "(delete it and re-run `hedgespec train-head` / `hedgespec train-drafters`)")


def _target_rope(c) -> tuple[float, dict | None]:
    """``(rope_theta, rope_scaling)`` of a transformers config (v4 ``rope_theta`` /
    ``rope_scaling`` or v5 ``rope_parameters``); scaling kinds the head lacks are dropped (the
    head's rotary embedding is its own, it need not equal the target's)."""
    params = dict(getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {})
    theta = getattr(c, "rope_theta", None) or params.get("rope_theta") or 10000.0
    kind = params.get("rope_type", params.get("type"))
    scaling = {k: v for k, v in params.items() if k != "rope_theta"} \
        if kind in _ROPE_SCALING_KEYS else None
    return float(theta), scaling


_ROPE_SCALING_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
}


def _check_rope_scaling(scaling: dict | None) -> dict | None:
    """Normalise ``rope_scaling``: None / ``default`` -> None; ``linear`` and ``llama3`` kept
    with their numeric parameters; anything else is a ``ValueError``."""
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise ValueError(f"rope_scaling must be a dict or None, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return None
    if kind not in _ROPE_SCALING_KEYS:
        raise ValueError(f"rope_scaling type {kind!r} is not supported (supported: default, "
                         f"{', '.join(sorted(_ROPE_SCALING_KEYS))})")
    missing = [k for k in _ROPE_SCALING_KEYS[kind] if scaling.get(k) is None]
    if missing:
        raise ValueError(f"{kind} rope_scaling lacks {missing}")
    if kind == "llama3" and not scaling["high_freq_factor"] > scaling["low_freq_factor"]:
        raise ValueError("llama3 rope_scaling needs high_freq_factor > low_freq_factor")
    return {"rope_type": kind, **{k: float(scaling[k]) for k in _ROPE_SCALING_KEYS[kind]}}


def rope_inv_freq(config: EagleHeadConfig) -> torch.Tensor:
    """Rotary inverse frequencies ``(head_dim/2,)`` float32: ``theta^(-2i/d)``, then Llama-3's
    wavelength-dependent scaling (transformers' ``_compute_llama3_parameters``) or linear
    scaling (``1/factor``)."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = config.rope_scaling
    if s is not None and s["rope_type"] == "linear":
        inv = inv / s["factor"]
    elif s is not None:  # llama3: long wavelengths slowed by factor, short kept, smooth between
        factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > old / lo, inv / factor, torch.where(wavelen < old / hi,
                                                                         inv, mid))
    return inv.float()


class _RMSNorm(nn.Module):
    """``weight * x / rms(x)``, the statistics in float32 and cast back (``LlamaRMSNorm``)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class EagleHead(nn.Module):
    """One EAGLE-3-style draft head (see the module docstring for the architecture).

    Parameters
    ----------
    config : EagleHeadConfig
    d2t : torch.LongTensor, optional
        ``(draft_vocab_size,)`` target id of each draft id; default ``arange``.

    Notes
    -----
    :meth:`forward` is a pure function of its inputs (no hidden state in the module) and treats
    its batch dimension alike row by row, so the pool evaluates many heads at once by running
    it on a copy whose layers hold every head's weights, one head per batch row
    (:mod:`.pool`).
    Every tensor it makes follows the inputs' device and the weights' dtype; the rotary
    frequencies stay float32 whatever ``.to(dtype)`` is applied (see :meth:`_apply`).
    """

    config_class = EagleHeadConfig  # what eagle3.load_eagle3 builds the config as
    # EAGLE-3's ``midlayer`` (the one decoder layer); the rest (fc, fc_norm, norm, lm_head, d2t)
    # is what a specialist trained with ``TrainConfig.midlayer_only`` shares with its base
    MIDLAYER = ("norm_e", "norm_h", "q_proj", "k_proj", "v_proj", "o_proj", "norm_post",
                "gate_proj", "up_proj", "down_proj")

    def __init__(self, config: EagleHeadConfig, d2t: torch.Tensor | None = None):
        super().__init__()
        self.config = c = config
        H, nh, kv, d = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        F_ = len(c.feature_layers)
        if c.fc_norm:  # EAGLE-3.1: one norm per fused target layer, before fc
            self.fc_norm = nn.ModuleList(_RMSNorm(H, c.rms_norm_eps) for _ in range(F_))
        self.fc = nn.Linear(F_ * H, H, bias=False)
        self.norm_e = _RMSNorm(H, c.rms_norm_eps)
        self.norm_h = _RMSNorm(H, c.rms_norm_eps)
        self.q_proj = nn.Linear(2 * H, nh * d, bias=False)
        self.k_proj = nn.Linear(2 * H, kv * d, bias=False)
        self.v_proj = nn.Linear(2 * H, kv * d, bias=False)
        self.o_proj = nn.Linear(nh * d, H, bias=False)
        self.norm_post = _RMSNorm(H, c.rms_norm_eps)
        self.gate_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, H, bias=False)
        self.norm = _RMSNorm(H, c.rms_norm_eps)
        self.lm_head = nn.Linear(H, c.draft_vocab_size, bias=False)
        if d2t is None:
            d2t = torch.arange(c.draft_vocab_size)
        d2t = torch.as_tensor(d2t).long()
        if d2t.shape != (c.draft_vocab_size,):
            raise ValueError(f"d2t must have shape ({c.draft_vocab_size},)")
        if int(d2t.min()) < 0 or int(d2t.max()) >= c.target_vocab_size or \
                d2t.unique().numel() != d2t.numel():
            raise ValueError("d2t must hold distinct target ids in [0, target_vocab_size)")
        self.register_buffer("d2t", d2t)
        self.register_buffer("inv_freq", rope_inv_freq(c), persistent=False)
        self.embed_weight: torch.Tensor | None = None  # the target's table, set by bind()

    def _apply(self, fn, recurse=True):
        """``nn.Module``'s device / dtype hook: after ``.to(...)`` / ``.half()`` the rotary
        frequencies are rebuilt in float32 on the new device (a bfloat16 ``inv_freq`` would
        put rotary angles off by radians at positions in the thousands)."""
        super()._apply(fn, recurse)
        self.inv_freq = rope_inv_freq(self.config).to(self.d2t.device)
        return self

    @classmethod
    def in_midlayer(cls, name: str) -> bool:
        """Whether state-dict key ``name`` belongs to the decoder layer (:attr:`MIDLAYER`)."""
        return name.split(".")[0] in cls.MIDLAYER

    # ------------------------------------------------------------------ target binding
    def check_target(self, target) -> None:
        """Raise ``ValueError`` unless ``target`` is the model this head was trained for."""
        c = self.config
        emb = target.get_input_embeddings().weight
        problems = []
        if int(emb.shape[0]) != c.target_vocab_size:
            problems.append(f"vocab size {emb.shape[0]} != {c.target_vocab_size}")
        if int(target.config.hidden_size) != c.hidden_size:
            problems.append(f"hidden size {target.config.hidden_size} != {c.hidden_size}")
        if int(target.config.num_hidden_layers) != c.target_num_layers:
            problems.append(f"layers {target.config.num_hidden_layers} != "
                            f"{c.target_num_layers}")
        name = _target_name(target)
        if c.target_name and name and name != _short_name(c.target_name):
            problems.append(f"name {name!r} != {c.target_name!r}")
        if not problems and c.target_fingerprint and \
                embedding_fingerprint(target) != c.target_fingerprint:
            problems.append("embedding fingerprint differs (same shape, different weights)")
        if problems:
            raise ValueError(
                f"this EAGLE head was trained for target {c.target_name or '<unnamed>'!r} "
                f"(vocab {c.target_vocab_size}, hidden {c.hidden_size}, layers "
                f"{c.target_num_layers}, features {list(c.feature_layers)}), not this model: "
                + "; ".join(problems))

    def bind(self, target) -> EagleHead:
        """Check ``target`` and share its (frozen) input embedding table; returns ``self``."""
        self.check_target(target)
        self.embed_weight = target.get_input_embeddings().weight.detach()
        return self

    def embed(self, tokens: torch.LongTensor) -> torch.Tensor:
        if self.embed_weight is None:
            raise RuntimeError("EagleHead has no embeddings: call head.bind(target) first")
        tokens = tokens.to(self.embed_weight.device)
        return fn.embedding(tokens, self.embed_weight).to(self.fc.weight.dtype)

    @torch.no_grad()
    def init_from_target(self, target) -> EagleHead:
        """Warm start: ``lm_head`` rows copied from the target's output layer at ``d2t``.

        The head's output hidden is regressed onto the target's last (normed) hidden state, so
        the target's output layer is the natural initial readout.
        """
        self.bind(target)
        out = target.get_output_embeddings().weight.detach()
        self.lm_head.weight.copy_(out[self.d2t].to(self.lm_head.weight.dtype))
        return self

    # ------------------------------------------------------------------ the pure forward
    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Target features ``(..., F*H)`` -> fused feature ``(..., H)``: ``fc``, after the
        per-layer ``fc_norm`` when the config has it (EAGLE-3.1). The features (the
        target's, float32 or float16 from a cache) are cast to the head's dtype first."""
        features = features.to(self.fc.weight.dtype)
        if self.config.fc_norm:
            chunks = features.chunk(len(self.fc_norm), dim=-1)
            features = torch.cat([n(x) for n, x in zip(self.fc_norm, chunks, strict=True)], -1)
        return self.fc(features)

    def forward(self, h: torch.Tensor, emb: torch.Tensor, positions: torch.Tensor,
                past_k: torch.Tensor | None = None, past_v: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, fuse: bool = False):
        """One decoder-layer pass over ``T`` new positions.

        Parameters
        ----------
        h : ``(B, T, H)`` hidden input, or ``(B, T, F*H)`` target features when ``fuse``.
        emb : ``(B, T, H)`` embeddings of the next tokens.
        positions : ``(T,)`` rotary positions.
        past_k, past_v : ``(B, kv, P, d)`` the head's cache, or None.
        mask : ``(T, P+T)`` bool, True = may attend; None = causal over the new positions.

        Returns
        -------
        logits : ``(B, T, Vd)`` draft-vocabulary logits, ``lm_head(norm(z))``.
        fed : ``(B, T, H)`` the hidden fed back as the input ``h`` of the next draft step:
            the layer output ``z`` (EAGLE-3), ``norm(z)`` with ``norm_output`` (EAGLE-3.1).
        k, v : ``(B, kv, T, d)`` keys/values of the new positions (not concatenated).
        """
        c = self.config
        nh, kvh, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        if fuse:
            h = self.fuse(h)
        B, T, _ = h.shape
        x = torch.cat([self.norm_e(emb), self.norm_h(h)], dim=-1)
        q = self.q_proj(x).view(B, T, nh, d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, kvh, d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, kvh, d).transpose(1, 2)
        positions = positions.to(device=h.device, dtype=self.inv_freq.dtype)
        freqs = positions[:, None] * self.inv_freq[None, :]
        ang = torch.cat([freqs, freqs], dim=-1)
        cos, sin = ang.cos().to(q.dtype), ang.sin().to(q.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k_all = k if past_k is None else torch.cat([past_k, k], dim=2)
        v_all = v if past_v is None else torch.cat([past_v, v], dim=2)
        P = k_all.shape[2] - T
        if mask is None:
            mask = torch.ones(T, P + T, dtype=torch.bool, device=h.device).tril(P)
        else:
            mask = mask.to(h.device)
        rep = nh // kvh
        ka = k_all.repeat_interleave(rep, dim=1)
        va = v_all.repeat_interleave(rep, dim=1)
        scores = (q / math.sqrt(d)) @ ka.transpose(-1, -2)  # scaled on q: T*d, not T*(P+T)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        att = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ va
        z = h + self.o_proj(att.transpose(1, 2).reshape(B, T, nh * d))
        y = self.norm_post(z)
        z = z + self.down_proj(fn.silu(self.gate_proj(y)) * self.up_proj(y))
        zn = self.norm(z)
        return self.lm_head(zn), (zn if c.norm_output else z), k, v

    def full_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits ``(..., Vd)`` -> probabilities over the full target vocab ``(..., V)``
        (0 outside the draft vocabulary)."""
        return scatter_full(torch.softmax(logits.float(), -1), self.d2t,
                            self.config.target_vocab_size)

    # ------------------------------------------------------------------ EAGLE-3 format
    @classmethod
    def from_eagle3(cls, path: str | os.PathLike, target) -> EagleHead:
        """Load a published-format EAGLE-3 checkpoint (SafeAILab/EAGLE, SpecForge, vLLM) for
        ``target``; see :func:`spec_adapters.eagle.eagle3.load_eagle3`."""
        from .eagle3 import load_eagle3

        return load_eagle3(path, target, cls)

    def save_eagle3(self, path: str | os.PathLike) -> None:
        """Write this head as a published-format EAGLE-3 checkpoint; see
        :func:`spec_adapters.eagle.eagle3.save_eagle3`."""
        from .eagle3 import save_eagle3

        save_eagle3(self, path)

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write ``eagle_config.json`` and ``model.safetensors`` (embeddings excluded).

        Raises ``ValueError``, writing nothing, when a weight is NaN or infinite (a diverged
        training run must not be cached as a head).
        """
        from safetensors.torch import save_file

        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        bad = _non_finite(state)
        if bad:
            raise ValueError(f"EagleHead has non-finite weights ({bad}); not saved")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_NAME).write_text(self.config.to_json())
        save_file(state, str(path / WEIGHTS_NAME), metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, target=None) -> EagleHead:
        """Load a head; with ``target`` also check and :meth:`bind` it.

        Raises
        ------
        ValueError
            ``path`` is not a saved head (a missing or malformed file, non-finite weights), or
            the head was trained for another target.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / CONFIG_NAME).is_file():
            raise ValueError(f"{path} has no {CONFIG_NAME}: not a saved EagleHead")
        try:
            cfg = EagleHeadConfig.from_json((path / CONFIG_NAME).read_text())
            state = load_file(str(path / WEIGHTS_NAME))
            head = cls(cfg, d2t=state["d2t"])
            head.load_state_dict(state)
        except (OSError, ValueError, TypeError, KeyError, RuntimeError, SafetensorError) as err:
            raise ValueError(f"{path} is not a saved EagleHead: {err}") from err
        bad = _non_finite(state)
        if bad:
            raise ValueError(f"{path / WEIGHTS_NAME} holds non-finite weights ({bad})")
        head.eval()
        if target is not None:
            head.bind(target)
        return head


def _non_finite(state: dict) -> str | None:
    """The name of the first floating tensor of ``state`` with a NaN or infinity."""
    return next((k for k, v in state.items()
                 if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)


def scatter_full(probs_draft: torch.Tensor, d2t: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Place draft-vocabulary probabilities ``(..., Vd)`` at their target ids ``(..., V)``.

    ``d2t`` is ``(Vd,)`` or, for stacked heads, ``(N, Vd)`` matching ``probs_draft``'s
    first dim.
    """
    out = probs_draft.new_zeros(*probs_draft.shape[:-1], vocab_size)
    idx = d2t
    while idx.dim() < probs_draft.dim():
        idx = idx.unsqueeze(-2)
    return out.scatter_(-1, idx.expand_as(probs_draft), probs_draft)
