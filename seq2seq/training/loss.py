"""Label-smoothed cross-entropy that ignores padding, with a hand-written backward.

The output layer's (N, V) logits are the largest tensor of a training step. Autograd through
log_softmax, gather and mean walks that tensor about seven times and allocates three more like
it (a zero-filled scatter for the gather, a division for the mean, their sum, the log-softmax
backward). Here the forward keeps one log-sum-exp per row, and the backward writes the
gradient in closed form, softmax(z) - (1 - eps) * onehot(y) - eps / V, over the logits
themselves. Both walk the rows in blocks of about 2 MiB in fp32, so each block is read from
memory once and worked on in the cache: bf16 logits are widened to fp32 block by block (the
sums are fp32 whatever the logits), never as a whole (N, V) fp32 tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

BLOCK_ELEMENTS = 2**19  # fp32 elements of a block of rows: 2 MiB, one core's L2 on that Xeon


def _rows_per_block(width: int) -> int:
    return max(1, BLOCK_ELEMENTS // width)


def _blocks(rows: int, width: int) -> list[tuple[int, int]]:
    step = _rows_per_block(width)
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def _logit_gradient(out: Tensor, logits: Tensor, lse: Tensor, a: Tensor, b: Tensor,
                    target: Tensor, eps: float) -> None:
    """Write a * d NLL + b * d uniform over rows of logits into `out` (may be `logits`):
    softmax(z) * (a + b) - b / V - a * onehot(target), with a, b (n,) and target (n, 1)."""
    torch.sub(logits, lse.unsqueeze(1), out=out)
    out.exp_().mul_((a + b).unsqueeze(1))  # softmax, scaled
    if eps != 0.0:
        out.sub_((b / out.shape[1]).unsqueeze(1))
    out.scatter_add_(1, target, -a.unsqueeze(1))


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Sums over rows: (1 - eps) * NLL + eps * mean_v(-log p_v), and the plain NLL.

    Rows whose target is `pad_id` count zero in both sums and get zero gradient. When the
    logits are an intermediate of the graph (the output layer's, as in training) the backward
    overwrites them with their gradient, so no second (N, V) tensor is made, and it can run
    only once per forward; leaf logits (a test's) get a gradient of their own.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx, logits: Tensor, target: Tensor, pad_id: int, eps: float
    ) -> tuple[Tensor, Tensor]:
        dtype = torch.promote_types(logits.dtype, torch.float32)  # fp32 for fp16/bf16 logits
        rows, width = logits.shape
        lse = torch.empty(rows, dtype=dtype, device=logits.device)
        mean = torch.empty(rows, dtype=dtype, device=logits.device) if eps != 0.0 else None
        for start, end in _blocks(rows, width):
            block = logits[start:end].to(dtype)  # no copy when already fp32
            lse[start:end] = torch.logsumexp(block, dim=1)
            if mean is not None:
                mean[start:end] = block.mean(dim=1)
        real = (target != pad_id).to(dtype)  # (N,)
        picked = logits.gather(1, target.unsqueeze(1)).squeeze(1).to(dtype)
        nll = ((lse - picked) * real).sum()
        loss = nll
        if mean is not None:
            uniform = ((lse - mean) * real).sum()  # -mean_v log p_v = lse - mean_v z_v
            loss = (1.0 - eps) * nll + eps * uniform
        ctx.save_for_backward(logits, target, real, lse)
        ctx.eps, ctx.done = eps, False  # type: ignore[attr-defined]
        base = logits if logits._base is None else logits._base  # a view's own tensor
        ctx.overwrite = base.grad_fn is not None  # type: ignore[attr-defined]
        return loss, nll

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: FunctionCtx, grad_loss: Tensor, grad_nll: Tensor
    ) -> tuple[Tensor, None, None, None]:
        if ctx.done:  # type: ignore[attr-defined]
            raise RuntimeError("token_losses: backward through the same loss can run only once")
        logits, target, real, lse = ctx.saved_tensors  # type: ignore[attr-defined]
        eps: float = ctx.eps  # type: ignore[attr-defined]
        ctx.done = ctx.overwrite  # type: ignore[attr-defined]
        grad = logits if ctx.overwrite else torch.empty_like(logits)  # type: ignore[attr-defined]
        # d loss = a * d NLL + b * d uniform, with d NLL = p - onehot, d uniform = p - 1/V
        a = ((1.0 - eps) * grad_loss + grad_nll) * real  # (N,), zero on padding rows
        b = (eps * grad_loss) * real
        rows, width = logits.shape
        widen = logits.dtype != lse.dtype
        buffer = torch.empty(min(rows, _rows_per_block(width)), width,
                             dtype=lse.dtype, device=logits.device) if widen else None
        for start, end in _blocks(rows, width):
            out = buffer[: end - start] if buffer is not None else grad[start:end]
            _logit_gradient(out, logits[start:end], lse[start:end], a[start:end],
                            b[start:end], target[start:end].unsqueeze(1), eps)
            if buffer is not None:
                grad[start:end] = out
        return grad, None, None, None


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


LINEAR_BLOCK_ELEMENTS = 2**22  # logits of a block of rows in `linear_token_losses`: 16 MiB fp32


class _LinearSmoothedCrossEntropy(torch.autograd.Function):
    """`_SmoothedCrossEntropy` of features @ weight.T (+ bias), one block of rows at a time.

    For each block of rows the forward makes the logits, their two sums and, when a gradient is
    wanted, the gradient of the logits in closed form (over the logits, in cache-sized pieces
    widened to fp32, as `_SmoothedCrossEntropy` does), and multiplies it out into the
    gradients of the features, the weight and the bias at once; backward only scales them by
    the incoming gradient. The (N, V) logits never exist: one block's buffers (reused from
    block to block and, same-sized, from step to step) replace them. Matrix products run in
    the features' dtype (bf16 features take a bf16 copy of the weight), sums and the weight's
    and bias's gradients are accumulated in fp32. The NLL output is not differentiable; the
    closed-form gradient is `_logit_gradient`, shared with `_SmoothedCrossEntropy`.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx, features: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
        pad_id: int, eps: float,
    ) -> tuple[Tensor, Tensor]:
        rows, width = features.shape[0], weight.shape[0]
        compute = features.dtype
        acc = torch.promote_types(compute, torch.float32)
        w = weight.to(compute)
        b = None if bias is None else bias.to(compute)
        want_grad = any(ctx.needs_input_grad[:3])  # type: ignore[attr-defined]
        real = (target != pad_id).to(acc)  # (N,)
        coef_nll, coef_uniform = (1.0 - eps) * real, eps * real  # d loss / d NLL, d uniform
        grad_features = grad_weight = grad_bias = None
        if want_grad:
            grad_features = torch.empty_like(features)
            grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device)
            if bias is not None:
                grad_bias = torch.zeros(width, dtype=acc, device=bias.device)
        nll, uniform = torch.zeros((), dtype=acc, device=features.device), None
        if eps != 0.0:
            uniform = torch.zeros((), dtype=acc, device=features.device)
        step = max(1, LINEAR_BLOCK_ELEMENTS // width)
        for start in range(0, rows, step):
            end = min(start + step, rows)
            x = features[start:end]
            z = x @ w.t() if b is None else torch.addmm(b, x, w.t())  # (n, V)
            for first, last in _blocks(end - start, width):  # the sums in cache-sized pieces
                rows_z = z[first:last]
                block = rows_z.to(acc)  # fp32: rows_z itself
                lse = torch.logsumexp(block, dim=1)
                t = target[start + first:start + last].unsqueeze(1)
                kept = real[start + first:start + last]
                nll += ((lse - block.gather(1, t).squeeze(1)) * kept).sum()
                if uniform is not None:
                    uniform += ((lse - block.mean(dim=1)) * kept).sum()
                if not want_grad:
                    continue
                _logit_gradient(block, block, lse, coef_nll[start + first:start + last],
                                coef_uniform[start + first:start + last], t, eps)
                if block.data_ptr() != rows_z.data_ptr():
                    rows_z.copy_(block)
            if grad_weight is not None:  # z holds d loss / d logits
                torch.mm(z, w, out=grad_features[start:end])  # type: ignore[index]
                grad_weight += (z.t() @ x).to(acc)
                if grad_bias is not None:
                    grad_bias += z.sum(dim=0, dtype=acc)
        loss = nll.clone() if uniform is None else (1.0 - eps) * nll + eps * uniform
        ctx.save_for_backward(grad_features, grad_weight, grad_bias)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)  # type: ignore[attr-defined]
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: FunctionCtx, grad_loss: Tensor, grad_nll: Tensor | None
    ) -> tuple[Tensor | None, Tensor | None, Tensor | None, None, None, None]:
        grad_features, grad_weight, grad_bias = ctx.saved_tensors  # type: ignore[attr-defined]
        weight_dtype, bias_dtype = ctx.dtypes  # type: ignore[attr-defined]
        scale = grad_loss.to(grad_weight.dtype)
        return (
            grad_features * scale.to(grad_features.dtype),
            (grad_weight * scale).to(weight_dtype),
            None if grad_bias is None else (grad_bias * scale).to(bias_dtype),
            None, None, None,
        )


def linear_token_losses(
    features: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, pad_id: int,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """`token_losses` of the logits features @ weight.T + bias, the output layer and the loss
    in one (`_LinearSmoothedCrossEntropy`): features (N, O) (bf16 or fp32), the output layer's
    weight (V, O) and bias (V,) or None, target (N,). Returns (smoothed loss sum, NLL sum)."""
    loss, nll = _LinearSmoothedCrossEntropy.apply(
        features, weight, bias, target, pad_id, float(label_smoothing)
    )
    return loss, nll.detach()
