"""HedgeSpec as the decoding loop of transformers' ``generate()``.

``generate(custom_generate=f)`` with a callable ``f`` prepares the inputs, the
``GenerationConfig``, the logits processors and the stopping criteria, then hands the decoding
loop to ``f``; keyword arguments that ``f`` declares beyond those of transformers' own sampling
loop are forwarded to it. :func:`generate` is such an ``f``::

    from spec_adapters.decoding import generate as hedgespec_generate

    out = model.generate(**inputs, custom_generate=hedgespec_generate, drafters=pool.drafters,
                         max_new_tokens=256, do_sample=True, temperature=0.7, top_p=0.9,
                         streamer=streamer, return_dict_in_generate=True)
    out.sequences, out.hedgespec_stats

The loop is :class:`spec_adapters.decoding.chain.HedgeSpecDecoder`: the output is plain
``model.generate``'s with the same options, token for token greedy and, sampled, for the same
``torch.manual_seed`` (unless ``seed=`` asks for a run of its own: then distributed as it).
What it cannot reproduce exactly is refused with a ``ValueError`` naming the option; see
:func:`generate`.

Importing this module imports neither torch nor transformers; ``spec_adapters.decoding``
exports :func:`generate` lazily, so ``from spec_adapters.decoding import generate`` does not
either.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spec_adapters.decoding.settings import PolicySettings

if TYPE_CHECKING:
    import torch

__all__ = ["HedgeSpecGenerateOutput", "generate"]

# transformers' logits processors / stopping criteria -> the generate() option that adds them
_PROCESSOR_OPTIONS = {
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "EncoderRepetitionPenaltyLogitsProcessor": "encoder_repetition_penalty",
    "MinLengthLogitsProcessor": "min_length",
    "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "EncoderNoRepeatNGramLogitsProcessor": "encoder_no_repeat_ngram_size",
    "SequenceBiasLogitsProcessor": "sequence_bias",
    "PrefixConstrainedLogitsProcessor": "prefix_allowed_tokens_fn",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
    "InfNanRemoveLogitsProcessor": "remove_invalid_values",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
    "ExponentialDecayLengthPenalty": "exponential_decay_length_penalty",
    "LogitNormalization": "renormalize_logits",
    "MinPLogitsWarper": "min_p",
    "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff",
    "EtaLogitsWarper": "eta_cutoff",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "ClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
}
_CRITERIA_OPTIONS = {
    "MaxTimeCriteria": "max_time",
    "StopStringCriteria": "stop_strings",
    "ConfidenceCriteria": "assistant_confidence_threshold",
}
# the warpers HedgeSpec applies to the target's p and the drafters' q alike, in their order
_WARPERS = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper")
# GenerationConfig fields asking for something a HedgeSpec run does not produce
_REFUSED_FLAGS = {
    "output_scores": "scores are not returned",
    "output_logits": "logits are not returned",
    "output_attentions": "attentions are not returned",
    "output_hidden_states": "hidden states are not returned",
}
# model inputs generate() prepares for its own loop; HedgeSpec feeds input_ids only
_IGNORED_INPUTS = frozenset({"attention_mask", "position_ids", "cache_position", "logits_to_keep",
                             "use_cache", "cache", "past_key_values"})


@dataclass
class HedgeSpecGenerateOutput:
    """What :func:`generate` returns with ``return_dict_in_generate=True``.

    Attributes
    ----------
    sequences : torch.LongTensor
        ``[1, prompt_len + new_tokens]`` on the device of ``input_ids``.
    hedgespec_stats : dict
        :attr:`spec_adapters.decoding.loop.GenerateOutput.stats`: target calls, mean accepted
        tokens, the drafter chosen and the drafts accepted per round, timings, ...
    """

    sequences: torch.LongTensor
    hedgespec_stats: dict[str, Any]


def generate(model, input_ids: torch.LongTensor, logits_processor, stopping_criteria,
             generation_config, synced_gpus: bool = False, streamer=None, *, drafters=None,
             draft_length: int = 5, policy=PolicySettings.policy, loss: str = PolicySettings.loss,
             delay: str = PolicySettings.delay, seed: int | None = None, **model_kwargs):
    """HedgeSpec decoding loop for ``model.generate(custom_generate=generate, ...)``.

    transformers calls this with what ``generate()`` prepared; the caller passes the HedgeSpec
    options as keyword arguments of ``generate()``.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The target (the model whose ``generate`` was called).
    input_ids : torch.LongTensor
        ``[1, L]``, one prompt.
    logits_processor : LogitsProcessorList
        Only transformers' temperature, top-k and top-p warpers, in that order (what
        ``do_sample`` / ``temperature`` / ``top_k`` / ``top_p`` add): they warp the target's
        ``p`` and every drafter's ``q`` alike. With ``do_sample=False`` decoding is greedy
        (the warpers do not move the argmax).
    stopping_criteria : StoppingCriteriaList
        Only the length and EOS criteria (``max_new_tokens`` / ``max_length``,
        ``eos_token_id``).
    generation_config : GenerationConfig
        Read for ``do_sample``, ``max_length`` (prompt + ``max_new_tokens``), ``eos_token_id``.
    synced_gpus : bool, default False
        Must be False.
    streamer : BaseStreamer, optional
        transformers >= 5.16 does not forward ``generate(streamer=...)`` to a callable
        ``custom_generate``; when it is not passed here it is taken from the calling
        ``generate()``. ``generate()`` has already put the prompt; the new tokens follow, one
        ``put`` per HedgeSpec round, then ``end()`` (also when this call raises).
    drafters : list
        The drafter pool (:class:`~spec_adapters.drafters.Drafter` objects, transformers
        causal LMs or :class:`~spec_adapters.drafters.StackedHFDrafters`), sharing the target's
        vocabulary.
    draft_length, policy, loss, delay
        As :class:`~spec_adapters.decoding.chain.HedgeSpecDecoder` (``K``, the drafter
        selection policy, its loss, the delayed-feedback reduction).
    seed : int, optional
        ``None`` (the default): the draws come from torch's global generator of the model's
        device (CPU, CUDA), as plain ``generate()``'s do, so a sampled run emits exactly plain
        ``generate()``'s tokens after the same ``torch.manual_seed(s)`` (the coupled rule:
        each emitted token is ``torch.multinomial`` of its warped row on that generator, the
        drafts only decide how many one verification pass emits; the target's rows agree up to
        float rounding, as greedy) and leaves the generator where plain ``generate()`` would.
        An integer: a run of its own, reproducible, drafts sampled from the drafters' ``q``
        and verified by speculative sampling (its law is ``generate()``'s, its tokens not).
        Draft trees (EAGLE heads) always run so, their seed drawn from the global generator.
    **model_kwargs
        The model inputs ``generate()`` prepared: an attention mask without padding, position
        ids, an empty cache (HedgeSpec keeps its own); anything else is refused.

    Returns
    -------
    torch.LongTensor or HedgeSpecGenerateOutput
        The sequences ``[1, L + new_tokens]`` (prompt included), or with
        ``return_dict_in_generate=True`` the sequences and the HedgeSpec statistics. The
        sequence ends after an EOS token or at ``max_length``; a batch of one is never padded,
        so ``pad_token_id`` never appears in it.

    Raises
    ------
    ValueError
        Naming the option: no ``drafters``; ``num_beams > 1``; ``num_return_sequences > 1``;
        a batch of more than one prompt; an attention mask with padding; a logits processor
        other than the temperature / top-k / top-p warpers (``repetition_penalty``,
        ``min_length``, ``min_new_tokens``, ``bad_words_ids``, ``no_repeat_ngram_size``, a
        custom ``logits_processor``, ...), or those warpers out of their order; a stopping
        criterion other than length and EOS (``max_time``, ``stop_strings``, a custom
        ``stopping_criteria``); ``output_scores`` / ``output_logits`` / ``output_attentions``
        / ``output_hidden_states``; ``prompt_lookup_num_tokens``; ``synced_gpus``; a prefilled
        cache or another model input; and whatever
        :class:`~spec_adapters.decoding.chain.HedgeSpecDecoder` refuses (bad ``draft_length``,
        ``policy``, ``loss``, ``delay``, ``seed``, drafters of another vocabulary).
    """
    import torch

    from spec_adapters.decoding.chain import HedgeSpecDecoder

    if streamer is None:
        streamer = _streamer_of_caller()
    stream = None if streamer is None else _AfterPrompt(streamer)
    try:
        _check_options(input_ids, generation_config, synced_gpus, drafters, model_kwargs)
        temperature, top_k, top_p = _sampling(logits_processor, bool(generation_config.do_sample))
        _check_criteria(stopping_criteria)
        eos = generation_config.eos_token_id
        decoder = HedgeSpecDecoder(model, drafters, draft_length=draft_length, policy=policy,
                                   loss=loss, delay=delay)
        # unseeded: draw from torch's own generator, as plain generate() does, so that the
        # sample equals plain generate()'s after the same torch.manual_seed
        generator = None
        if seed is None and getattr(decoder.scheme, "couples_seeds", False):
            generator = _global_generator(decoder.target.device)
        if generator is None and seed is None:
            seed = int(torch.randint(0, 2**63 - 1, (1,)))
        out = decoder.generate(
            input_ids, max_new_tokens=max(0, generation_config.max_length - input_ids.shape[1]),
            temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, generator=generator,
            eos_token_id=[] if eos is None else eos, streamer=stream)
    finally:
        if stream is not None:
            stream.end()
    sequences = out.sequences.to(input_ids.device)
    if generation_config.return_dict_in_generate:
        return HedgeSpecGenerateOutput(sequences=sequences, hedgespec_stats=out.stats)
    return sequences


def _global_generator(device) -> torch.Generator | None:
    """torch's default generator of ``device`` (what plain ``generate()`` samples with), or
    ``None`` for a device type without one here."""
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return torch.default_generator
    if device.type == "cuda":
        return torch.cuda.default_generators[torch.cuda.current_device() if device.index is None
                                             else device.index]
    return None


def _check_options(input_ids, config, synced_gpus, drafters, model_kwargs) -> None:
    """Refuse the generate() options and model inputs HedgeSpec does not reproduce."""
    if drafters is None or len(drafters) == 0:
        raise ValueError("custom_generate=spec_adapters.decoding.generate needs drafters=[...]: "
                         "the drafter pool HedgeSpec chooses from")
    if (config.num_beams or 1) > 1:
        raise ValueError(f"num_beams={config.num_beams}: beam search is not supported by "
                         "HedgeSpec (it samples one sequence); use num_beams=1")
    if (config.num_return_sequences or 1) > 1:
        raise ValueError(f"num_return_sequences={config.num_return_sequences} is not supported "
                         "by HedgeSpec: call generate once per sequence")
    if input_ids.dim() == 2 and input_ids.shape[0] != 1:
        raise ValueError(f"input_ids has batch size {input_ids.shape[0]}: HedgeSpec decodes one "
                         "prompt per generate call")
    for flag, why in _REFUSED_FLAGS.items():
        if getattr(config, flag, False):
            raise ValueError(f"{flag}=True is not supported by HedgeSpec ({why})")
    if getattr(config, "prompt_lookup_num_tokens", None) is not None:
        raise ValueError("prompt_lookup_num_tokens is not supported with HedgeSpec: put a "
                         "spec_adapters.drafters.ngram.PromptLookupDrafter in drafters instead")
    if synced_gpus:
        raise ValueError("synced_gpus=True is not supported by HedgeSpec")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("attention_mask with padding (zeros) is not supported by HedgeSpec: "
                         "pass one unpadded prompt (note that generate() masks prompt tokens "
                         "equal to pad_token_id)")
    for name in ("cache", "past_key_values"):
        cache = model_kwargs.get(name)
        if cache is not None and int(cache.get_seq_length()) > 0:
            raise ValueError(f"a prefilled {name} is not supported: HedgeSpec prefills the "
                             "prompt into its own KV cache")
    other = sorted(k for k, v in model_kwargs.items() if k not in _IGNORED_INPUTS
                   and v is not None)
    if other:
        raise ValueError(f"model input(s) {', '.join(other)} not supported by HedgeSpec, which "
                         "feeds the target input_ids only")


def _sampling(processors, do_sample: bool) -> tuple[float, int | None, float]:
    """``(temperature, top_k, top_p)`` of the warpers in ``processors`` (greedy: temperature 0).

    Raises ``ValueError`` naming every processor HedgeSpec cannot apply to both ``p`` and
    ``q``, and on warpers out of transformers' order (temperature, top-k, top-p).
    """
    names = [type(p).__name__ for p in processors]
    refused = [n for n in names if n not in _WARPERS]
    if refused:
        options = ", ".join(f"{_PROCESSOR_OPTIONS.get(n, 'logits_processor')} ({n})"
                            for n in refused)
        raise ValueError(f"HedgeSpec does not support {options}: only the temperature, top_k "
                         "and top_p warpers can be applied to the target and to the drafters "
                         "alike, which lossless speculative sampling needs")
    order = [_WARPERS.index(n) for n in names]
    if order != sorted(set(order)):
        raise ValueError(f"logits_processor: the warpers {names} must come once each in the "
                         "order temperature, top_k, top_p for HedgeSpec to reproduce them")
    for p in processors:
        if getattr(p, "filter_value", -math.inf) != -math.inf \
                or getattr(p, "min_tokens_to_keep", 1) != 1:
            raise ValueError(f"logits_processor: {type(p).__name__} with filter_value != -inf "
                             "or min_tokens_to_keep != 1 is not supported by HedgeSpec")
    if not do_sample:
        return 0.0, None, 1.0
    temperature, top_k, top_p = 1.0, None, 1.0
    for p in processors:
        kind = type(p).__name__
        if kind == "TemperatureLogitsWarper":
            temperature = float(p.temperature)
        elif kind == "TopKLogitsWarper":
            top_k = int(p.top_k)
        else:
            top_p = float(p.top_p)
    return temperature, top_k, top_p


def _check_criteria(criteria) -> None:
    """Only the length and EOS stopping criteria: HedgeSpec applies those itself."""
    refused = [type(c).__name__ for c in criteria
               if type(c).__name__ not in ("MaxLengthCriteria", "EosTokenCriteria")]
    if refused:
        options = ", ".join(f"{_CRITERIA_OPTIONS.get(n, 'stopping_criteria')} ({n})"
                            for n in refused)
        raise ValueError(f"HedgeSpec does not support {options}: it stops only at EOS and at "
                         "max_length / max_new_tokens")


def _streamer_of_caller():
    """The ``streamer`` argument of the ``GenerationMixin.generate`` call that called us.

    transformers (5.16 to 5.24 at least) passes a callable ``custom_generate`` only the keyword
    arguments its signature adds to ``_sample``'s, so ``generate(streamer=...)`` never reaches
    it although ``generate()`` itself puts the prompt. The calling frame is found by its code
    object (``GenerationMixin.generate`` without its decorators) among the next few frames.
    """
    try:
        import inspect

        from transformers.generation.utils import GenerationMixin

        code = inspect.unwrap(GenerationMixin.generate).__code__
    except (ImportError, AttributeError):
        return None
    frame = sys._getframe(2)  # our caller's caller: the first candidate above generate()
    for _ in range(8):  # a few wrappers (a user's function around ours) may sit in between
        if frame is None:
            return None
        if frame.f_code is code:
            return frame.f_locals.get("streamer")
        frame = frame.f_back
    return None


class _AfterPrompt:
    """The caller's streamer as the decoder sees it: ``generate()`` has already put the prompt,
    so the decoder's own first ``put`` (the prompt) is dropped; ``end()`` reaches the streamer
    once, whether the decoder ended it or the call raised."""

    def __init__(self, streamer) -> None:
        self.streamer, self.prompt_seen, self.ended = streamer, False, False

    def put(self, value) -> None:
        if self.prompt_seen:
            self.streamer.put(value)
        self.prompt_seen = True

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.streamer.end()
