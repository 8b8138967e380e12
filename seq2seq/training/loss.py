"""Label-smoothed cross-entropy that ignores padding."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def token_losses(
    logits: Tensor, target: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Summed losses over the real target tokens.

    Args:
        logits: (..., V) unnormalised scores, e.g. (B, T, V), or (N, V) for the real tokens only.
        target: (...) gold ids, pad_id where there is no token.
    Returns:
        (smoothed loss sum, plain NLL sum), both fp32 scalars; the caller divides by the number
        of tokens it averages over (the whole update's, across micro-batches and processes).
        The smoothed loss is (1 - eps) * NLL + eps * mean over the vocabulary of -log p, as in
        torch's cross_entropy(label_smoothing=eps); one log-softmax serves both sums.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1).flatten(0, -2)  # (N, V)
    target = target.flatten()
    real = target != pad_id
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1).masked_fill(~real, 0.0).sum()
    if label_smoothing == 0.0:
        return nll, nll.detach()
    uniform = -lprobs.mean(dim=1).masked_fill(~real, 0.0).sum()
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    return loss, nll.detach()
