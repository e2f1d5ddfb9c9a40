"""How often a seeded request's draft is kept: argmax drafts, race drafts, drafts drawn from q.

A request decoded with its own generator (``generate(generator=...)``, transformers; a seed, in
vLLM and llama.cpp) is verified by the coupled rule, which keeps a point-mass draft ``d`` with
probability ``p(d)`` (docs/theory.md, "Seeded requests"). Three ways to choose ``d`` at a
position where the target's warped row is ``p`` and a drafter's is ``q``:

- its argmax, kept with ``p(argmax q)`` (what HedgeSpec does);
- the winner of ``q``'s exponential race against the very noise plain decoding draws there
  (``torch.multinomial`` is the race ``argmax_x p(x) / E(x)``), kept when both races pick the
  same token, with probability ``sum_x 1 / sum_y max(p_y / p_x, q_y / q_x)``
  (:func:`race_coupling`; 1 when ``q = p``);
- for comparison, a draft drawn from ``q`` and verified by speculative sampling (an unseeded
  request), kept with ``sum_x min(p, q)``, the most any coupling keeps.

This measures the three per position along the target's own sampled answers to held-out
prompts, for every drafter of the pool (and the shipped EAGLE heads with ``--heads``), each
drafter's rows given the verified prefix (as the counterfactual evaluation sees them):

    .venv/bin/python benchmarks/seeded_acceptance.py [--per-domain 1] [--max-new-tokens 96] \
        [--temperature 0.7] [--top-p 0.9] [--heads] [--json results/seeded-acceptance.json]

Needs the cached pool (``make demo`` or ``hedgespec train-drafters``). docs/benchmark.md
("transformers") quotes it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def race_coupling(p: torch.Tensor, q: torch.Tensor) -> float:
    """``P(argmax_x p(x)/E(x) = argmax_x q(x)/E(x))``, ``E ~ Exp(1)^V``: the probability that
    a draft raced against plain decoding's noise is the token plain decoding draws.

    ``x`` wins both races iff ``E_y > E_x max(p_y / p_x, q_y / q_x)`` for every ``y``;
    integrating over ``E_x ~ Exp(1)`` gives ``1 / S_x``, ``S_x = sum_y max(p_y / p_x,
    q_y / q_x)``. With ``r_y = p_y / q_y``, the maximum is ``p_y / p_x`` where ``r_y >= r_x``
    and ``q_y / q_x`` elsewhere, so one sort by ``r`` and two running sums give every ``S_x``
    in ``O(V log V)``.
    """
    p, q = p.double(), q.double()
    r = torch.where(q > 0, p / q, torch.full_like(p, float("inf")))
    order = torch.argsort(r, descending=True, stable=True)
    ps, qs = p[order], q[order]
    p_above = ps.cumsum(0)  # y ranked up to x (a tie r_y = r_x: both ratios are equal)
    q_below = qs.sum() - qs.cumsum(0)
    both = (ps > 0) & (qs > 0)
    return float((1.0 / (p_above[both] / ps[both] + q_below[both] / qs[both])).sum())


def position_acceptance(p: torch.Tensor, q: torch.Tensor) -> tuple[float, float, float]:
    """``(p(argmax q), race_coupling(p, q), sum_x min(p, q))`` for one position's rows (the
    last by Theorem 1, :func:`~spec_adapters.core.acceptance.acceptance_probability`)."""
    from spec_adapters.core.acceptance import acceptance_probability

    return (float(p[q.argmax()]), race_coupling(p, q),
            float(acceptance_probability(p.double(), q.double(), validate=False)))


def measure(args: argparse.Namespace) -> dict:
    """Every drafter's three mean acceptances (:func:`position_acceptance`) per position of
    the target's sampled answers to ``args.per_domain`` held-out prompts per domain."""
    from tqdm import tqdm

    from spec_adapters.app.cli.common import pool_config, target_and_domains
    from spec_adapters.app.domains import chat_ids
    from spec_adapters.app.heads import shipped_heads_folder
    from spec_adapters.app.pool.cache import load_pool
    from spec_adapters.core.proposal import warp
    from spec_adapters.core.sampling import SamplingConfig
    from spec_adapters.hf.target import TargetModel

    model, tok, domains = target_and_domains(args)
    pool = load_pool(model, tok, args.cache_dir, pool_config(args), domains=None, build=False)
    drafters, names, target = list(pool.drafters), list(pool.names), TargetModel(model)
    if args.heads:
        from spec_adapters.eagle.chain import HeadDrafters
        from spec_adapters.eagle.shipped import load_shipped

        heads = load_shipped(shipped_heads_folder(model, tok), model)
        group = HeadDrafters(list(heads.values()), model, names=[f"eagle-{n}" for n in heads])
        drafters += group.members
        names += [m.name for m in group.members]
        target = target.reading(group.feature_layers)
    sampling = SamplingConfig(args.temperature, args.top_p)
    sums = {n: np.zeros(3) for n in names}
    counts = dict.fromkeys(names, 0)
    prompts = [text for dom in domains.values() for text in dom.prompts[:args.per_domain]]
    for i, text in enumerate(tqdm(prompts, desc="prompts")):
        ids = chat_ids(tok, text)
        torch.manual_seed(i)
        seq = model.generate(ids.view(1, -1), do_sample=True, temperature=args.temperature,
                             top_p=args.top_p, top_k=0, max_new_tokens=args.max_new_tokens,
                             pad_token_id=0)[0]
        new = seq[ids.numel():]
        prompt_feats = target.prefill(ids)  # as the decoder's prefill and one verification
        if args.heads:
            logits, feats = target.verify_features(ids[-1:], new)
        else:
            logits, feats = target.verify(ids[-1:], new), None
        p_rows = sampling.probs(logits[:len(new)])
        for name, d in zip(names, drafters, strict=True):
            if getattr(d, "feature_layers", None) is None:
                d.start(ids)
                rows = d.extend(new)
            else:  # a head reads the target's features of the verified tokens
                d.start(ids, prompt_feats)
                rows = d.extend(new, feats[:len(new)])
            q_rows = warp(rows, sampling).dense()
            for j in range(len(new)):
                if q_rows[j].sum() > 0:  # abstaining positions draft nothing
                    sums[name] += position_acceptance(p_rows[j], q_rows[j])
                    counts[name] += 1
    return {"settings": {k: str(v) for k, v in vars(args).items()},
            "prompts": len(prompts),
            "drafters": {n: {"positions": counts[n],
                             **dict(zip(("argmax", "race", "min"),
                                        (sums[n] / max(counts[n], 1)).tolist(), strict=True))}
                         for n in names}}


def main() -> None:
    from spec_adapters.app.args import float_arg, int_arg
    from spec_adapters.app.cli.common import add_pool_options, add_target_options

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_target_options(ap)
    add_pool_options(ap)
    ap.add_argument("--per-domain", type=int_arg(1), default=1,
                    help="held-out prompts per domain")
    ap.add_argument("--max-new-tokens", type=int_arg(1), default=96)
    ap.add_argument("--temperature", type=float_arg(0.0, lo_open=True), default=0.7,
                    help="> 0: greedy keeps every coupling's draft alike")
    ap.add_argument("--top-p", type=float_arg(0.0, 1.0, lo_open=True), default=0.9)
    ap.add_argument("--heads", action="store_true", help="also the shipped EAGLE heads")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = measure(args)
    print(f"{result['prompts']} held-out prompts, T = {args.temperature}, top-p {args.top_p}: "
          "the mean per position of the probability a draft is kept")
    print("| drafter | positions | argmax, p(argmax q) | race | drawn from q, sum min(p, q) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in result["drafters"].items():
        print(f"| {name} | {r['positions']} | {r['argmax']:.3f} | {r['race']:.3f} | "
              f"{r['min']:.3f} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
