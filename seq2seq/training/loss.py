"""Label-smoothed cross-entropy that ignores padding."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def token_losses(
    logits: Tensor, target: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Summed losses over the real target tokens of a batch.

    Args:
        logits: (B, T, V) unnormalised scores.
        target: (B, T) gold ids, pad_id where there is no token.
    Returns:
        (smoothed loss sum, plain NLL sum), both scalars in fp32; the caller divides by the
        number of tokens it wants to average over (the whole step's, across micro-batches
        and processes).
    """
    logits = logits.float().flatten(0, 1)  # (B*T, V)
    target = target.flatten()
    loss = F.cross_entropy(
        logits, target, ignore_index=pad_id, label_smoothing=label_smoothing, reduction="sum"
    )
    if label_smoothing == 0.0:
        return loss, loss.detach()
    nll = F.cross_entropy(logits.detach(), target, ignore_index=pad_id, reduction="sum")
    return loss, nll
