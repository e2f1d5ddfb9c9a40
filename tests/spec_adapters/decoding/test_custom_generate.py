"""``model.generate(custom_generate=spec_adapters.decoding.generate, drafters=...)``: greedy output
identical to plain ``generate``, the sampled law equal to the target's (exact enumeration with
transformers' own warpers), every refused option named, the streamer protocol, the return
types; and the ``hedgespec generate`` options ``--device`` / ``--dtype``."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from spec_adapters.decoding import generate as hedgespec_generate
from spec_adapters.decoding.custom_generate import HedgeSpecGenerateOutput
from tests.spec_adapters.single_helpers import (
    RecordingStreamer,
    UnigramDrafter,
    chi2_pvalue,
    exact_continuations,
    pool,
)

PROMPTS = [[1, 30, 31, 32], [1, 7, 7, 7, 7, 12], [1, 80]]


@pytest.fixture(scope="module")
def greedy_pool():
    torch.set_num_threads(1)
    return pool(vocab_size=96, peak=4.0)


def _hedgespec(target, drafters, ids, **kw):
    return target.generate(ids, custom_generate=hedgespec_generate, drafters=drafters, **kw)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_output_equals_plain_generate_with_eos_and_length_cut(greedy_pool, prompt):
    target, drafters = greedy_pool
    ids = torch.tensor([prompt])
    L = ids.shape[1]
    # a length cut that no round boundary of K + 1 = 5 tokens explains
    plain = target.generate(ids, max_new_tokens=13, do_sample=False)
    ours = _hedgespec(target, drafters, ids, draft_length=4, max_new_tokens=13, do_sample=False)
    assert ours.shape == (1, L + 13)
    assert torch.equal(ours, plain)
    # EOS mid-generation: the first new token not seen before position 4 of the continuation
    new = plain[0, L:].tolist()
    eos = next(t for j, t in enumerate(new) if j >= 4 and t not in new[:j])
    cut = new.index(eos) + 1
    plain = target.generate(ids, max_new_tokens=13, do_sample=False, eos_token_id=eos)
    ours = _hedgespec(target, drafters, ids, draft_length=4, max_new_tokens=13,
                      do_sample=False, eos_token_id=eos, attention_mask=torch.ones_like(ids))
    assert ours.shape == (1, L + cut) and int(ours[0, -1]) == eos
    assert torch.equal(ours, plain)


V = 12
SAMPLE_PROMPT = torch.tensor([[1, 5, 7]])


def _transformers_warp(temperature, top_k, top_p):
    """transformers' own warpers, as plain generate() applies them (independent of ours)."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k),
                                   TopPLogitsWarper(top_p)])
    return lambda logits: torch.softmax(warpers(None, logits.float()), -1)


@pytest.fixture(scope="module")
def sharp_pool():
    torch.set_num_threads(1)
    target, drafters = pool(vocab_size=V, peak=20.0, layers=1)
    return target, [drafters[0], drafters[1], UnigramDrafter(torch.linspace(3, 0, V))]


def test_sampled_continuations_follow_plain_generates_law(sharp_pool):
    target, drafters = sharp_pool
    n, n_tokens = 200, 3  # the control below still rejects with p = 0 at 200 samples
    counts = Counter()
    for seed in range(n):  # K = 2, 3 new tokens: rejections, bonus tokens and a cut round
        out = _hedgespec(target, drafters, SAMPLE_PROMPT, draft_length=2, seed=seed,
                         max_new_tokens=n_tokens, do_sample=True, temperature=0.7, top_k=5,
                         top_p=0.9)
        counts[tuple(out[0, SAMPLE_PROMPT.shape[1]:].tolist())] += 1
    exact = exact_continuations(target, SAMPLE_PROMPT, n_tokens, _transformers_warp(0.7, 5, 0.9))
    assert sum(exact.values()) == pytest.approx(1.0)
    assert all(c in exact for c in counts), "a continuation of target probability 0 was sampled"
    assert chi2_pvalue(counts, exact, n) > 1e-3
    # power: the same samples are clearly not distributed as a sharper target
    sharper = exact_continuations(target, SAMPLE_PROMPT, n_tokens,
                                  _transformers_warp(0.56, 5, 0.9))
    assert chi2_pvalue(counts, sharper, n) < 1e-4


@pytest.fixture(scope="module")
def peaked_pool():
    torch.set_num_threads(1)
    return pool(vocab_size=96, peak=30.0)  # the copies' argmax drafts often kept at T = 1


@pytest.mark.parametrize("warp", [{"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9,
                                                         "top_k": 20}])
def test_unseeded_sampled_calls_equal_plain_generate_for_the_same_manual_seed(peaked_pool, warp):
    """The coupled rule draws from torch's global generator as plain generate() does: the same
    tokens after the same torch.manual_seed, the generator left where plain leaves it, and
    drafts accepted on the way."""
    target, drafters = peaked_pool
    accepted = 0
    for i, prompt in enumerate(PROMPTS):
        ids = torch.tensor([prompt])
        kw = {"max_new_tokens": 12 + 3 * i, "do_sample": True, **warp}
        torch.manual_seed(123 + i)
        plain, after_plain = target.generate(ids, **kw), torch.rand(3)
        torch.manual_seed(123 + i)
        ours = _hedgespec(target, drafters, ids, draft_length=3, return_dict_in_generate=True,
                          **kw)
        assert torch.equal(ours.sequences, plain), i
        assert torch.equal(torch.rand(3), after_plain)
        accepted += sum(ours.hedgespec_stats["accepted"])
    assert accepted > 5


class _Shift(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores + 1.0


class _Never(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


@pytest.mark.parametrize(("options", "match"), [
    ({"drafters": None}, r"needs drafters="),
    ({"num_beams": 2}, r"num_beams=2: beam search"),
    ({"num_return_sequences": 2, "do_sample": True}, r"num_return_sequences=2"),
    ({"input_ids": torch.tensor([[1, 5, 7], [1, 6, 8]])}, r"batch size 2"),
    ({"attention_mask": torch.tensor([[0, 1, 1]])}, r"attention_mask with padding"),
    ({"repetition_penalty": 1.3}, r"repetition_penalty \(RepetitionPenaltyLogitsProcessor\)"),
    ({"min_length": 6, "eos_token_id": 2}, r"min_length \(MinLengthLogitsProcessor\)"),
    ({"min_new_tokens": 2, "eos_token_id": 2},
     r"min_new_tokens \(MinNewTokensLengthLogitsProcessor\)"),
    ({"bad_words_ids": [[4]]}, r"bad_words_ids \(NoBadWordsLogitsProcessor\)"),
    ({"no_repeat_ngram_size": 2}, r"no_repeat_ngram_size"),
    ({"do_sample": True, "min_p": 0.1}, r"min_p \(MinPLogitsWarper\)"),
    ({"logits_processor": LogitsProcessorList([_Shift()])}, r"logits_processor \(_Shift\)"),
    ({"do_sample": True, "logits_processor": LogitsProcessorList(
        [TopPLogitsWarper(0.9), TemperatureLogitsWarper(0.5)])}, r"in the order temperature"),
    ({"do_sample": True, "top_k": 0, "logits_processor": LogitsProcessorList(
        [TopPLogitsWarper(0.9, min_tokens_to_keep=3)])}, r"min_tokens_to_keep != 1"),
    ({"max_time": 10.0}, r"max_time \(MaxTimeCriteria\)"),
    ({"stopping_criteria": StoppingCriteriaList([_Never()])}, r"stopping_criteria \(_Never\)"),
    ({"output_scores": True, "return_dict_in_generate": True}, r"output_scores=True"),
    ({"prompt_lookup_num_tokens": 3}, r"prompt_lookup_num_tokens"),
    ({"inputs_embeds": torch.zeros(1, 3, 32)}, r"model input\(s\) inputs_embeds"),
    ({"draft_length": 0}, r"draft_length"),
    ({"policy": "nope"}, r"nope"),
])
def test_unsupported_options_are_refused_by_name_and_the_stream_is_ended(sharp_pool, options,
                                                                         match):
    target, drafters = sharp_pool
    kw = {"input_ids": SAMPLE_PROMPT, "drafters": drafters, "max_new_tokens": 4, **options}
    streamer = RecordingStreamer()
    with pytest.raises(ValueError, match=match):
        target.generate(custom_generate=hedgespec_generate, streamer=streamer, **kw)
    if streamer.values:  # generate() put the prompt before handing over: the stream is closed
        assert len(streamer.values) == 1  # the prompt (expanded for num_beams)
        assert streamer.ended == 1


def test_streamer_gets_the_prompt_then_the_new_tokens_once_per_round(greedy_pool):
    target, drafters = greedy_pool
    ids = torch.tensor([PROMPTS[1]])
    plain_stream, ours_stream = RecordingStreamer(), RecordingStreamer()
    plain = target.generate(ids, max_new_tokens=15, do_sample=False, streamer=plain_stream)
    out = _hedgespec(target, drafters, ids, max_new_tokens=15, do_sample=False,
                     streamer=ours_stream, return_dict_in_generate=True)
    assert torch.equal(out.sequences, plain)
    first, *rest = ours_stream.values
    assert torch.equal(first, plain_stream.values[0]) and torch.equal(first, ids)
    assert torch.cat([v.view(-1) for v in rest]).tolist() == plain[0, ids.shape[1]:].tolist()
    assert len(rest) == out.hedgespec_stats["target_calls"] < 15  # drafts were accepted
    assert ours_stream.ended == 1


def test_return_dict_in_generate_selects_the_return_type(sharp_pool):
    target, drafters = sharp_pool
    kw = {"draft_length": 3, "seed": 5, "max_new_tokens": 9, "do_sample": True,
          "temperature": 0.9}
    tensor = _hedgespec(target, drafters, SAMPLE_PROMPT, **kw)
    full = _hedgespec(target, drafters, SAMPLE_PROMPT, return_dict_in_generate=True, **kw)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (1, SAMPLE_PROMPT.shape[1] + 9)
    assert isinstance(full, HedgeSpecGenerateOutput)
    assert torch.equal(full.sequences, tensor)
    stats = full.hedgespec_stats
    assert stats["new_tokens"] == 9 and stats["draft_length"] == 3
    assert len(stats["drafters"]) == 3 and stats["drafters"][2] == "unigram"
    # each round yields its accepted drafts + 1 token; only the last one may be cut (< K + 1)
    assert 0 <= sum(stats["accepted"]) + stats["target_calls"] - 9 <= 3


def test_package_import_gives_the_callable_without_torch():
    code = ("import sys, spec_adapters.decoding as dec; "
            "from spec_adapters.decoding import generate; "
            "assert callable(generate) and generate.__name__ == 'generate', generate; "
            "assert dec.generate is generate; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "from spec_adapters.decoding.custom_generate import HedgeSpecGenerateOutput; "
            "assert dec.HedgeSpecGenerateOutput is HedgeSpecGenerateOutput")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------------
# hedgespec generate --device / --dtype
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("option", "value", "match"), [
    ("--device", "bogus", "argument --device: unknown device 'bogus'"),
    ("--device", "meta", "argument --device: unsupported device 'meta'"),
    ("--dtype", "float8", "argument --dtype: invalid choice: 'float8'"),
])
def test_bad_device_or_dtype_is_one_usage_line(capsys, option, value, match):
    from spec_adapters.app.cli import main

    with pytest.raises(SystemExit) as e:
        main(["generate", "--prompt", "hi", option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with no CUDA device")
def test_unavailable_cuda_device_is_one_usage_line(capsys):
    from spec_adapters.app.cli import main

    with pytest.raises(SystemExit):
        main(["generate", "--prompt", "hi", "--device", "cuda"])
    assert "argument --device: device 'cuda' is not available (0 CUDA devices here)" \
        in capsys.readouterr().err


def test_device_and_dtype_reach_the_loaded_target(tmp_path):
    from spec_adapters.app.cli import build_parser
    from spec_adapters.app.cli.common import target_from_args
    from tests.spec_adapters.bench_fixtures import make_target_folder

    folder = make_target_folder(tmp_path)
    args = build_parser().parse_args(["generate", "--prompt", "hi", "--target", str(folder),
                                      "--cache-dir", str(tmp_path / "cache"),
                                      "--dtype", "bfloat16", "--device", "cpu"])
    model, _tok = target_from_args(args)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    default = build_parser().parse_args(["generate", "--prompt", "hi", "--target", str(folder)])
    assert (default.dtype, default.device) == (None, None)
