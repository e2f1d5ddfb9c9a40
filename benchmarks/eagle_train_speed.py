"""Head training throughput: the target run every step (before) against cached features (after).

Same head, same TrainConfig, same documents' tokens: ``--steps`` steps of :func:`train_head` on
the flat token stream of the cached documents (windows of ``--seq-len``, the target's forward
in every step) and on the cache itself (documents cut to ``--seq-len``, no target forward).
Prints trained tokens per second of each (steps after the first, which pays one-off costs).

    .venv/bin/python benchmarks/eagle_train_speed.py --features results/heads/features-train
"""

from __future__ import annotations

import json

import torch

from spec_adapters.app.args import OneLineParser, int_arg
from spec_adapters.eagle.features import load_features
from spec_adapters.eagle.train import TrainConfig, train_head
from spec_adapters.hf.models import load_target


def main(argv=None) -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", required=True, help="a cache-features folder")
    ap.add_argument("--steps", type=int_arg(2), default=6)
    ap.add_argument("--batch-size", type=int_arg(1), default=8)
    ap.add_argument("--seq-len", type=int_arg(2), default=320)
    ap.add_argument("--draft-vocab-size", type=int_arg(1), default=4096)
    ap.add_argument("--threads", type=int_arg(1), default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, _tok = load_target()
    fs = load_features(args.features, model)
    out = {}
    for ttt in (1, 3):
        cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                          draft_vocab_size=args.draft_vocab_size, ttt_steps=ttt,
                          eval_every=10**9)
        for name, data in (("target every step", torch.from_numpy(fs.ids.astype("int64"))),
                           ("cached features", fs)):
            _, hist = train_head(model, data, None, cfg, progress=False, log=None)
            rows = hist[1:]
            rate = sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows)
            out[f"{name}, ttt {ttt}"] = rate
            print(f"{name:18s} ttt_steps={ttt}: {rate:7.0f} trained tok/s "
                  f"({sum(r['seconds'] for r in rows) / len(rows):.2f} s/step)", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
