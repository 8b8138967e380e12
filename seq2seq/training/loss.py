"""Label-smoothed cross-entropy that ignores padding, with a hand-written backward.

The output layer's (N, V) logits are the largest tensor of a training step. Autograd through
log_softmax, gather and mean walks that tensor about seven times and allocates three more like
it (a zero-filled scatter for the gather, a division for the mean, their sum, the log-softmax
backward); the gradient in closed form, softmax(z) - (1 - eps) * onehot(y) - eps / V, is the
saved log-probabilities exponentiated in place and two in-place passes.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Sums over rows: (1 - eps) * NLL + eps * mean_v(-log p_v), and the plain NLL.

    Rows whose target is `pad_id` count zero in both sums and get zero gradient. The backward
    turns the saved log-probabilities into the gradient in place (no new (N, V) tensor: on a
    CPU each fresh one costs its page faults), so it can run only once per forward.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx, logits: Tensor, target: Tensor, pad_id: int, eps: float
    ) -> tuple[Tensor, Tensor]:
        dtype = torch.promote_types(logits.dtype, torch.float32)  # fp32 for fp16/bf16 logits
        lprobs = torch.log_softmax(logits, dim=1, dtype=dtype)  # (N, V)
        real = (target != pad_id).to(dtype)  # (N,)
        nll = -(lprobs.gather(1, target.unsqueeze(1)).squeeze(1) * real).sum()
        loss = nll
        if eps != 0.0:
            uniform = -(lprobs.mean(dim=1) * real).sum()
            loss = (1.0 - eps) * nll + eps * uniform
        ctx.save_for_backward(lprobs, target, real)
        ctx.eps, ctx.logits_dtype, ctx.done = eps, logits.dtype, False  # type: ignore[attr-defined]
        return loss, nll

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: FunctionCtx, grad_loss: Tensor, grad_nll: Tensor
    ) -> tuple[Tensor, None, None, None]:
        if ctx.done:  # type: ignore[attr-defined]
            raise RuntimeError("token_losses: backward through the same loss can run only once")
        ctx.done = True  # type: ignore[attr-defined]
        lprobs, target, real = ctx.saved_tensors  # type: ignore[attr-defined]
        eps: float = ctx.eps  # type: ignore[attr-defined]
        # d loss = a * d NLL + b * d uniform, with d NLL = p - onehot, d uniform = p - 1/V
        a = ((1.0 - eps) * grad_loss + grad_nll) * real  # (N,), zero on padding rows
        b = (eps * grad_loss) * real
        grad = lprobs.exp_()  # softmax, in place of the saved log-probabilities
        grad.mul_((a + b).unsqueeze(1))
        if eps != 0.0:
            grad.sub_((b / grad.size(1)).unsqueeze(1))
        grad.scatter_add_(1, target.unsqueeze(1), -a.unsqueeze(1))
        return grad.to(ctx.logits_dtype), None, None, None  # type: ignore[attr-defined]


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
        torch's cross_entropy(label_smoothing=eps).
    """
    loss, nll = _SmoothedCrossEntropy.apply(
        logits.flatten(0, -2), target.flatten(), pad_id, float(label_smoothing)
    )
    return loss, nll.detach()
