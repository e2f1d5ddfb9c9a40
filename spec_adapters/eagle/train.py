r"""Train an EAGLE head for a target (distillation, EAGLE-3's training-time test, optional
feature regression).

Two sources of batches, one trainer:

- a :class:`~.features.FeatureSet` (``hedgespec cache-features``): documents of similar length
  (prompt + the target's answer, trained on the answer) with the target's features and last
  hidden state read from the cache; the target is never run (3.3x the trained tokens per
  second of the next source on 2 CPU cores, docs/eagle.md);
- a flat token corpus: random windows of ``seq_len``, the frozen target run on each batch.

The head reads the pairs ``(f_t, e(x_{t+1}))`` (teacher forcing, causal attention) and, for
``ttt_steps > 1``, is unrolled on its own outputs as it drafts (:func:`unrolled_logits`,
EAGLE-3's training-time test). The loss (:func:`head_loss`) is

.. math:: L = w_f \,\mathrm{SmoothL1}(z_t, h^{L}_{t+1})
          + w_c \sum_{j<J} 0.8^{j}\,\mathrm{CE}(p^{T}_{t+1}|_{V_d},\; q^{(j)}_t),

the regression of the step-0 output hidden onto the target's last hidden state at ``t+1``
(EAGLE-1; EAGLE-3 drops it: ``w_f = 0``) and the cross-entropy of every unrolled step's
draft-vocabulary distribution against the target's distribution on the draft vocabulary,
recomputed from its last hidden state (:func:`~.features.draft_probs`: by default the softmax
over the draft-vocabulary logits only, renormalised; ``full_vocab_distill=True`` the
full-vocabulary softmax restricted to it); SpecForge's 0.8^j step weights. AdamW, gradient
clipping, a tqdm progress bar, a held-out report every ``eval_every`` steps (top-1 agreement
with the target's argmax = greedy gamma of a chain, and the target mass of the head's top-``k``
= Theorem 2's gamma at a tree root).

Resumable: every ``checkpoint_every`` steps and at the end ``out_dir`` receives the head
(``save_pretrained``) and ``trainer_state.pt`` (optimizer, step, data-sampler RNG, history);
calling :func:`train_head` again with the same ``out_dir`` continues from there, and the result
is bit-identical to an uninterrupted run (same seed). Deterministic for a given seed.

Cost per step: ``ttt_steps`` head forward/backward passes, plus one target forward (no grad)
when training from a corpus. See docs/eagle.md for measured step times.

Token files for :func:`train_head` are read by :func:`load_token_ids` (``.npy``,
``.safetensors`` or text; pickles are refused). The command line is ``hedgespec train-head``
(:func:`spec_adapters.app.cli.build.cmd_train_head`).
"""

from __future__ import annotations

import math
import os
import pickle
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as fn

from .features import FeatureBatch, FeatureSet, draft_probs, target_features, target_logits
from .head import EagleHead, EagleHeadConfig, build_draft_vocab
from .train_config import TrainConfig

__all__ = ["TrainConfig", "evaluate_head", "head_loss", "load_token_ids", "train_head",
           "unrolled_logits"]

STATE_NAME = "trainer_state.pt"
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin")


def _as_corpus(tokens) -> torch.LongTensor:
    return torch.as_tensor(tokens).reshape(-1).long()


def load_token_ids(path: str | os.PathLike) -> torch.LongTensor:
    """Read a token-id corpus from a file, without ever unpickling it.

    The format is chosen by the suffix:

    - ``.npy``: an integer numpy array, read with ``np.load(allow_pickle=False)`` (object
      arrays, which hold pickles, are refused);
    - ``.safetensors``: a file holding exactly one integer tensor;
    - anything else: UTF-8 text of whitespace-separated integers.

    Pickle-based files (``.pt``, ``.pth``, ``.pkl``, ``.pickle``, ``.bin``) are refused
    outright: unpickling a file runs whatever code it names (``torch.load`` included, once
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` is set). Save ids with ``numpy.save`` instead.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    torch.LongTensor
        The ids flattened to 1-D (row-major), int64.

    Raises
    ------
    ValueError
        A pickle suffix; a file that is not of its format; non-integer or negative ids; a
        ``.safetensors`` file with other than one tensor. The message names the file.
    OSError
        The file cannot be read (e.g. it does not exist).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        raise ValueError(f"{path}: {suffix} files are pickles, and reading one can run "
                         "arbitrary code; save the token ids with numpy.save (.npy), as "
                         ".safetensors or as a text file of integers")
    from safetensors import SafetensorError

    try:
        if suffix == ".npy":
            ids = np.load(path, allow_pickle=False)
        elif suffix == ".safetensors":
            from safetensors.numpy import load_file

            tensors = load_file(path)
            if len(tensors) != 1:
                raise ValueError(f"it holds {len(tensors)} tensors, not one")
            (ids,) = tensors.values()
        else:
            ids = np.array([int(w) for w in path.read_text(encoding="utf-8").split()],
                           dtype=np.int64)
    except (ValueError, SafetensorError) as err:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{path} is not a token-id file of its format ({suffix or 'text'}): "
                         f"{err}") from None
    if not isinstance(ids, np.ndarray):  # np.load of an .npz archive
        raise ValueError(f"{path} is not a token-id file of its format ({suffix}): an archive")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{path}: token ids must be integers, got dtype {ids.dtype}")
    ids = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64).reshape(-1))
    if ids.numel() and int(ids.min()) < 0:
        raise ValueError(f"{path}: token ids must be >= 0, found {int(ids.min())}")
    return ids


def _online_batch(target, corpus: torch.LongTensor, starts: list[int], seq_len: int,
                  layers) -> FeatureBatch:
    """Windows of a flat corpus with the target's features computed now (no cache)."""
    ids = torch.stack([corpus[s:s + seq_len] for s in starts])
    feats, last = target_features(target, ids.to(target.device), layers)
    trained = torch.ones(ids.shape, dtype=torch.bool)
    trained[:, -1] = False
    return FeatureBatch(ids, feats.cpu(), last.cpu(), trained)


def _windows(target, data, layers, seq_len: int, batch_size: int, gen: torch.Generator):
    """One training batch: random corpus windows (target run now) or cached documents."""
    if isinstance(data, FeatureSet):
        return data.sample(batch_size, seq_len, gen)
    starts = torch.randint(0, data.numel() - seq_len + 1, (batch_size,), generator=gen)
    return _online_batch(target, data, starts.tolist(), seq_len, layers)


def unrolled_logits(head: EagleHead, batch: FeatureBatch, steps: int) -> tuple[list, torch.Tensor]:
    """The head over a batch, unrolled ``steps`` times on its own outputs (EAGLE-3's
    training-time test).

    Step 0 is teacher forcing: row ``t`` reads ``(f_t, e(x_{t+1}))`` and predicts ``x_{t+2}``.
    Step ``j`` reads ``(z^{(j-1)}_{t-1}, e(x_{t+1}))``, the hidden the head produced one
    position earlier at step ``j-1``, and attends exactly what a draft node of depth ``j+1``
    attends when drafting: the step-0 keys at positions ``<= t - j`` (the committed cache)
    and its ancestors, the step-``i`` key at position ``t - j + i`` for ``i = 1 .. j``. Rows
    ``t < j`` have no such ancestry and are left out of the loss.

    Returns
    -------
    logits : list of ``steps`` tensors ``(B, S-1, Vd)``, step ``j``'s row ``t`` predicting
        ``x_{t+2}``.
    z : ``(B, S-1, H)`` the fed-back hidden of step 0 (the feature regression's output).
    """
    emb = head.embed(batch.ids[:, 1:].to(head.d2t.device))
    T = emb.shape[1]
    pos = torch.arange(T)
    logits, z, k, v = head(batch.features[:, :-1].to(emb.device), emb, pos, fuse=True)
    out, ks, vs, h = [logits], [k], [v], z
    rows, cols = pos[:, None], pos[None, :]
    for j in range(1, steps):
        h = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)
        mask = torch.cat([cols <= rows - j] + [cols == rows - j + i for i in range(1, j + 1)], 1)
        logits, h, k, v = head(h, emb, pos, torch.cat(ks, 2), torch.cat(vs, 2), mask)
        out.append(logits)
        ks.append(k)
        vs.append(v)
    return out, z


def head_loss(head: EagleHead, target, batch: FeatureBatch, cfg: TrainConfig):
    """The training loss of one batch and its two parts (floats).

    ``w_f SmoothL1(z, h^L_{t+1}) + w_c sum_j 0.8^j CE_j``: the feature regression of step 0
    and the cross-entropy of every unrolled step ``j`` (:func:`unrolled_logits`) against the
    target's draft-vocabulary distribution (:func:`~.features.draft_probs`, recomputed from
    the target's last hidden state), each averaged over the rows it trains."""
    trained = batch.trained[:, 1:].to(head.d2t.device)
    last = batch.last[:, 1:].to(head.d2t.device)
    p = draft_probs(target, last, head.d2t, cfg.full_vocab_distill)
    logits, z = unrolled_logits(head, batch, cfg.ttt_steps)
    w = trained.float()
    reg = (fn.smooth_l1_loss(z, last, reduction="none").mean(-1) * w).sum() / w.sum().clamp(min=1)
    ce = z.new_zeros(())
    for j, lg in enumerate(logits):
        wj = w.clone()
        wj[:, :j] = 0
        ce_rows = -(p * torch.log_softmax(lg, -1)).sum(-1)
        ce = ce + 0.8 ** j * (ce_rows * wj).sum() / wj.sum().clamp(min=1)
    loss = cfg.feature_weight * reg + cfg.ce_weight * ce
    return loss, float(reg.detach()), float(ce.detach())


@torch.no_grad()
def evaluate_head(head: EagleHead, target, heldout, seq_len: int = 128, max_tokens: int = 2048,
                  top_k: int = 8) -> dict:
    """Held-out acceptance of a head against its target, teacher-forced (depth 1).

    ``heldout``: token ids (windows of ``seq_len``, the target run now, up to ``max_tokens``)
    or a :class:`~.features.FeatureSet` (its documents, up to ``max_tokens`` trained rows).
    Returns ``{"top1": P(argmax head == argmax target), "gamma_topk": mean target mass of the
    head's top-k (Theorem 2 at a tree root, temperature 1), "tokens": n}``.
    """
    layers = head.config.feature_layers
    if isinstance(heldout, FeatureSet):
        batches = (heldout.batch([d], seq_len) for d in range(len(heldout)))
    else:
        tokens = _as_corpus(heldout)[:max_tokens]
        starts = range(0, max(1, tokens.numel() // seq_len) * seq_len, seq_len)
        batches = (_online_batch(target, tokens, [s], seq_len, layers) for s in starts
                   if tokens[s:s + seq_len].numel() >= 3)  # a head row needs 3 tokens
    hits = mass = count = 0.0
    for batch in batches:
        if count >= max_tokens:
            break
        rows = batch.trained[0, 1:]
        logits, _ = unrolled_logits(head, batch, 1)
        p = torch.softmax(target_logits(target, batch.last[0, 1:][rows]), -1)
        kids = head.d2t[torch.topk(logits[0][0][rows], min(top_k, logits[0].shape[-1]), -1).indices]
        hits += float((kids[:, 0] == p.argmax(-1)).sum())
        mass += float(p.gather(-1, kids).sum())
        count += p.shape[0]
    return {"top1": hits / max(count, 1), "gamma_topk": mass / max(count, 1),
            "tokens": int(count)}


def _lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def train_head(target, data, out_dir=None, config: TrainConfig | None = None, head=None,
               heldout=None, feature_layers=None, progress: bool = True, log=print,
               stop_after: int | None = None) -> tuple[EagleHead, list[dict]]:
    """Train (or resume training) an EAGLE head for ``target``.

    Parameters
    ----------
    target : transformers causal LM (frozen, eval mode).
    data : 1-D token ids (tensor or sequence, at least ``seq_len`` tokens: random windows,
        the target run on each batch), or a :class:`~.features.FeatureSet` (cached features:
        random documents cut to ``seq_len``; the target's output layer is the only part of it
        used, and the feature layers are the cache's).
    out_dir : path, optional
        Checkpoint directory; if it holds a checkpoint, training resumes from it.
    config : TrainConfig
    head : EagleHead, optional
        Start from this head (default: a new one, draft vocabulary = the corpus's most frequent
        ``draft_vocab_size`` tokens, output layer initialised from the target's).
    heldout : 1-D token ids or a FeatureSet, optional
        Held-out text for the periodic acceptance report (:func:`evaluate_head`).
    feature_layers : optional, default EAGLE-3's low/middle/high layers.
    stop_after : int, optional
        Stop (after checkpointing) once this step is reached: simulates an interruption.

    Returns
    -------
    head, history
        ``history``: one dict per logged step (``step``, ``loss``, ``reg``, ``ce``, ``lr``,
        ``seconds``, and on eval steps ``top1`` / ``gamma_topk``).
    """
    cfg = config or TrainConfig()
    target.eval()
    for prm in target.parameters():
        prm.requires_grad_(False)
    V = int(target.get_input_embeddings().weight.shape[0])
    if isinstance(data, FeatureSet):
        corpus = torch.from_numpy(data.trained_ids().astype(np.int64))
        feature_layers = tuple(data.meta["feature_layers"])
    else:
        corpus = data = _as_corpus(data)
        if corpus.numel() < cfg.seq_len:
            raise ValueError(f"corpus has {corpus.numel()} tokens, fewer than "
                             f"seq_len={cfg.seq_len}")
    if int(corpus.min()) < 0 or int(corpus.max()) >= V:
        raise ValueError(f"corpus has token ids outside the target's vocabulary [0, {V})")
    out = Path(out_dir) if out_dir is not None else None
    resume = out is not None and (out / STATE_NAME).is_file()
    state = _load_state(out / STATE_NAME) if resume else None
    torch.manual_seed(cfg.seed)
    if resume:
        head = EagleHead.from_pretrained(out, target=target)
    elif head is None:
        eos = getattr(target.config, "eos_token_id", None)
        always = tuple(e for e in ([eos] if isinstance(eos, int) else (eos or ())) if e < V)
        d2t = build_draft_vocab(corpus, V, min(cfg.draft_vocab_size, V), always=always)
        hcfg = EagleHeadConfig.for_target(target, len(d2t), feature_layers=feature_layers,
                                          intermediate_size=cfg.intermediate_size)
        head = EagleHead(hcfg, d2t=d2t).init_from_target(target)
    else:
        head.bind(target)
    if cfg.intermediate_size not in (None, head.config.intermediate_size):
        raise ValueError(f"TrainConfig.intermediate_size={cfg.intermediate_size}, but the head "
                         f"to continue has an MLP of {head.config.intermediate_size}")
    if feature_layers is not None and tuple(feature_layers) != head.config.feature_layers:
        raise ValueError(f"the features are of layers {tuple(feature_layers)}, the head reads "
                         f"{head.config.feature_layers}")
    device = next(target.parameters()).device
    head.to(device).train()
    for name, prm in head.named_parameters():
        prm.requires_grad_(not cfg.midlayer_only or head.in_midlayer(name))
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, history = 0, []
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["rng"])
        step, history = state["step"], state["history"]
    end = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=cfg.steps, initial=step, desc="train-head", unit="step")
    while step < end:
        t0 = time.perf_counter()
        batch = _windows(target, data, head.config.feature_layers, cfg.seq_len, cfg.batch_size,
                         gen)
        lr = _lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, reg, ce = head_loss(head, target, batch, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        step += 1
        rec = {"step": step, "loss": float(loss.detach()), "reg": reg, "ce": ce, "lr": lr,
               "seconds": time.perf_counter() - t0, "tokens": int(batch.trained.sum())}
        if heldout is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
            head.eval()
            rec.update(evaluate_head(head, target, heldout, cfg.seq_len, cfg.eval_tokens,
                                     cfg.eval_top_k))
            head.train()
            if log is not None:
                log(f"step {step}: loss {rec['loss']:.4f} held-out top1 {rec['top1']:.3f} "
                    f"gamma@{cfg.eval_top_k} {rec['gamma_topk']:.3f}")
        history.append(rec)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{rec['loss']:.3f}")
        if out is not None and (step % cfg.checkpoint_every == 0 or step == end):
            _checkpoint(head, opt, gen, step, history, cfg, out)
    if bar is not None:
        bar.close()
    head.eval()
    return head, history


def _load_state(path: Path) -> dict:
    """The trainer state :func:`_checkpoint` wrote: tensors and plain containers only.

    ``weights_only=True`` is passed explicitly, which ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``
    cannot override: a file naming any other callable is refused (``ValueError``), never run.
    """
    try:
        state = torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
        raise ValueError(f"{path} is not a trainer state written by train_head (refused, not "
                         f"loaded): {str(err).splitlines()[0]}") from None
    if not isinstance(state, dict) or not {"optimizer", "rng", "step", "history"} <= set(state):
        raise ValueError(f"{path} is not a trainer state written by train_head")
    return state


def _checkpoint(head, opt, gen, step, history, cfg, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    head.save_pretrained(out)
    tmp = out / (STATE_NAME + ".tmp")
    torch.save({"optimizer": opt.state_dict(), "rng": gen.get_state(), "step": step,
                "history": history, "config": asdict(cfg)}, tmp)
    tmp.replace(out / STATE_NAME)
