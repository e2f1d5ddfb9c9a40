"""The hyper-parameters of EAGLE head training (:class:`TrainConfig`), torch-free so that the
command line can list them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TrainConfig"]


@dataclass
class TrainConfig:
    """Hyper-parameters of :func:`train_head` (defaults sized for a 135M target on CPU).

    ``ttt_steps``: EAGLE-3's training-time test, the head unrolled on its own outputs this many
    steps (1 = teacher forcing only; :func:`~spec_adapters.eagle.train.unrolled_logits`).
    ``intermediate_size``: the MLP width of a new head (None: the target's).
    """

    steps: int = 400
    batch_size: int = 4
    seq_len: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 20
    feature_weight: float = 1.0
    ce_weight: float = 0.1
    full_vocab_distill: bool = False
    ttt_steps: int = 1
    midlayer_only: bool = False
    grad_clip: float = 1.0
    draft_vocab_size: int = 8192
    eval_every: int = 100
    eval_tokens: int = 2048
    eval_top_k: int = 8
    checkpoint_every: int = 100
    seed: int = 0
    intermediate_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "draft_vocab_size", "eval_top_k",
                     "ttt_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1")
        if self.intermediate_size is not None and self.intermediate_size < 1:
            raise ValueError("TrainConfig.intermediate_size must be >= 1")
        if self.seq_len < 2:
            raise ValueError("TrainConfig.seq_len must be >= 2")

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len
