"""The target's features, computed once and stored, so that head training never runs the target.

An EAGLE head learns from three things per token of a document ``x_0 .. x_{S-1}``: the target's
feature layers ``f_t`` (its input), the target's last hidden state ``h^L_t`` (the regression
target of the head's output, and the source of the target's next-token distribution) and the
ids. :func:`cache_features` runs the frozen target over every document once (batched, no grad)
and writes, per shard of documents, a safetensors file::

    ids       (N,)        int32   the tokens of the shard's documents, concatenated
    features  (N, F*H)    float16 concat of output_hidden_states[i] for i in feature_layers
    last      (N, H)      float16 output_hidden_states[-1] (the normed last layer)
    offsets   (D+1,)      int64   document d is rows offsets[d] .. offsets[d+1]-1
    starts    (D,)        int64   first row of document d that is trained on (its answer)

Nothing vocabulary-sized is stored: the target's distribution on a draft vocabulary is
recomputed from ``last`` with the draft rows of the output layer (:func:`draft_probs`, one
``(N, H) x (H, Vd)`` matmul), which is exactly the target's logits on those rows for
Llama-family models (``lm_head(h^L)``, no soft-capping).

Resumable and atomic: ``features.json`` (the target's name and embedding fingerprint, the
feature layers, the number of documents, a hash of all their ids) is written first; every
shard is written to a temporary file and renamed; a run that is started again skips the
shards it has and refuses a folder made for other documents or another target. About 700
tokens/s for SmolLM2-135M on 2 CPU cores (docs/eagle.md); 4.6 kB per token at H = 576.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .head import default_feature_layers
from .target_info import embedding_fingerprint, target_name

__all__ = ["Document", "FeatureBatch", "FeatureSet", "cache_features", "draft_probs",
           "load_features", "target_features", "target_logits"]

MANIFEST = "features.json"
FORMAT = 1


@dataclass(frozen=True)
class Document:
    """One training sequence: ``ids`` (e.g. a chat-templated prompt and the target's answer)
    and ``start``, the first position whose *next* token is trained on (the answer's first
    token is predicted from position ``start - 1``; 0 trains on everything)."""

    ids: tuple[int, ...]
    start: int = 0
    label: str = ""


@dataclass
class FeatureBatch:
    """A right-padded batch: ``ids (B,S)``, ``features (B,S,F*H)``, ``last (B,S,H)`` float32,
    ``trained (B,S)`` bool: row ``t`` of a document is trained on when the token ``x_{t+1}``
    is real and at or past the document's start."""

    ids: torch.LongTensor
    features: torch.Tensor
    last: torch.Tensor
    trained: torch.Tensor


@torch.no_grad()
def target_features(target, ids: torch.LongTensor, feature_layers: Sequence[int],
                    attention_mask: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One target pass over ``ids (B,S)``: ``(features (B,S,F*H), last (B,S,H))``, float32.

    The base model only (no output layer): the distribution is recomputed from ``last``."""
    out = target.base_model(input_ids=ids, attention_mask=attention_mask,
                            output_hidden_states=True, use_cache=False)
    hs = out.hidden_states
    return torch.cat([hs[i] for i in feature_layers], -1).float(), hs[-1].float()


def target_logits(target, last: torch.Tensor, rows: torch.LongTensor | None = None
                  ) -> torch.Tensor:
    """The target's logits (float32) from its last hidden state: its output layer, or only the
    vocabulary ``rows`` of it (``lm_head(h^L)``; Llama-family, no soft-capping)."""
    lm = target.get_output_embeddings()
    w, b = lm.weight, getattr(lm, "bias", None)
    if rows is not None:
        w, b = w[rows], None if b is None else b[rows]
    return torch.nn.functional.linear(last.to(w.dtype), w, b).float()


def draft_probs(target, last: torch.Tensor, d2t: torch.LongTensor,
                full_vocab: bool = False) -> torch.Tensor:
    """The target's next-token distribution on the draft vocabulary, from its last hidden state.

    ``full_vocab=False``: ``softmax(W[d2t] h)`` (renormalised on the draft rows, the cheap
    default); ``True``: ``softmax(W h)[d2t]`` (the full-vocabulary softmax restricted, sums to
    the draft vocabulary's mass). ``W`` is the target's output layer."""
    if full_vocab:
        return torch.softmax(target_logits(target, last), -1)[..., d2t]
    return torch.softmax(target_logits(target, last, d2t), -1)


class FeatureSet:
    """Cached features in memory (float16), drawn from as padded batches of whole documents."""

    def __init__(self, ids: np.ndarray, features: np.ndarray, last: np.ndarray,
                 offsets: np.ndarray, starts: np.ndarray, labels: list[str], meta: dict):
        self.ids, self.features, self.last = ids, features, last
        self.offsets, self.starts, self.labels, self.meta = offsets, starts, labels, meta
        self._by_length = np.argsort(np.diff(offsets), kind="stable")

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])

    def trained_ids(self) -> np.ndarray:
        """The tokens trained on (each document from its start): what a draft vocabulary is
        counted on."""
        return np.concatenate([self.ids[int(self.offsets[d]) + int(self.starts[d]):
                                        int(self.offsets[d + 1])] for d in range(len(self))])

    def subset(self, keep: Sequence[int]) -> FeatureSet:
        """The documents ``keep`` (indices), e.g. one domain's."""
        keep = list(keep)
        rows = [np.arange(self.offsets[d], self.offsets[d + 1]) for d in keep]
        rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        lens = np.diff(self.offsets)[keep]
        return FeatureSet(self.ids[rows], self.features[rows], self.last[rows],
                          np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                          self.starts[keep], [self.labels[d] for d in keep], self.meta)

    def domain(self, label: str) -> FeatureSet:
        return self.subset([d for d, x in enumerate(self.labels) if x == label])

    def sample(self, batch_size: int, max_len: int, gen: torch.Generator) -> FeatureBatch:
        """``batch_size`` documents of similar length (little padding): consecutive ones in
        the order by length, from a uniform random place, wrapping round, so that every
        document is drawn equally often."""
        p = int(torch.randint(0, len(self), (1,), generator=gen))
        return self.batch([int(self._by_length[(p + i) % len(self)]) for i in range(batch_size)],
                          max_len)

    def batch(self, docs: Sequence[int], max_len: int) -> FeatureBatch:
        """Documents ``docs`` cut to their first ``max_len`` tokens, right-padded."""
        lens = [min(int(self.offsets[d + 1] - self.offsets[d]), max_len) for d in docs]
        B, S = len(docs), max(lens)
        F, H = self.features.shape[1], self.last.shape[1]
        ids = torch.zeros(B, S, dtype=torch.long)
        feats, last = torch.zeros(B, S, F), torch.zeros(B, S, H)
        trained = torch.zeros(B, S, dtype=torch.bool)
        for b, (d, n) in enumerate(zip(docs, lens, strict=True)):
            a = int(self.offsets[d])
            ids[b, :n] = torch.from_numpy(self.ids[a:a + n].astype(np.int64))
            feats[b, :n] = torch.from_numpy(self.features[a:a + n].astype(np.float32))
            last[b, :n] = torch.from_numpy(self.last[a:a + n].astype(np.float32))
            trained[b, max(int(self.starts[d]) - 1, 0):n - 1] = True
        return FeatureBatch(ids, feats, last, trained)


def _docs_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(np.asarray(d.ids, dtype=np.int64).tobytes())
        h.update(f"|{d.start}|{d.label}\n".encode())
    return h.hexdigest()[:16]


def _settings(target, docs, feature_layers) -> dict:
    return {"format": FORMAT, "target": target_name(target),
            "target_fingerprint": embedding_fingerprint(target),
            "feature_layers": list(feature_layers), "documents": len(docs),
            "documents_sha": _docs_hash(docs)}


def cache_features(target, docs: Sequence[Document], out_dir: str | os.PathLike,
                   feature_layers: Sequence[int] | None = None, shard_docs: int = 64,
                   batch_tokens: int = 2048, progress: bool = True) -> Path:
    """Run ``target`` once over ``docs`` and store its features in ``out_dir`` (resumable).

    Parameters
    ----------
    target : transformers causal LM (Llama family), eval mode.
    docs : the documents, in a fixed order (shard ``i`` holds ``docs[i*shard_docs:...]``).
    feature_layers : indices into ``output_hidden_states``; default EAGLE-3's.
    shard_docs : documents per shard file (the unit of resumption).
    batch_tokens : documents of similar length are batched up to this many padded tokens.

    Returns
    -------
    Path : ``out_dir``.

    Raises
    ------
    ValueError
        No documents, an empty document, a start outside it, ids outside the vocabulary; a
        folder holding features of other documents, layers or another target (named).
    """
    from safetensors.numpy import save_file

    layers = tuple(feature_layers or default_feature_layers(target.config.num_hidden_layers))
    V = target.get_input_embeddings().weight.shape[0]
    if not docs:
        raise ValueError("cache_features: no documents")
    for i, d in enumerate(docs):
        if not d.ids or not 0 <= d.start < len(d.ids) or min(d.ids) < 0 or max(d.ids) >= V:
            raise ValueError(f"cache_features: document {i} is empty, has start {d.start} "
                             f"outside its {len(d.ids)} tokens, or ids outside [0, {V})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    want = _settings(target, docs, layers) | {"shard_docs": shard_docs}
    manifest = out / MANIFEST
    if manifest.is_file():
        have = json.loads(manifest.read_text())
        diff = sorted(k for k in want if have.get(k) != want[k])
        if diff:
            raise ValueError(f"{out} holds features of other settings ({', '.join(diff)}); "
                             "use another folder or remove it")
    else:
        tmp = manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps(want, indent=1))
        tmp.replace(manifest)
    shards = [docs[i:i + shard_docs] for i in range(0, len(docs), shard_docs)]
    todo = [i for i in range(len(shards)) if not (out / f"shard-{i:05d}.safetensors").is_file()]
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=sum(len(x.ids) for x in docs), unit="tok", desc="target features")
        bar.update(sum(len(x.ids) for i, s in enumerate(shards) if i not in todo for x in s))
    target.eval()
    for i in todo:
        arrays = _shard_arrays(target, shards[i], layers, batch_tokens, bar)
        path = out / f"shard-{i:05d}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(arrays, str(tmp), metadata={"labels": json.dumps([d.label for d in shards[i]])})
        tmp.replace(path)
    if bar is not None:
        bar.close()
    return out


def _shard_arrays(target, docs, layers, batch_tokens, bar) -> dict[str, np.ndarray]:
    order = sorted(range(len(docs)), key=lambda j: len(docs[j].ids))
    feats: list = [None] * len(docs)
    lasts: list = [None] * len(docs)
    i = 0
    while i < len(order):  # documents of similar length together, right-padded
        group = [order[i]]
        while (i + len(group) < len(order)
               and len(docs[order[i + len(group)]].ids) * (len(group) + 1) <= batch_tokens):
            group.append(order[i + len(group)])
        S = max(len(docs[j].ids) for j in group)
        ids = torch.zeros(len(group), S, dtype=torch.long)
        mask = torch.zeros(len(group), S, dtype=torch.long)
        for b, j in enumerate(group):
            ids[b, :len(docs[j].ids)] = torch.tensor(docs[j].ids)
            mask[b, :len(docs[j].ids)] = 1
        f, h = target_features(target, ids, layers, attention_mask=mask)
        for b, j in enumerate(group):
            n = len(docs[j].ids)
            feats[j], lasts[j] = f[b, :n].half().numpy(), h[b, :n].half().numpy()
            if not (np.isfinite(feats[j]).all() and np.isfinite(lasts[j]).all()):
                raise ValueError(f"document {j} of a shard has features outside float16's range")
        if bar is not None:
            bar.update(sum(len(docs[j].ids) for j in group))
        i += len(group)
    lens = [len(d.ids) for d in docs]
    return {"ids": np.concatenate([np.asarray(d.ids, np.int32) for d in docs]),
            "features": np.concatenate(feats), "last": np.concatenate(lasts),
            "offsets": np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
            "starts": np.array([d.start for d in docs], np.int64)}


def load_features(folder: str | os.PathLike, target=None) -> FeatureSet:
    """Read a complete feature folder; with ``target``, check it was made by that target.

    Raises
    ------
    ValueError
        Not a feature folder, incomplete (shards missing: run :func:`cache_features` again to
        finish it), or made by another target (name and fingerprint named).
    """
    from safetensors import safe_open

    folder = Path(folder)
    try:
        meta = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        raise ValueError(f"{folder} is not a feature folder (no readable {MANIFEST})") from None
    if target is not None and meta["target_fingerprint"] != embedding_fingerprint(target):
        raise ValueError(f"{folder} holds features of target {meta['target']} "
                         f"(fingerprint {meta['target_fingerprint']}), not of "
                         f"{target_name(target)} ({embedding_fingerprint(target)})")
    n_shards = -(-meta["documents"] // meta["shard_docs"])
    paths = [folder / f"shard-{i:05d}.safetensors" for i in range(n_shards)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"{folder} is incomplete ({len(missing)} of {n_shards} shards "
                         "missing); run the feature pass again to finish it")
    parts: dict[str, list] = {k: [] for k in ("ids", "features", "last", "lengths", "starts")}
    labels: list[str] = []
    for p in paths:
        with safe_open(str(p), "np") as f:
            for k in ("ids", "features", "last", "starts"):
                parts[k].append(f.get_tensor(k))
            parts["lengths"].append(np.diff(f.get_tensor("offsets")))
            labels += json.loads(f.metadata()["labels"])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(parts["lengths"]))]).astype(np.int64)
    return FeatureSet(np.concatenate(parts["ids"]), np.concatenate(parts["features"]),
                      np.concatenate(parts["last"]), offsets, np.concatenate(parts["starts"]),
                      labels, meta)
