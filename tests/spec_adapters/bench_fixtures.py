"""Tiny local stand-ins for the benchmark pipeline: a word-level tokenizer, a tiny Llama saved
as a local model folder (so ``load_target``'s folder path is exercised), and prepared domain
folders in ``spec_adapters.app.domains``' on-disk format (so ``load_domain`` is exercised).

Three synthetic domains with disjoint vocabularies make the specialist diagonal show even
with a random target: each domain's n-gram drafter knows only its own words.
"""

from __future__ import annotations

import random
from pathlib import Path

WORDS = {
    "code": ["def", "return", "self", "import", "class", "lambda", "yield", "print", "range",
             "len", "for", "in", "if", "else"],
    "math": ["add", "subtract", "times", "divide", "equals", "total", "apples", "cost",
             "dollars", "each", "half", "sum"],
    "news": ["mayor", "said", "monday", "city", "council", "police", "reported", "voters",
             "election", "week", "party"],
}
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
            "<|assistant|>")


def domain_texts(name: str, n: int, seed: int) -> list[str]:
    rng = random.Random(f"{name}:{seed}")
    w = WORDS[name]
    # repeated phrases so n-grams carry signal
    phrases = [" ".join(rng.choice(w) for _ in range(6)) for _ in range(5)]
    return [" ".join(rng.choice(phrases) for _ in range(8)) for _ in range(n)]


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for words in WORDS.values():
        for t in words:
            vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    return fast


def make_target_folder(root: Path, seed: int = 0) -> Path:
    """A tiny Llama + tokenizer saved as a local transformers model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    # make the target favour repeating its context a little, so drafters get accepted
    with torch.no_grad():
        model.lm_head.weight.copy_(model.model.embed_tokens.weight * 4)
    folder = Path(root) / "tiny-target"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def write_domains(cache_dir: Path, names=("code", "math", "news"), n_train: int = 40,
                  n_prompts: int = 4) -> dict:
    """Prepared-domain folders, written by ``prepare_domains``' own ``save_domain``."""
    from spec_adapters.app.domains import Domain, save_domain

    out = {}
    for name in names:
        train = domain_texts(name, n_train, seed=0)
        prompts = [f"please continue {t[:60]}" for t in domain_texts(name, n_prompts, seed=1)]
        train_prompts = [f"please continue {t[:60]}" for t in domain_texts(name, 3, seed=2)]
        out[name] = save_domain(cache_dir, Domain(name, train, prompts, train_prompts,
                                                  {"licence": "test", "split": "synthetic",
                                                   "seed": 0}))
    return out


def distill_answers(model, tok, cache_dir: Path, names=("code", "math", "news"),
                    tokens: int = 6) -> dict:
    """The tiny target's answer set in ``<cache_dir>/distilled`` (``hedgespec distill``'s own
    code, transformers engine), what a pool with ``distilled_tokens=tokens`` copies."""
    from spec_adapters.app.distill.answers import DistillConfig, distill
    from spec_adapters.app.domains import load_domains

    return distill(model, tok, load_domains(cache_dir, names), Path(cache_dir) / "distilled",
                   DistillConfig(tokens_per_domain=tokens, max_new_tokens=4, batch_size=2),
                   progress=False)
