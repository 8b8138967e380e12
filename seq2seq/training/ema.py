"""An exponential moving average of the weights (Polyak averaging; Marian's exponential
smoothing, fairseq's --ema), the weights that are evaluated and saved as the model.

On a small corpus the weights after each noisy update wander; their average over the last few
hundred updates translates better than any one of them. The average starts at the initial
weights with a short warm-up (decay min(d, (1 + n) / (10 + n)) at update n, as TensorFlow's
ExponentialMovingAverage does), so early evaluations are not dominated by the initialisation.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class EMA:
    """A frozen copy of a model whose weights follow the model's after every update.

    Args:
        model: the trained model (not a DDP or compiled wrapper).
        decay: the decay d once warmed up; 1 / (1 - d) is about how many updates it averages.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"trainer.ema_decay={decay} must be between 0 and 1")
        self.decay = decay
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self._pairs = list(zip(self.model.parameters(), model.parameters(), strict=True))

    def decay_at(self, update: int) -> float:
        """The decay applied at update `update` (1-based)."""
        return min(self.decay, (1.0 + update) / (10.0 + update))

    @torch.no_grad()
    def update(self, update: int) -> None:
        """Move the average toward the model's current weights (on the device, no sync)."""
        averaged, current = zip(*self._pairs, strict=True)
        torch._foreach_lerp_(list(averaged), list(current), 1.0 - self.decay_at(update))
