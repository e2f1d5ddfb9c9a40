"""What bounds the heads' acceptance: the generalist trained on fractions of the distilled
answers and with a wider MLP, each measured in-sample, on unseen training-side answers and on
the held-out benchmark answers.

A head that accepts little is short of data, of capacity, or trained on text unlike the
stream it serves. Each run here trains a generalist head from the cached features (teacher
forced, ``ttt_steps`` 1: a proxy for the shipped recipe, the same held-out top-1 in a fifth
of the time), on a stratified ``--fractions`` share of each domain's documents, the head's own
MLP width and, once on all the documents, ``--wide-intermediate``; then measures the top-1
agreement with the target's argmax (teacher forced) and the greedy chain MAT at K = 4
(:func:`~spec_adapters.eagle.acceptance.chain_mat`) on

- ``insample``: ``--per-domain`` documents of each domain it trained on (what it memorised),
- ``unseen``: ``--per-domain`` documents of each domain it did not train on, the same
  training-side prompts (how it generalises; none at fraction 1),
- ``heldout``: the target's answers to the benchmark prompts (what it serves).

``--shipped`` adds the shipped heads (the full recipe): the generalist on every domain and
each specialist on its own, in-sample against held-out. Resumable run by run
(``records.jsonl`` in ``--out``); prints a table and the held-out top-1 gained per doubling of
the documents (a least-squares slope on log2 of the trained tokens).

    .venv/bin/python benchmarks/eagle_scaling.py --features results/heads/features-train \
        --heldout results/heads/features-heldout --shipped --out results/heads/scaling  # ~35 min
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from spec_adapters.app.args import (
    OneLineParser,
    distinct_list,
    existing_arg,
    float_arg,
    int_arg,
)
from spec_adapters.app.bench.records import Records, check_settings
from spec_adapters.app.heads import shipped_heads_folder
from spec_adapters.eagle import EagleHead
from spec_adapters.eagle.acceptance import chain_mat, pooled_mat
from spec_adapters.eagle.features import FeatureSet, load_features
from spec_adapters.eagle.shipped import load_shipped
from spec_adapters.eagle.train import evaluate_head, train_head
from spec_adapters.eagle.train_config import TrainConfig

DRAFT_VOCAB = 4096  # the shipped heads' draft vocabulary


def split_documents(labels: list[str], fraction: float, per_domain: int, seed: int
                    ) -> tuple[list[int], list[int], list[int]]:
    """Stratified document split: ``(trained, insample, unseen)`` indices.

    ``trained``: the first ``round(fraction * n)`` (at least 1) of a seeded permutation of each
    domain's ``n`` documents; ``insample``: ``per_domain`` of each domain's trained documents;
    ``unseen``: ``per_domain`` of each domain's others (fewer where fewer are left). All sorted.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    rng = np.random.default_rng(seed)
    trained, insample, unseen = [], [], []
    for domain in dict.fromkeys(labels):
        docs = rng.permutation([i for i, x in enumerate(labels) if x == domain])
        cut = max(1, round(fraction * len(docs)))
        for part, out in ((docs[:cut], insample), (docs[cut:], unseen)):
            out += rng.choice(part, min(per_domain, len(part)), replace=False).tolist()
        trained += docs[:cut].tolist()
    return sorted(trained), sorted(insample), sorted(unseen)


def acceptance(head: EagleHead, target, data: FeatureSet) -> dict:
    """Teacher-forced top-1 and greedy chain MAT (K = 4) of ``head`` on ``data``."""
    return {"top1": evaluate_head(head, target, data, seq_len=10**6, max_tokens=10**9)["top1"],
            "chain_mat": pooled_mat(chain_mat(head, data, 4))}


def doubling_gain(runs: list[dict]) -> float | None:
    """Held-out top-1 gained per doubling of the trained tokens (least squares over the
    runs at one MLP width); None with fewer than two sizes."""
    x = np.log2([r["tokens"] for r in runs])
    if len(set(x)) < 2:
        return None
    return float(np.polyfit(x, [r["heldout"]["top1"] for r in runs], 1)[0])


def _own(data: FeatureSet, head_name: str) -> FeatureSet:
    """A shipped head's documents: all for the generalist, its domain's for a specialist."""
    return data if head_name == "general" else data.domain(head_name)


def _train(target, data: FeatureSet, steps: int, intermediate: int | None) -> EagleHead:
    cfg = TrainConfig(steps=steps, batch_size=8, seq_len=320, lr=1e-3, feature_weight=0,
                      ce_weight=1, ttt_steps=1, draft_vocab_size=DRAFT_VOCAB,
                      checkpoint_every=10**9, intermediate_size=intermediate)
    return train_head(target, data, None, cfg, progress=True, log=None)[0]


def main(argv=None) -> None:
    from spec_adapters.hf.models import load_target

    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model folder or .gguf (default SmolLM2-135M)")
    ap.add_argument("--features", type=existing_arg, required=True,
                    help="cache-features --set train folder")
    ap.add_argument("--heldout", type=existing_arg, required=True,
                    help="cache-features --set heldout folder")
    ap.add_argument("--fractions", type=distinct_list(float_arg(0, 1, lo_open=True)),
                    default=(0.25, 0.5, 1.0), help="shares of each domain's documents")
    ap.add_argument("--wide-intermediate", type=int_arg(0), default=4608,
                    help="one more run on all documents with this MLP width (0: none; the "
                         "head's own is the target's, 1,536 for SmolLM2-135M)")
    ap.add_argument("--steps", type=int_arg(1), default=800, help="training steps a run")
    ap.add_argument("--per-domain", type=int_arg(1), default=5,
                    help="in-sample and unseen documents measured per domain")
    ap.add_argument("--shipped", action="store_true",
                    help="also measure the shipped heads in-sample and held out")
    ap.add_argument("--seed", type=int_arg(0), default=0)
    ap.add_argument("--threads", type=int_arg(1), default=2)
    ap.add_argument("--out", default="results/heads/scaling", help="results folder")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    try:
        check_settings(out, {k: v for k, v in vars(args).items()
                             if k not in ("threads", "out", "shipped")})
        target, tok = load_target(args.target)
        train, held = load_features(args.features, target), load_features(args.heldout, target)
    except (ValueError, OSError) as err:  # SettingsMismatchError is a ValueError
        ap.error(" ".join(str(err).split()))
    records = Records(out / "records.jsonl")
    runs = [(f, None) for f in args.fractions]
    if args.wide_intermediate:
        runs.append((1.0, args.wide_intermediate))
    for fraction, wide in runs:
        name = f"docs {fraction:g}, MLP {wide or 'own'}"
        if records.has("generalist", name, 0.0, "teacher-forced", 0):
            continue
        trained, insample, unseen = split_documents(train.labels, fraction, args.per_domain,
                                                    args.seed)
        data, t = train.subset(trained), time.perf_counter()
        head = _train(target, data, args.steps, wide)
        records.add({"section": "generalist", "qid": name, "temperature": 0.0,
                     "method": "teacher-forced", "fraction": fraction,
                     "intermediate": head.config.intermediate_size,
                     "tokens": int(data.trained_ids().size),
                     "train_seconds": time.perf_counter() - t,
                     "insample": acceptance(head, target, train.subset(insample)),
                     "unseen": acceptance(head, target, train.subset(unseen)) if unseen else None,
                     "heldout": acceptance(head, target, held)})
    if args.shipped:
        insample = train.subset(split_documents(train.labels, 1.0, args.per_domain,
                                                args.seed)[1])
        for name, head in load_shipped(shipped_heads_folder(target, tok), target).items():
            if records.has("shipped", name, 0.0, "full recipe", 0):
                continue
            records.add({"section": "shipped", "qid": name, "temperature": 0.0,
                         "method": "full recipe", "fraction": 1.0,
                         "intermediate": head.config.intermediate_size,
                         "tokens": int(_own(train, name).trained_ids().size),
                         "insample": acceptance(head, target, _own(insample, name)),
                         "unseen": None, "heldout": acceptance(head, target, _own(held, name))})
    rows = sorted(records.rows.values(), key=lambda r: (r["section"], r["intermediate"],
                                                       r["fraction"], r["qid"]))
    print("\n| generalist | trained tokens | MLP | top-1 in-sample / unseen / held-out "
          "| chain MAT in-sample / unseen / held-out |\n|---|---|---|---|---|")
    for r in rows:
        cells = [r[s] for s in ("insample", "unseen", "heldout")]
        top1 = " / ".join("-" if c is None else f"{c['top1']:.3f}" for c in cells)
        mat = " / ".join("-" if c is None else f"{c['chain_mat']:.2f}" for c in cells)
        print(f"| {r['qid']} ({r['method']}) | {r['tokens']:,} | {r['intermediate']} | {top1} "
              f"| {mat} |")
    own = [r for r in rows if r["section"] == "generalist"
           and r["intermediate"] == min(x["intermediate"] for x in rows)]
    gain = doubling_gain(own)
    summary = {"runs": rows, "heldout_top1_per_doubling": gain}
    if gain is not None:
        print(f"held-out top-1 per doubling of the documents: {gain:+.4f}")
    (out / "scaling.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
