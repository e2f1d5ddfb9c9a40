"""The target model of speculative decoding: a transformers causal LM plus its KV cache.

Cache invariant (shared with :mod:`spec_adapters.decoding.chain` and the EAGLE decoder): for
a verified sequence ``x_0 .. x_{L-1}`` the cache holds the keys/values of ``x_0 .. x_{L-2}``,
i.e. every verified token except the last one. A verification pass therefore feeds
``[x_{L-1}] + drafts`` (``K + 1`` tokens) and returns ``K + 1`` next-token logits: row ``j``
is the target's logits for position ``L + j`` given ``x_{<L} + drafts[:j]``. After acceptance
the cache is cropped back to ``L + n_accepted`` entries (the new sequence minus its last
token); the prefix is never recomputed.
"""

from __future__ import annotations

import copy
import inspect
import logging
import time
import weakref
from collections.abc import Sequence

import torch

from spec_adapters.hf.rows_first import rows_first_twin

__all__ = ["TargetModel", "cache_kwarg", "compiled_step", "context_length", "crop_cache",
           "fastest_net", "forward_cached", "forward_features", "new_cache",
           "output_vocab_size"]

log = logging.getLogger(__name__)


def new_cache(model):
    """A fresh, empty ``DynamicCache`` for ``model``, recording its sliding-window layers'
    past (Gemma-3, Mistral: a layer that kept only its last ``window`` positions could not
    drop a rejected draft's rows once the window is full; :func:`crop_cache` trims it back)."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        return DynamicCache()
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


def cache_kwarg(model) -> str:
    """transformers >= 5.x calls the cache argument ``cache``; earlier versions
    ``past_key_values``."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _run_cached(model, ids: torch.LongTensor, cache, kwarg: str | None, **extra):
    """``model`` on the 1-D ``ids`` appended to ``cache``, in ``torch.inference_mode``: every
    cached forward runs in this one grad mode, because a compiled step's graphs are guarded on
    it and on whether the cache holds inference tensors (a step under another mode than the
    prefill or warm-up that filled its cache recompiled on every call, until torch.compile's
    recompile limit)."""
    with torch.inference_mode():
        return model(input_ids=ids.view(1, -1), use_cache=True,
                     **{kwarg or cache_kwarg(model): cache}, **extra)


def forward_cached(model, ids: torch.LongTensor, cache, kwarg: str | None = None) -> torch.Tensor:
    """Run ``model`` on the 1-D ``ids`` appended to ``cache`` (which grows); return logits (m, V).

    Positions are taken from the cache length, so the caller never passes position ids.
    """
    return _run_cached(model, ids, cache, kwarg).logits[0].float()


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def crop_cache(cache, length: int) -> None:
    """Drop cache entries past ``length``; a sliding-window layer recording its past
    (:func:`new_cache`) is trimmed back to its window even when nothing is dropped.

    ``DynamicCache.crop`` takes a negative number of tokens to remove in transformers 5 (and
    also accepted that form before), so that is the form used.
    """
    extra = cache_length(cache) - length
    if extra > 0:
        cache.crop(-extra)
    elif extra == 0 and any(getattr(layer, "record_past", False)
                            for layer in getattr(cache, "layers", ())):
        cache.crop(0)


def output_vocab_size(model) -> int:
    """Number of logits the model produces (the LM head's rows; may exceed the tokenizer's)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def context_length(model) -> int | None:
    """Maximum number of positions the model supports, or ``None`` when unbounded/unknown."""
    cfg = model.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n = getattr(cfg, "max_position_embeddings", None)
    return int(n) if n else None


def fastest_net(nets: Sequence[torch.nn.Module], rows: Sequence[int] = (1, 5),
                context: int = 32, repeats: int = 3) -> tuple[int, list[float]]:
    """Which of ``nets`` (the same model in different layouts) runs a decoding step fastest
    here, measured.

    Each net caches ``context`` tokens, then for every ``m`` in ``rows`` runs a forward of
    ``m`` new tokens ``repeats + 1`` times (the first a warm-up; the cache cropped back after
    each); its cost is ``sum over m of the fastest of those``. One step of 1 token (plain
    decoding, a round without a draft) and one of ``K + 1`` (a verification) are what a
    decoder runs.

    Returns
    -------
    (int, list of float)
        The index of the cheapest net and every net's cost in seconds.
    """
    limit = context_length(nets[0])
    if limit is not None:
        context = max(1, min(context, limit - max(rows)))
    ids = torch.arange(context + max(rows)) % output_vocab_size(nets[0])
    ids = ids.to(next(nets[0].parameters()).device)
    costs = []
    for net in nets:
        kwarg, cache = cache_kwarg(net), new_cache(net)
        forward_cached(net, ids[:context], cache, kwarg)
        cost = 0.0
        for m in rows:
            best = float("inf")
            for i in range(repeats + 1):
                t = time.perf_counter()
                forward_cached(net, ids[context:context + m], cache, kwarg)
                if i:
                    best = min(best, time.perf_counter() - t)
                crop_cache(cache, context)
            cost += best
        costs.append(cost)
    return min(range(len(nets)), key=costs.__getitem__), costs


# per model: the net its decoding steps run fastest through here (itself or its rows-first
# twin, which holds no reference to the model), measured once
_FASTEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fastest_layout(model) -> torch.nn.Module:
    """``model`` or its rows-first twin, whichever :func:`fastest_net` measures faster here
    (measured once per model; the twin is kept and shared, as its modules hold no state)."""
    if model not in _FASTEST:
        nets = [model, rows_first_twin(model)]
        best, costs = fastest_net(nets)
        _FASTEST[model] = nets[best]
        log.info("verification layout: %s (a 1- and a 5-token step: %.1f ms in transformers' "
                 "layout, %.1f ms rows-first)", "rows-first" if best else "transformers'",
                 *(1e3 * c for c in costs))
    return _FASTEST[model]


# per net: its compiled decoding step, warmed up (kept for the process: it holds the net)
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WARMED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # net -> {features} warmed


def compiled_step(net: torch.nn.Module, rows: Sequence[int] = (1, 2, 3, 5),
                  contexts: Sequence[int] = (24, 40), features: bool = False) -> torch.nn.Module:
    """``torch.compile(net, dynamic=True)``, compiled and warmed up here, once per net and
    process.

    The warm-up runs steps of every ``m`` in ``rows`` new tokens after cached contexts of
    every length in ``contexts`` (a throwaway cache), so that the graphs a decoder needs (one
    row; several rows, the number symbolic; the cache length symbolic) exist before anything
    is timed: compiling the default target takes ~7 minutes on 2 CPU cores with an empty
    inductor cache (seconds with a full one), which must land
    in no step's measured cost (:class:`~spec_adapters.selection.experts.StepCosts`) and no
    query's tokens per second. Inductor fuses the norms, rotary embeddings and activations
    and removes most of the per-layer Python work; the sums are the same up to float32
    rounding (~2e-5 in the default target's logits, like a ``K + 1``-row verification
    against ``K + 1`` one-row steps). On this project's 2-core CPU a step of 1 / 3 / 5 tokens
    after 400 cached ones took 41.7 / 47.2 / 70.3 ms compiled against 49.4 / 60.3 / 80.7 ms
    (docs/decoding.md, "Verification cost").

    ``features=True`` also warms up the steps that return every layer's hidden states
    (:func:`forward_features`, what EAGLE heads read from a verification): graphs of their
    own, built once per net and process the first time a compiled target reads features.
    """
    if net not in _COMPILED:
        _COMPILED[net] = torch.compile(net, dynamic=True)
    step = _COMPILED[net]
    if features not in _WARMED.setdefault(net, set()):
        vocab, kwarg = output_vocab_size(net), cache_kwarg(net)
        device = next(net.parameters()).device
        t = time.perf_counter()
        for context in contexts:
            ids = (torch.arange(context + max(rows)) % vocab).to(device)
            for m in rows:
                cache = new_cache(net)
                forward_cached(net, ids[:context], cache, kwarg)  # prefill stays eager
                for _ in range(2):  # after a prefill (a contiguous cache), after a crop (not)
                    # a fresh tensor, as verify's (a slice's storage offset would be guarded)
                    new = ids[context:context + m].clone()
                    if features:
                        forward_features(step, new, cache, kwarg)
                    else:
                        forward_cached(step, new, cache, kwarg)
                    crop_cache(cache, context)
        log.info("compiled the decoding step of %s%s in %.1f s", type(net).__name__,
                 " (with hidden states)" if features else "", time.perf_counter() - t)
        _WARMED[net].add(features)
    return step


def forward_features(model, ids: torch.LongTensor, cache, kwarg: str | None = None
                     ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """:func:`forward_cached`, also returning ``output_hidden_states`` (the embeddings, then
    each layer's output; batch dimension dropped): logits ``(m, V)`` float32 and
    ``L + 1`` tensors ``(m, H)``."""
    out = _run_cached(model, ids, cache, kwarg, output_hidden_states=True)
    return out.logits[0].float(), tuple(h[0] for h in out.hidden_states)


class TargetModel:
    """A transformers causal LM and its KV cache: ``prefill``, ``verify``, ``crop``.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        Any causal LM (``model(input_ids, cache=...)`` returning ``.logits``); put in eval mode.
    feature_layers : sequence of int, optional
        Indices into ``output_hidden_states`` whose concatenation :meth:`prefill` returns for
        the cached prompt positions (the features EAGLE heads read); ``None``: no capture.
    rows_first : bool, optional
        Run the forward passes through :func:`~spec_adapters.hf.rows_first.rows_first_twin`
        (linear layers as ``(W X^T)^T`` for a step's few rows, values equal up to float32
        rounding). Which layout is faster depends on the CPU and its BLAS: on one 2-core
        machine here the twin ran a step 1.5-2.5x faster, on another 1.5-2x slower
        (docs/decoding.md). Default (``None``): on a CPU model, whichever
        :func:`fastest_net` measures faster, once per model and process (~1 s for the
        default target); on other devices the model itself.
    compiled : bool, default False
        Run the decoding steps (:meth:`verify`, and :meth:`verify_features` with
        ``feature_layers``) through :func:`compiled_step` (the net compiled once per process,
        minutes for the default target, before the first step; prefill stays eager). Off by
        default: tests and short runs would spend more time compiling than they save.

    Attributes
    ----------
    net : torch.nn.Module
        What the forward passes run: ``model`` itself or its rows-first twin (same weights).
    step_net : torch.nn.Module
        What :meth:`verify` runs: ``net``, or ``net`` compiled (``compiled=True``).
    vocab_size : int
        Size of the logits' last dimension, the vocabulary ``V`` every drafter must share.
    max_length : int or None
        The model's context length (``max_position_embeddings``).
    """

    def __init__(self, model, feature_layers=None, rows_first: bool | None = None,
                 compiled: bool = False) -> None:
        if not isinstance(compiled, bool):
            raise ValueError(f"compiled must be True or False, got {compiled!r}")
        self.model = model.eval()
        self.feature_layers = None if feature_layers is None else \
            tuple(int(i) for i in feature_layers)
        self.vocab_size = output_vocab_size(model)
        self.max_length = context_length(model)
        self.device = next(model.parameters()).device
        if rows_first is None:
            self.net = _fastest_layout(self.model) if self.device.type == "cpu" else self.model
        else:
            self.net = rows_first_twin(self.model) if rows_first else self.model
        self.compiled = compiled
        self.step_net = compiled_step(self.net) if compiled else self.net
        self.features_net = self._features_net()
        self._kwarg = cache_kwarg(model)
        self.cache = None
        self.calls = 0

    def check_prompt_length(self, length: int) -> None:
        """Raise ``ValueError`` when a prompt of ``length`` tokens does not fit the context."""
        if self.max_length is not None and length > self.max_length:
            raise ValueError(f"prompt of {length} tokens is longer than the target's context "
                             f"length max_position_embeddings={self.max_length}")

    def prefill(self, prompt_ids: torch.LongTensor) -> torch.Tensor | None:
        """Start a new query: cache the 1-D prompt minus its last token (see module docstring).

        Returns
        -------
        torch.Tensor or None
            With ``feature_layers``, the features ``(L - 1, F*H)`` of the cached positions
            (``None`` for a one-token prompt); without, ``None``.
        """
        self.check_prompt_length(int(prompt_ids.numel()))
        self.cache = new_cache(self.model)
        self.calls = 0
        if prompt_ids.numel() < 2:
            return None
        ids = prompt_ids[:-1].to(self.device)
        if self.feature_layers is None:
            forward_cached(self.net, ids, self.cache, self._kwarg)
            return None
        return self._forward_features(self.net, ids)[1]

    def verify(self, last_token: torch.LongTensor, drafts: torch.LongTensor) -> torch.Tensor:
        """Score ``[last_token] + drafts`` in one forward pass; return logits (K + 1, V) float32.

        Row ``j`` predicts the token after ``drafts[:j]``; the last row gives the bonus token.
        """
        ids = torch.cat([last_token.view(1), drafts.view(-1)]).to(self.device)
        self.calls += 1
        return forward_cached(self.step_net, ids, self.cache, self._kwarg)

    def verify_features(self, last_token: torch.LongTensor, drafts: torch.LongTensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`verify`, also returning the ``feature_layers`` features of the ``K + 1``
        scored positions, ``(K + 1, F*H)``: what EAGLE heads read for the rows that are
        accepted (the same pass, no extra target call; compiled as :meth:`verify` is)."""
        if self.feature_layers is None:
            raise ValueError("verify_features needs a TargetModel built with feature_layers")
        ids = torch.cat([last_token.view(1), drafts.view(-1)]).to(self.device)
        self.calls += 1
        return self._forward_features(self.features_net, ids)

    def _features_net(self) -> torch.nn.Module | None:
        """What :meth:`verify_features` runs: ``net``, or with ``compiled`` its compiled step
        warmed up for hidden states; ``None`` without ``feature_layers``."""
        if self.feature_layers is None:
            return None
        return compiled_step(self.net, features=True) if self.compiled else self.net

    def _forward_features(self, net, ids: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``net`` on ``ids`` appended to the cache: logits ``(m, V)`` float32 and the
        concatenated ``feature_layers`` of ``output_hidden_states``, ``(m, F*H)``."""
        logits, hidden = forward_features(net, ids, self.cache, self._kwarg)
        return logits, torch.cat([hidden[i] for i in self.feature_layers], -1)

    def reading(self, feature_layers) -> TargetModel:
        """This target (same nets, no cache yet) capturing ``feature_layers``: ``self`` when it
        already does."""
        layers = tuple(int(i) for i in feature_layers)
        if self.feature_layers == layers:
            return self
        twin = copy.copy(self)
        twin.feature_layers, twin.cache, twin.calls = layers, None, 0
        twin.features_net = twin._features_net()
        return twin

    def crop(self, length: int) -> None:
        """Keep the first ``length`` cached positions (drop rejected drafts)."""
        crop_cache(self.cache, length)

    @property
    def cached_length(self) -> int:
        return 0 if self.cache is None else cache_length(self.cache)
