"""Benchmark of the single-draft HedgeSpec decoder: where a round's time goes.

    python benchmarks/single.py                       # tiny random Llama target (seconds)
    python benchmarks/single.py --target PATH         # a real model folder / .gguf file
    python benchmarks/single.py --target default      # SmolLM2-135M (spec_adapters.hf.models)

Prints

1. per round: select / draft / verify / evaluate / update time (ms and share), MAT and
   tokens/s, for N = 1 and N = 8 drafters, evaluated in a Python loop and stacked
   (``StackedHFDrafters``: one vmapped pass);
2. evaluation of N drafters on one verified chunk relative to one drafter (goal <= 1.5x at
   N = 8);
3. the learner's share of a round (select + update; goal < 1%).

Drafters are *layer-subset self-drafters*: the target's embeddings, final norm and LM head
with 2 of its decoder layers (drafter j: layer 0 and layer 1 + j mod (L - 1)), so they share
the target's vocabulary, agree with it often, and all have the same architecture (stackable).
Timings are wall-clock on this machine's CPU threads (``--threads``, default 1); with CUDA the
decoder's phases are not synchronised, so read GPU rows as indicative only.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spec_adapters.app.bench.measure import median_ms, run_decoder
from spec_adapters.decoding.chain import HedgeSpecDecoder
from spec_adapters.drafters import HFDrafter, StackedHFDrafters
from spec_adapters.hf.target import TargetModel

PHASES = ("select", "draft", "verify", "eval", "update")
PROMPTS = ["Explain what a hash table is and when to use one.",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "The mitochondria is the powerhouse of the cell because"]


def tiny_target(vocab: int = 512, hidden: int = 128, layers: int = 4):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=1024, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    with torch.no_grad():  # layers >= 2 only refine: a 2-layer subset is a plausible drafter
        for layer in model.model.layers[2:]:
            layer.self_attn.o_proj.weight.mul_(0.2)
            layer.mlp.down_proj.weight.mul_(0.2)
        model.lm_head.weight.mul_(20.0)  # peaked next-token distributions
    return model


def layer_subset_drafter(target, layers: list[int]):
    """The target with only ``layers`` of its decoder layers (weights copied)."""
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = len(layers)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = [cfg.layer_types[i] for i in layers]
    draft = type(target)(cfg).to(next(target.parameters()).dtype)
    src = target.state_dict()
    state = {}
    for key in draft.state_dict():
        parts = key.split(".")
        if len(parts) > 2 and parts[1] == "layers":
            parts[2] = str(layers[int(parts[2])])
        state[key] = src[".".join(parts)]
    draft.load_state_dict(state)
    return draft.eval().to(next(target.parameters()).device)


def make_drafters(target, n: int):
    n_layers = target.config.num_hidden_layers
    return [layer_subset_drafter(target, [0, 1 + j % (n_layers - 1)]) for j in range(n)]


def prompt_ids(tokenizer, vocab: int, count: int) -> list[torch.Tensor]:
    if tokenizer is not None:
        return [tokenizer(p, return_tensors="pt").input_ids for p in PROMPTS[:count]]
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, vocab, (1, 24), generator=g) for _ in range(count)]


def pool_totals(target, drafters, prompts, args, policy="normalhedge") -> dict:
    """Seconds per phase, ``total`` seconds, ``rounds`` and ``tokens`` summed over the prompts
    (one warm-up generation first)."""
    dec = HedgeSpecDecoder(target, drafters, draft_length=args.k, policy=policy)
    dec.generate(prompts[0], max_new_tokens=4)  # warm-up
    tot = dict.fromkeys((*PHASES, "total", "rounds", "tokens"), 0.0)
    for ids in prompts:
        r = run_decoder(dec, ids, args.tokens, args.temperature, seed=0)
        for ph in PHASES:
            tot[ph] += r["timing"][ph]
        tot["total"] += r["seconds"]
        tot["rounds"] += r["target_calls"]
        tot["tokens"] += r["new_tokens"]
    return tot


def eval_cost(drafters, stacked: bool, chunk: int, reps: int) -> float:
    """Milliseconds to evaluate every drafter on one verified chunk of ``chunk`` tokens."""
    members = list(StackedHFDrafters(drafters)) if stacked else [HFDrafter(d) for d in drafters]
    prompt = torch.arange(3, 35)
    for m in members:
        m.start(prompt)
    tokens = torch.arange(40, 40 + chunk)
    return median_ms(lambda: [m.extend(tokens) for m in members], reps)


def target_step(target, reps: int) -> float:
    """Milliseconds of one cached one-token target step (a 2-token verification)."""
    tm = TargetModel(target)
    tm.prefill(torch.arange(3, 35))
    return median_ms(lambda: tm.verify(torch.tensor([5]), torch.tensor([6])), reps,
                     after=lambda: tm.crop(31))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="model folder, .gguf file, or 'default' (SmolLM2-135M)")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 8], help="pool sizes")
    ap.add_argument("--k", type=int, default=5, help="draft length K")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per prompt")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20, help="repetitions of the micro-benchmarks")
    ap.add_argument("--mixed-only", action="store_true",
                    help="only the policy comparison on the mixed pool")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    tokenizer = None
    if args.target:
        from spec_adapters.hf.models import load_target
        target, tokenizer = load_target(None if args.target == "default" else args.target)
        target.generation_config.eos_token_id = None
        name = getattr(target.config, "name_or_path", args.target)
    else:
        target = tiny_target()
        name = "tiny random Llama (4 layers, hidden 128, vocab 512; layers 2-3 damped)"
    vocab = TargetModel(target).vocab_size
    prompts = prompt_ids(tokenizer, vocab, args.prompts)
    print(f"target: {name}; drafters: 2-layer subsets of it; K={args.k}, "
          f"{args.tokens} tokens x {len(prompts)} prompts, temperature {args.temperature}, "
          f"{args.threads} thread(s), torch {torch.__version__}\n")

    pool = make_drafters(target, max(args.n))
    if not args.mixed_only:
        scaling(target, pool, prompts, args)
    mixed(target, pool, vocab, prompts, args)


def mixed(target, pool, vocab, prompts, args) -> None:
    """Policies on a mixed pool: prompt lookup, early-exit drafters (the first L/2, L/4 and 2
    layers of the target) and one 2-layer subset."""
    from spec_adapters.drafters.ngram import PromptLookupDrafter

    n_layers = target.config.num_hidden_layers
    depths = list(dict.fromkeys(d for d in (n_layers // 2, n_layers // 4, 2) if 1 <= d < n_layers))
    early = [layer_subset_drafter(target, list(range(d))) for d in depths]
    drafters = [PromptLookupDrafter(vocab), *early, pool[-1]]
    names = ["prompt lookup", *(f"first {d} layers" for d in depths), "2-layer subset"]
    print(f"\npolicies on a mixed pool ({', '.join(names)}), loop evaluation:")
    print(f"{'policy':12} {'MAT':>5} {'tok/s':>7} {'ms/round':>9} {'eval':>6} {'learner':>8}")
    for policy in ("normalhedge", "exp3spec", "ucbspec",
                   *(f"fixed:{i}" for i in range(len(drafters)))):
        t = pool_totals(target, drafters, prompts, args, policy=policy)
        r = max(t["rounds"], 1)
        print(f"{policy:12} {t['tokens'] / r:5.2f} {t['tokens'] / t['total']:7.1f} "
              f"{1e3 * t['total'] / r:9.2f} {t['eval'] / t['total']:6.0%} "
              f"{(t['select'] + t['update']) / t['total']:8.2%}")


def scaling(target, pool, prompts, args) -> None:
    """Phase split and evaluation cost for N drafters, loop versus stacked."""
    step = target_step(target, args.reps)
    one_eval = eval_cost(pool[:1], False, 3, args.reps)
    print(f"one target step (1 token, cached): {step:.2f} ms; one drafter on a 3-token "
          f"chunk: {one_eval:.2f} ms ({one_eval / step:.2f} target steps)\n")

    print("evaluation of N drafters on one 3-token chunk, relative to one drafter:")
    for n in args.n:
        loop = eval_cost(pool[:n], False, 3, args.reps)
        stacked = eval_cost(pool[:n], True, 3, args.reps)
        print(f"  N={n:2d}  loop {loop:7.2f} ms ({loop / one_eval:4.2f}x)   "
              f"stacked {stacked:7.2f} ms ({stacked / one_eval:4.2f}x)")
    print()

    header = (f"{'N':>3} {'mode':8} {'MAT':>5} {'tok/s':>7} {'ms/round':>9} "
              + " ".join(f"{p:>13}" for p in PHASES) + f" {'learner':>8}")
    print("per round: ms (share of the round)")
    print(header)
    for n in args.n:
        for mode in ("loop", "stacked"):
            drafters = [StackedHFDrafters(pool[:n])] if mode == "stacked" else pool[:n]
            t = pool_totals(target, drafters, prompts, args)
            r = max(t["rounds"], 1)
            cells = " ".join(f"{1e3 * t[p] / r:6.2f} ({t[p] / t['total']:4.0%})" for p in PHASES)
            learner = (t["select"] + t["update"]) / t["total"]
            print(f"{n:3d} {mode:8} {t['tokens'] / r:5.2f} {t['tokens'] / t['total']:7.1f} "
                  f"{1e3 * t['total'] / r:9.2f} {cells} {learner:8.2%}")


if __name__ == "__main__":
    main()
