"""Tiny target and trained EAGLE heads shared by the EAGLE tests (not a test module)."""

from __future__ import annotations

import functools

import torch

from spec_adapters.eagle import EagleHead, EagleHeadConfig
from spec_adapters.eagle.train import TrainConfig, train_head
from tests.conftest import make_tiny_llama


def peaked_target(vocab_size: int = 96, seed: int = 0, peak: float = 30.0):
    """A tiny Llama whose LM head is scaled so next-token distributions are sharp (random
    tiny models are nearly uniform), without a default EOS."""
    torch.set_num_threads(1)
    model = make_tiny_llama(vocab_size, seed=seed)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(peak)
    model.generation_config.eos_token_id = None
    return model


def sample_corpus(target, n_seq: int = 16, length: int = 128, seed: int = 0):
    """Synthetic text: sequences sampled from the target itself, ``(n_seq, length)``."""
    g = torch.Generator().manual_seed(seed)
    V = target.config.vocab_size
    torch.manual_seed(seed)
    starts = torch.randint(3, V, (n_seq, 1), generator=g)
    with torch.no_grad():
        return target.generate(starts, max_new_tokens=length - 1, do_sample=True, top_k=0,
                               pad_token_id=0, eos_token_id=None)


@functools.lru_cache(maxsize=4)
def setup(vocab_size: int = 96, draft_vocab: int = 64):
    """Target, corpus and a pool of three heads of different quality (trained 200 / 40 / 0 steps
    on different slices of target-sampled text), all with a reduced draft vocabulary."""
    target = peaked_target(vocab_size)
    corpus = sample_corpus(target)
    heads = []
    for i, steps in enumerate((200, 40, 0)):
        cfg = TrainConfig(steps=max(steps, 1), batch_size=4, seq_len=64, lr=1e-2,
                          draft_vocab_size=draft_vocab, seed=i, eval_every=10**9)
        part = corpus[4 * i:4 * i + 8].reshape(-1)
        if steps:
            head, _ = train_head(target, part, None, cfg, progress=False, log=None)
        else:  # untrained, output layer copied from the target
            head, _ = train_head(target, part, None, cfg, progress=False, log=None,
                                 stop_after=0)
        head.config.extra["name"] = f"head{i}-{steps}steps"
        heads.append(head)
    return target, corpus, heads


def random_head(target, draft_vocab: int, seed: int) -> EagleHead:
    torch.manual_seed(seed)
    V = target.config.vocab_size
    cfg = EagleHeadConfig.for_target(target, draft_vocab)
    d2t = torch.randperm(V)[:draft_vocab].sort().values
    return EagleHead(cfg, d2t=d2t).init_from_target(target)


def features(target, ids: torch.LongTensor, layers) -> torch.Tensor:
    """Target features ``(L, F*H)`` of a 1-D sequence by a plain full forward."""
    with torch.no_grad():
        out = target(input_ids=ids.view(1, -1), output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], -1)


def teacher_forced_logits(head: EagleHead, target, seq: torch.LongTensor) -> torch.Tensor:
    """Head draft logits ``(L-1, Vd)`` over a whole sequence from scratch: row ``t`` reads
    ``(f_t, x_{t+1})`` and predicts ``x_{t+2}``."""
    f = features(target, seq[:-1], head.config.feature_layers)
    with torch.no_grad():
        logits, _, _, _ = head(f.unsqueeze(0), head.embed(seq[1:]).unsqueeze(0),
                               torch.arange(seq.numel() - 1), fuse=True)
    return logits[0]
