"""Train an EAGLE head for a target on a token corpus (distillation + feature regression).

Per step a batch of ``batch_size`` windows of ``seq_len`` tokens is drawn from the corpus; the
frozen target computes, on the fly, its features ``f_t`` (the head's feature layers), its last
hidden state and its next-token distribution. The head reads the pairs ``(f_t, e(x_{t+1}))``
(teacher forcing, causal attention) and is trained with (EAGLE-1's objective)

.. math:: L = w_f \\,\\mathrm{SmoothL1}(z_t, h^{L}_{t+1})
          + w_c \\,\\mathrm{CE}(p^{T}_{t+1}|_{V_d},\\; q_t),

the regression of its output hidden onto the target's last hidden state at ``t+1`` (which is
what the head feeds itself when drafting deeper) and the cross-entropy of its draft-vocabulary
distribution against the target's distribution on the draft vocabulary (distillation): by
default the target's softmax over the draft-vocabulary logits only (renormalised; the output
layer is applied to those rows only, ~18 % cheaper for SmolLM2-135M), with
``full_vocab_distill=True`` the full-vocabulary softmax restricted to it. AdamW, gradient
clipping, a tqdm progress bar, a held-out report every ``eval_every`` steps (top-1 agreement
with the target's argmax = greedy gamma of a chain, and the target mass of the head's top-``k``
= Theorem 2's gamma at a tree root).

Resumable: every ``checkpoint_every`` steps and at the end ``out_dir`` receives the head
(``save_pretrained``) and ``trainer_state.pt`` (optimizer, step, data-sampler RNG, history);
calling :func:`train_head` again with the same ``out_dir`` continues from there, and the result
is bit-identical to an uninterrupted run (same seed). Deterministic for a given seed.

Cost: one target forward (no grad) plus one head forward/backward per step; the target
dominates. See docs/eagle.md for measured step times and the estimate for SmolLM2-135M.

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

from .head import EagleHead, EagleHeadConfig, build_draft_vocab
from .train_config import TrainConfig

__all__ = ["TrainConfig", "evaluate_head", "head_loss", "load_token_ids", "train_head"]

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


@torch.no_grad()
def _target_pass(target, ids: torch.LongTensor, feature_layers, d2t):
    """Features ``(B,S,F*H)``, last hidden ``(B,S,H)``, target probs on the draft vocab
    (the full-vocabulary softmax restricted to it), full probs ``(B,S,V)``."""
    out = target(input_ids=ids, output_hidden_states=True, use_cache=False)
    hs = out.hidden_states
    feats = torch.cat([hs[i] for i in feature_layers], -1).float()
    probs = torch.softmax(out.logits.float(), -1)
    return feats, hs[-1].float(), probs[..., d2t], probs


@torch.no_grad()
def _target_pass_draft_rows(target, ids: torch.LongTensor, feature_layers, d2t):
    """Like :func:`_target_pass` but the output layer is applied to the draft-vocabulary rows
    only, and the distillation target is the target's softmax over those rows (renormalised).

    Assumes the logits are ``lm_head(last hidden)`` (Llama-family: no soft-capping or scale);
    saves ~1 - Vd/V of the output layer (~18 % of a SmolLM2-135M training step)."""
    out = target.base_model(input_ids=ids, output_hidden_states=True, use_cache=False)
    hs = out.hidden_states
    feats = torch.cat([hs[i] for i in feature_layers], -1).float()
    last = hs[-1]
    lm = target.get_output_embeddings()
    logits = torch.nn.functional.linear(
        last, lm.weight[d2t], None if getattr(lm, "bias", None) is None else lm.bias[d2t])
    return feats, last.float(), torch.softmax(logits.float(), -1), None


def _head_pass(head: EagleHead, feats, ids):
    """Teacher-forced head over pairs ``(f_t, x_{t+1})``, ``t = 0 .. S-2``."""
    S = ids.shape[1]
    emb = head.embed(ids[:, 1:])
    logits, z, _, _ = head(feats[:, :-1], emb, torch.arange(S - 1), fuse=True)
    return logits, z


def head_loss(head: EagleHead, target, ids: torch.LongTensor, cfg: TrainConfig):
    """The training loss of one batch and its two parts (floats)."""
    pass_ = _target_pass if cfg.full_vocab_distill else _target_pass_draft_rows
    feats, last, p_draft, _ = pass_(target, ids, head.config.feature_layers, head.d2t)
    logits, z = _head_pass(head, feats, ids)
    reg = fn.smooth_l1_loss(z, last[:, 1:])
    ce = -(p_draft[:, 1:] * torch.log_softmax(logits, -1)).sum(-1).mean()
    loss = cfg.feature_weight * reg + cfg.ce_weight * ce
    return loss, float(reg.detach()), float(ce.detach())


@torch.no_grad()
def evaluate_head(head: EagleHead, target, tokens, seq_len: int = 128, max_tokens: int = 2048,
                  top_k: int = 8) -> dict:
    """Held-out acceptance of a head against its target.

    Returns ``{"top1": P(argmax head == argmax target), "gamma_topk": mean target mass of the
    head's top-k (Theorem 2 at a tree root, temperature 1), "tokens": n}``.
    """
    tokens = _as_corpus(tokens)[:max_tokens]
    n_win = max(1, tokens.numel() // seq_len)
    hits = mass = count = 0.0
    for w in range(n_win):
        ids = tokens[w * seq_len:(w + 1) * seq_len].view(1, -1).to(head.d2t.device)
        if ids.shape[1] < 3:
            break
        feats, _, _, probs = _target_pass(target, ids, head.config.feature_layers, head.d2t)
        logits, _ = _head_pass(head, feats, ids)
        p = probs[0, 1:]  # target distribution of the token each head row predicts
        kids = head.d2t[torch.topk(logits[0], min(top_k, logits.shape[-1]), -1).indices]
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


def train_head(target, corpus, out_dir=None, config: TrainConfig | None = None, head=None,
               heldout=None, feature_layers=None, progress: bool = True, log=print,
               stop_after: int | None = None) -> tuple[EagleHead, list[dict]]:
    """Train (or resume training) an EAGLE head for ``target``.

    Parameters
    ----------
    target : transformers causal LM (frozen, eval mode).
    corpus : 1-D token ids (tensor or sequence), at least ``seq_len`` tokens.
    out_dir : path, optional
        Checkpoint directory; if it holds a checkpoint, training resumes from it.
    config : TrainConfig
    head : EagleHead, optional
        Start from this head (default: a new one, draft vocabulary = the corpus's most frequent
        ``draft_vocab_size`` tokens, output layer initialised from the target's).
    heldout : 1-D token ids, optional
        Held-out text for the periodic acceptance report.
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
    corpus = _as_corpus(corpus)
    if corpus.numel() < cfg.seq_len:
        raise ValueError(f"corpus has {corpus.numel()} tokens, fewer than seq_len={cfg.seq_len}")
    V = int(target.get_input_embeddings().weight.shape[0])
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
        hcfg = EagleHeadConfig.for_target(target, len(d2t), feature_layers=feature_layers)
        head = EagleHead(hcfg, d2t=d2t).init_from_target(target)
    else:
        head.bind(target)
    device = next(target.parameters()).device
    head.to(device).train()
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
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
    n_windows = corpus.numel() - cfg.seq_len + 1
    while step < end:
        t0 = time.perf_counter()
        starts = torch.randint(0, n_windows, (cfg.batch_size,), generator=gen)
        ids = torch.stack([corpus[s:s + cfg.seq_len] for s in starts.tolist()]).to(device)
        lr = _lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, reg, ce = head_loss(head, target, ids, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        rec = {"step": step, "loss": float(loss.detach()), "reg": reg, "ce": ce, "lr": lr,
               "seconds": time.perf_counter() - t0}
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
