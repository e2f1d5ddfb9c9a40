"""What the pool's drafters are worth together: one, their consensus, a tree of their drafts.

A seeded request is verified by the coupled rule and a greedy one by the argmax, so the
tokens a round keeps are the longest prefix of its draft that equals the target's own answer
for that seed: a decode can be replayed exactly from the answer alone, without the target.
This replays, on the target's answers to held-out prompts (the llama.cpp engine's plain
loop, the shipped GGUF), a decode with ``K``-token rounds for each way of drafting:

- every drafter of the point pool alone (prompt lookup, suffix, the n-gram specialists),
  and follow-the-leader over them (the drafter with the most accepted tokens so far, every
  drafter scored every round: the full information HedgeSpec learns from);
- their consensus (:class:`spec_adapters.drafters.point.Consensus`): the majority path of
  all drafts of the round, one chain, as many rows as one drafter's;
- the tree of all drafts cut to its ``B`` most shared nodes (``B`` = 4, 8), verified in one
  pass with a tree mask (what only a tree-capable engine can verify; reported for scale).

Printed per temperature: mean tokens per round (MAT, the bonus token included) and target
rows per round, and at every position of the answers how often the target's next token is
among all the drafts' first tokens against the best drafter's first token alone (what the
pool knows beyond its best member):

    .venv/bin/python benchmarks/pool_votes.py [--per-domain 5] [--max-new-tokens 128] \
        [--k 4] [--temperatures 0,0.7] [--json results/pool-votes.json]

Needs the cached pool (``make demo``). docs/benchmark.md ("The consensus drafter") quotes it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

TREE_BUDGETS = (4, 8)


def kept(draft: np.ndarray, answer: list[int]) -> int:
    """Drafted tokens a round keeps: the longest prefix of ``draft`` equal to ``answer``."""
    n = 0
    while n < min(len(draft), len(answer)) and draft[n] == answer[n]:
        n += 1
    return n


def tree_kept(table: np.ndarray, answer: list[int], budget: int) -> tuple[int, int]:
    """``(kept, nodes)`` for the tree of the draft ``table`` ``(N, K)`` cut to its
    ``budget`` nodes shared by the most drafts (ties: the shallower first; a node's count is
    never below its child's, so the cut keeps every kept node's ancestors)."""
    share: dict[tuple[int, ...], int] = {}
    for row in table:
        for j in range(len(row)):
            if row[j] < 0:
                break
            key = tuple(int(t) for t in row[:j + 1])
            share[key] = share.get(key, 0) + 1
    nodes = set(sorted(share, key=lambda node: (-share[node], len(node)))[:budget])
    n = 0
    while n < len(answer) and tuple(answer[:n + 1]) in nodes:
        n += 1
    return n, len(nodes)


def replay(starts: list[int], answers: list[list[int]], tables: list[dict[int, np.ndarray]],
           names: list[str], k: int) -> dict[str, dict]:
    """Every way of drafting's decode over the answers (``answers[q]``: prompt + answer,
    ``tables[q][s]``: the members' and the consensus's drafts after ``s`` tokens)."""
    from spec_adapters.drafters.point import Consensus

    n = len(names)
    ways = [*names, "follow-the-leader", "consensus", *(f"tree-{b}" for b in TREE_BUDGETS)]
    out = {}
    for way in ways:
        scores = np.zeros(n)  # every drafter's accepted tokens so far (full information)
        tokens = rounds = rows = 0
        for start, seq, table in zip(starts, answers, tables, strict=True):
            s = start
            while s < len(seq):
                drafts, answer = table[s], seq[s:s + k]
                if way.startswith("tree-"):
                    got, nodes = tree_kept(drafts, answer, int(way[5:]))
                else:
                    i = (int(np.argmax(scores)) if way == "follow-the-leader"
                         else names.index(way) if way in names else None)
                    d = Consensus.vote(drafts).tokens if i is None else drafts[i]
                    d = d[d >= 0]
                    got, nodes = kept(d, answer), len(d)
                scores += [kept(row[row >= 0], answer) for row in drafts]
                step = min(got + 1, len(seq) - s)
                tokens, rounds, rows, s = tokens + step, rounds + 1, rows + 1 + nodes, s + step
        out[way] = {"mat": tokens / rounds, "rows_per_round": rows / rounds}
    return out


def first_token_hits(answers: list[list[int]], tables: list[dict[int, np.ndarray]]
                     ) -> tuple[float, float]:
    """Over every position ``s`` of the answers: the share where the next token is some
    draft's first token, and the best single drafter's share where its first token is."""
    hits, any_hit, n = 0, 0, 0
    for seq, table in zip(answers, tables, strict=True):
        for s, drafts in table.items():
            right = drafts[:, 0] == seq[s]
            hits, any_hit, n = hits + right, any_hit + bool(right.any()), n + 1
    return any_hit / n, float(np.max(hits)) / n


def measure(args: argparse.Namespace) -> dict:
    from tqdm import tqdm

    from spec_adapters.app.bench.run import mixed_stream
    from spec_adapters.app.cli.common import target_and_domains
    from spec_adapters.app.domains import chat_ids
    from spec_adapters.app.pool.point_pool import point_pool
    from spec_adapters.drafters.point import propose_all
    from spec_adapters.hf.models import find_default_gguf
    from spec_adapters.llamacpp import GGUFTarget, plain_generate
    from spec_adapters.store.target_pool import loaded_target_id

    model, tok, domains = target_and_domains(args)
    folder = Path(args.cache_dir) / "pool" / loaded_target_id(model, tok)
    target = GGUFTarget(find_default_gguf())
    prompts = [chat_ids(tok, q.prompt).tolist()
               for q in mixed_stream(domains, args.per_domain, 0)]
    result = {"settings": {k: str(v) for k, v in vars(args).items()}, "prompts": len(prompts),
              "temperatures": {}}
    for temp in args.temperatures:
        pool = point_pool(folder, target.vocab_size, consensus=False)
        starts, answers, tables = [], [], []
        for q, ids in enumerate(tqdm(prompts, desc=f"T = {temp}")):
            target.reset()
            seq = ids + plain_generate(target, ids, args.max_new_tokens, temperature=temp,
                                       top_p=args.top_p, seed=q)
            tables.append({s: propose_all(pool, np.asarray(seq[:s], np.int64), args.k)[0]
                           for s in range(len(ids), len(seq))})
            starts.append(len(ids))
            answers.append(seq)
            for d in pool:  # the suffix drafter remembers the stream's finished requests
                if hasattr(d, "commit"):
                    d.commit(np.asarray(seq, np.int64))
        any_first, best_first = first_token_hits(answers, tables)
        result["temperatures"][str(temp)] = {
            "ways": replay(starts, answers, tables, [d.name for d in pool], args.k),
            "first_token": {"any_draft": any_first, "best_drafter": best_first}}
    target.close()
    return result


def main() -> None:
    from spec_adapters.app.args import float_arg, floats_arg, int_arg
    from spec_adapters.app.cli.common import add_target_options

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_target_options(ap)
    ap.add_argument("--per-domain", type=int_arg(1), default=5)
    ap.add_argument("--max-new-tokens", type=int_arg(1), default=128)
    ap.add_argument("--k", type=int_arg(1), default=4)
    ap.add_argument("--temperatures", type=floats_arg(0.0), default=(0.0, 0.7),
                    help="comma-separated; 0: greedy")
    ap.add_argument("--top-p", type=float_arg(0.0, 1.0, lo_open=True), default=0.9)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = measure(args)
    for temp, r in result["temperatures"].items():
        first = r["first_token"]
        print(f"\nT = {temp}, {result['prompts']} held-out prompts, K = {args.k}; the next "
              f"token is some draft's first token at {first['any_draft']:.3f} of the "
              f"positions, the best drafter's at {first['best_drafter']:.3f}")
        print("| drafting | MAT | target rows a round |")
        print("|---|---:|---:|")
        for way, w in r["ways"].items():
            print(f"| {way} | {w['mat']:.3f} | {w['rows_per_round']:.2f} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
