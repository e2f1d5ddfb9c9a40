"""The specialist matrix (the paper's Table 1 on this target): head x domain MAT, greedy chain
and tree.

Every head in ``--heads`` (``general/`` and one folder per domain, as ``make heads`` trains
them; or ``--shipped``: the int8 heads ``hedgespec ship-heads`` wrote) is replayed on the
target's own greedy answers to the held-out benchmark prompts (``hedgespec cache-features
--set heldout``) with :func:`spec_adapters.eagle.acceptance.chain_mat`: greedy chain
speculation of depth ``--k``, and with :func:`~spec_adapters.eagle.acceptance.tree_mat`: the
EAGLE-2 tree ``spec_adapters.eagle.HedgeSpecDecoder`` drafts by default (depth ``--k``,
``--top-k`` children, ``--total-tokens`` nodes); no target call (the answers and the
verification features are cached). Prints both MAT matrices (rows: heads, columns: held-out
domains, pooled over each domain's answers), each specialist's diagonal against the
generalist in its domain, the
teacher-forced top-1 agreement and the draft vocabulary's coverage of the held-out answer
tokens; writes everything to ``--out`` (JSON).

    .venv/bin/python benchmarks/eagle_heads.py --heads results/heads \
        --heldout results/heads/features-heldout --k 4 --out results/heads/matrix.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from spec_adapters.app.args import OneLineParser, int_arg
from spec_adapters.app.heads import shipped_heads_folder
from spec_adapters.eagle import EagleHead
from spec_adapters.eagle.acceptance import chain_mat, pooled_mat, tree_mat
from spec_adapters.eagle.features import load_features
from spec_adapters.eagle.lowrank import lowrank_specialists
from spec_adapters.eagle.shipped import load_shipped
from spec_adapters.eagle.train import evaluate_head
from spec_adapters.eagle.tree import TreeConfig
from spec_adapters.hf.models import load_target


def main(argv=None) -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model folder or .gguf (default SmolLM2-135M)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--heads", help="folder of trained head folders (general, <domain>)")
    src.add_argument("--shipped", nargs="?", const="", metavar="DIR",
                     help="a shipped heads folder (hedgespec ship-heads: int8, manifest); "
                          "no DIR: the repository's, data/heads/<target-id>")
    ap.add_argument("--heldout", required=True, help="cache-features --set heldout folder")
    ap.add_argument("--k", type=int_arg(1), default=4, help="chain and tree depth (default 4)")
    ap.add_argument("--top-k", type=int_arg(1), default=TreeConfig.top_k,
                    help=f"tree: children per node (default {TreeConfig.top_k})")
    ap.add_argument("--total-tokens", type=int_arg(1), default=TreeConfig.total_tokens,
                    help=f"tree: draft nodes kept (default {TreeConfig.total_tokens})")
    ap.add_argument("--max-tokens", type=int_arg(1), default=None,
                    help="answer tokens replayed per prompt (default: all)")
    ap.add_argument("--head-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="the heads' weights and arithmetic (default float32)")
    ap.add_argument("--delta-rank", type=int_arg(0), default=0,
                    help="the specialists as rank-R deltas of the generalist "
                         "(spec_adapters.eagle.lowrank; default 0: as they are)")
    ap.add_argument("--threads", type=int_arg(1), default=2)
    ap.add_argument("--out", default="results/heads/matrix.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        tree = TreeConfig(args.k, args.top_k, args.total_tokens)
        model, tok = load_target(args.target)
        held = load_features(args.heldout, model)
        if args.shipped is not None:
            heads = load_shipped(args.shipped or shipped_heads_folder(model, tok), model)
        else:
            folders = sorted(p for p in Path(args.heads).iterdir()
                             if (p / "eagle_config.json").is_file())
            heads = {p.name: EagleHead.from_pretrained(p, target=model) for p in folders}
        if args.delta_rank:  # factored in float32, then cast
            heads = lowrank_specialists(heads, "general", args.delta_rank)
        heads = {n: h.to(getattr(torch, args.head_dtype)) for n, h in heads.items()}
    except (ValueError, OSError) as err:
        ap.error(" ".join(str(err).split()))
    if "general" not in heads:
        ap.error(f"{args.heads or args.shipped} has no general head")
    domains = list(dict.fromkeys(held.labels))
    answer_ids = {d: held.domain(d).trained_ids() for d in domains}
    matrices: dict[str, dict] = {"chain": {}, "tree": {}}
    rows = {}
    for name, head in heads.items():
        t = time.perf_counter()
        per_doc = {"chain": chain_mat(head, held, args.k, args.max_tokens),
                   "tree": tree_mat(head, held, tree, args.max_tokens)}
        for kind, docs in per_doc.items():
            matrices[kind][name] = {d: pooled_mat([r for r in docs if r["label"] == d])
                                    for d in domains} | {"mixed": pooled_mat(docs)}
        vocab = set(head.d2t.tolist())
        rows[name] = {
            "top1": evaluate_head(head, model, held, seq_len=10**6, max_tokens=10**9)["top1"],
            "coverage": {d: float(np.isin(answer_ids[d], list(vocab)).mean()) for d in domains},
            "draft_vocab": len(vocab), "seconds": time.perf_counter() - t, "docs": per_doc}
        print(f"{name:10s} mixed MAT chain {matrices['chain'][name]['mixed']:.2f} tree "
              f"{matrices['tree'][name]['mixed']:.2f}  top1 {rows[name]['top1']:.3f}"
              f"  ({rows[name]['seconds']:.0f} s)", flush=True)
    cols = [*domains, "mixed"]
    diag = {}
    for kind, matrix in matrices.items():
        shape = f"chain K = {args.k}" if kind == "chain" else \
            f"tree depth {tree.depth}, top-{tree.top_k}, {tree.total_tokens} nodes"
        print(f"\n| head ({shape}, greedy) | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for name in ["general", *sorted(h for h in heads if h != "general")]:
            print(f"| {name} | " + " | ".join(f"{matrix[name][c]:.2f}" for c in cols) + " |")
        diag[kind] = {d: matrix[d][d] / matrix["general"][d] for d in domains if d in heads}
        print(f"\nspecialist / generalist in its own domain ({kind}): "
              + ", ".join(f"{d} {x:.2f}x" for d, x in diag[kind].items())
              + f"  ({sum(x >= 1.15 for x in diag[kind].values())} of {len(diag[kind])} at "
                ">= 1.15x)")
    cov = rows["general"]["coverage"]
    print("generalist vocabulary coverage of held-out answer tokens: "
          + ", ".join(f"{d} {x:.1%}" for d, x in cov.items()))
    step = _step_costs(model, heads["general"], held)
    print(f"one draft step of a head {step['head_ms']:.2f} ms, one target decode step "
          f"{step['target_ms']:.2f} ms (ratio {step['target_ms'] / step['head_ms']:.0f}x; "
          f"the paper on a GPU: 2.5 ms vs 75.7 ms, 30x), {step['context']} tokens of context")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "matrix": matrices["chain"],
                                          "tree_matrix": matrices["tree"],
                                          "diagonal_over_general": diag, "step_costs": step,
                                          "heads": rows},
                                         indent=1))


@torch.no_grad()
def _step_costs(model, head, held, reps: int = 50) -> dict:
    """Median wall time of one head draft step (one row, fed its own hidden, attending a cache
    of the first held-out document) and of one target decode step at the same context."""
    from spec_adapters.hf.target import crop_cache, forward_cached, new_cache

    batch = held.batch([0], 10**6)
    n = batch.ids.shape[1]
    _, fed, k, v = head(batch.features[:, :-1], head.embed(batch.ids[:, 1:]),
                        torch.arange(n - 1), fuse=True)
    tok = batch.ids[:, -1:]

    def head_step():
        head(fed[:, -1:], head.embed(tok), torch.tensor([n - 1]), k, v)

    cache = new_cache(model)
    forward_cached(model, batch.ids[0, :-1], cache)

    def target_step():
        forward_cached(model, batch.ids[0, -1:], cache)
        crop_cache(cache, n - 1)

    out = {"context": n}
    for name, fn in (("head_ms", head_step), ("target_ms", target_step)):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        out[name] = 1000 * float(np.median(times))
    return out


if __name__ == "__main__":
    main()
