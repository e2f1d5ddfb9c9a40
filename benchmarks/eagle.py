"""Benchmark of the EAGLE path: head step vs target step, N-head evaluation, tree verification,
per-round time split, and the head-training step time.

    python benchmarks/eagle.py                 # SmolLM2-135M architecture, random weights
    python benchmarks/eagle.py --size tiny     # the tiny test model (seconds)
    python benchmarks/eagle.py --real          # the real SmolLM2-135M via models.load_target

Random weights have exactly the FLOPs of the real model, so every timing except acceptance
rates is representative. Prints one line per measurement (median over repeats, milliseconds).
"""

from __future__ import annotations

import argparse

import torch

from spec_adapters.app.bench.measure import median_ms, run_decoder
from spec_adapters.eagle import EagleHead, EagleHeadConfig, HeadPool, HedgeSpecDecoder, TreeConfig
from spec_adapters.eagle.train import TrainConfig, head_loss
from spec_adapters.eagle.tree import draft_tree, verify_tree
from spec_adapters.hf.target import new_cache

SMOL = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
            rope_theta=100000.0, tie_word_embeddings=True)
TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            tie_word_embeddings=False)


def build_target(size: str, real: bool):
    if real:
        from spec_adapters.hf.models import load_target
        out = load_target()
        model = out[0] if isinstance(out, tuple) else getattr(out, "model", out)
        return model.float().eval()
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      **(SMOL if size == "smol" else TINY))
    return LlamaForCausalLM(cfg).eval()


def make_heads(target, n: int, draft_vocab: int):
    V = target.get_input_embeddings().weight.shape[0]
    heads = []
    for i in range(n):
        torch.manual_seed(100 + i)
        cfg = EagleHeadConfig.for_target(target, min(draft_vocab, V))
        d2t = torch.randperm(V)[: cfg.draft_vocab_size].sort().values
        heads.append(EagleHead(cfg, d2t=d2t).init_from_target(target).eval())
    return heads


@torch.no_grad()
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", choices=("smol", "tiny"), default="smol")
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = build_target(args.size, args.real)
    V = target.get_input_embeddings().weight.shape[0]
    ctx = min(args.context, target.config.max_position_embeddings - 64)
    print(f"target: {args.size}{' (real weights)' if args.real else ' (random weights)'}, "
          f"{sum(p.numel() for p in target.parameters()) / 1e6:.1f}M params, V={V}, "
          f"context {ctx}, threads {args.threads}")
    heads = make_heads(target, 8, args.draft_vocab)
    Vd = heads[0].config.draft_vocab_size
    print(f"head: {sum(p.numel() for p in heads[0].parameters()) / 1e6:.2f}M params, "
          f"draft vocab {Vd}, feature layers {heads[0].config.feature_layers}")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, V, (ctx + 1,), generator=g)

    # target: prefill, one-token step, tree verification of 48 tokens
    cache = new_cache(target)
    out = target(input_ids=ids[:-1].view(1, -1), cache=cache, use_cache=True,
                 output_hidden_states=True)
    fl = heads[0].config.feature_layers
    feats = torch.cat([out.hidden_states[i][0] for i in fl], -1)

    def target_step():
        target(input_ids=ids[-1:].view(1, 1), cache=cache, use_cache=True)
        cache.crop(-1)

    t_target = median_ms(target_step, args.repeats, warmup=1)
    print(f"target one-token step:           {t_target:8.2f} ms")

    # pools of 1 and 8 heads, synced on the context
    pool8 = HeadPool(heads, target)
    pool1 = HeadPool(heads[:1], target)
    pool8.extend(feats, ids[1:])
    pool1.extend(feats, ids[1:])
    head = heads[0]
    k, v = pool1.cache_of(0)
    h = pool1.pending_hidden[0].view(1, 1, -1)
    e = head.embed(ids[-1:]).view(1, 1, -1)
    pos = torch.tensor([ctx])
    t_head = median_ms(lambda: head(h, e, pos, k, v), args.repeats, warmup=1)
    print(f"one head step (1 token):         {t_head:8.2f} ms   = {t_head / t_target:.3f} x "
          "target step (goal <= 0.1)")

    # evaluation: 3 newly verified pairs appended to 1 vs 8 heads (caches restored after)
    new_f, new_t = feats[-3:], ids[-3:]

    def eval_pool(pool):
        saved = (list(pool._gk), list(pool._gv), pool.length, list(pool.pending_logits),
                 list(pool.pending_hidden))
        pool.extend(new_f, new_t)
        pool._gk, pool._gv, pool.length, pool.pending_logits, pool.pending_hidden = saved

    t_e1 = median_ms(lambda: eval_pool(pool1), args.repeats, warmup=1)
    t_e8 = median_ms(lambda: eval_pool(pool8), args.repeats, warmup=1)
    pool8_loop = HeadPool(heads, target, batched=False)
    pool8_loop.extend(feats, ids[1:])
    t_e8l = median_ms(lambda: eval_pool(pool8_loop), args.repeats, warmup=1)
    print(f"evaluate 1 head (3 positions):   {t_e1:8.2f} ms")
    print(f"evaluate 8 heads, stacked:       {t_e8:8.2f} ms   = {t_e8 / t_e1:.2f} x one head "
          "(goal <= 1.5)")
    print(f"evaluate 8 heads, loop:          {t_e8l:8.2f} ms   = {t_e8l / t_e1:.2f} x one head")

    # tree drafting and verification (depth 5, top_k 8, 48 tokens)
    cfg = TreeConfig(5, 8, 48)
    tree = draft_tree(head, k, v, pool1.pending_logits[0], pool1.pending_hidden[0],
                      int(ids[-1]), cfg)
    t_draft = median_ms(lambda: draft_tree(head, k, v, pool1.pending_logits[0],
                                        pool1.pending_hidden[0], int(ids[-1]), cfg),
                     args.repeats, warmup=1)

    def verify():
        verify_tree(target, cache, tree, fl)
        cache.crop(-(tree.size + 1))

    t_verify = median_ms(verify, args.repeats, warmup=1)
    print(f"draft tree {cfg} ({tree.size} nodes): {t_draft:8.2f} ms = "
          f"{t_draft / t_target:.2f} x target step")
    print(f"verify tree of {tree.size} + 1 tokens:   {t_verify:8.2f} ms   = "
          f"{t_verify / t_target:.2f} x single-token target step")
    for total in (8, 16):
        small = draft_tree(head, k, v, pool1.pending_logits[0], pool1.pending_hidden[0],
                           int(ids[-1]), TreeConfig(5, 8, total))

        def verify_small(small=small):
            verify_tree(target, cache, small, fl)
            cache.crop(-(small.size + 1))

        t_small = median_ms(verify_small, args.repeats, warmup=1)
        print(f"verify tree of {small.size} + 1 tokens:    {t_small:8.2f} ms   = "
              f"{t_small / t_target:.2f} x single-token target step")

    # a full decode: per-round split (random heads: acceptance is not representative)
    dec = HedgeSpecDecoder(target, heads, tree=cfg, policy="normalhedge")
    run = run_decoder(dec, ids[:ctx].view(1, -1), args.new_tokens, eos_token_id=[])
    rounds, timing = run["target_calls"], run["timing"]
    print(f"decode {run['new_tokens']} tokens, {rounds} rounds, 8 heads, greedy:")
    for key in ("select", "draft", "verify", "eval", "update"):
        print(f"  {key:7s} {1000 * timing[key] / rounds:8.2f} ms / round")
    print(f"  prefill {1000 * timing['prefill']:8.2f} ms, total {1000 * run['seconds']:.0f} ms")

    # training: one optimisation step at the default TrainConfig size
    with torch.enable_grad():
        tc = TrainConfig()
        batch = torch.randint(3, V, (tc.batch_size, tc.seq_len), generator=g)
        opt = torch.optim.AdamW(head.parameters(), lr=1e-4)
        head.train()

        def train_step():
            loss, _, _ = head_loss(head, target, batch, tc)
            opt.zero_grad()
            loss.backward()
            opt.step()

        t_train = median_ms(train_step, max(1, args.repeats // 2), warmup=1)
        head.eval()
    tok = tc.tokens_per_step
    print(f"train step ({tc.batch_size} x {tc.seq_len} = {tok} tokens): {t_train:8.1f} ms = "
          f"{1000 * tok / t_train:.0f} tokens/s -> 100k tokens in {1e5 / tok * t_train / 6e4:.1f}"
          f" min, 300k in {3e5 / tok * t_train / 6e4:.1f} min ({args.threads} thread(s))")


if __name__ == "__main__":
    main()
