"""Optimizer and learning-rate schedules.

The rate is a pure function of the step (for `plateau`, also of a scale that drops when
validation BLEU stalls, which checkpoints keep), so resuming a run reproduces it exactly; for
`linear` and `wsd` it is a function of the share of the budget spent: exactly so under a step
budget, and under a time budget a resumed run goes on from the elapsed time its checkpoint kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def build_optimizer(
    model: nn.Module,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.98),
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """Fused AdamW (one kernel for all parameters, on CUDA and on the CPU; it can drop a
    NaN/inf update on the device); weight decay on weight matrices, not biases or norm gains."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.dim() >= 2 and "norm" not in name else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), fused=True)


def learning_rate(
    step: int, schedule: str, base_lr: float, warmup_steps: int = 0, scale: float = 1.0,
    spent: float = 0.0, cooldown: float = 0.2,
) -> float:
    """The rate for update number `step` (1-based).

    constant and plateau: linear warmup to base_lr, then base_lr * scale.
    inverse_sqrt: linear warmup to base_lr, then base_lr * sqrt(warmup / step).
    linear: linear warmup to base_lr, times (1 - spent), `spent` being the share of the
    training budget (steps or time, `Budget.spent`) used before this update: the rate reaches
    zero where the budget ends, whenever that is (Li et al. 2020, "Budgeted Training").
    wsd (warmup, stable, decay): linear warmup to base_lr, base_lr until the last `cooldown`
    share of the budget, then linearly to zero where it ends (Hägele et al. 2024, "Scaling
    Laws and Compute-Optimal Training Beyond Fixed Training Durations").
    """
    step = max(step, 1)
    warmup = min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
    if schedule in ("constant", "plateau"):
        return base_lr * warmup * scale
    if schedule == "linear":
        return base_lr * warmup * max(0.0, 1.0 - spent)
    if schedule == "wsd":
        left = 1.0 - spent
        return base_lr * warmup * (min(1.0, max(0.0, left / cooldown)) if cooldown > 0 else 1.0)
    if schedule == "inverse_sqrt":
        decay = math.sqrt(warmup_steps / step) if warmup_steps > 0 and step > warmup_steps else 1.0
        return base_lr * warmup * decay
    raise ValueError(
        f"unknown trainer.schedule {schedule!r}: use constant, plateau, inverse_sqrt, linear or wsd"
    )


@dataclass
class Plateau:
    """Halves (times `factor`) the rate after `patience` evaluations without a new best."""

    factor: float = 0.5
    patience: int = 2
    min_scale: float = 0.0
    scale: float = 1.0
    best: float = -math.inf
    bad_evals: int = 0

    def update(self, score: float) -> bool:
        """Record one evaluation; True when the rate was lowered."""
        if score > self.best:
            self.best, self.bad_evals = score, 0
            return False
        self.bad_evals += 1
        if self.bad_evals < self.patience or self.scale <= self.min_scale:
            return False
        self.scale = max(self.scale * self.factor, self.min_scale)
        self.bad_evals = 0
        return True

    def state_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "best": self.best, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.scale, self.best = float(state["scale"]), float(state["best"])
        self.bad_evals = int(state["bad_evals"])
