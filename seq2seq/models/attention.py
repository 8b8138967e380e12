"""Attention for the recurrent decoders: additive (Bahdanau) and dot / general (Luong).

Every scorer works in two steps. `project_keys(states)` runs once per sentence (in `encode`),
and its result is stored in `EncoderOutput.keys`; `forward(query, keys, values, mask)` then runs
at every decoder step with a query (B, Q), or once for all steps with a query (B, T, Q).

The weights are a softmax of the scores, or a sparse mapping (`ATTENTION_FNS`): sparsemax
(Martins & Astudillo 2016) or 1.5-entmax (Peters et al. 2019), which give exactly zero weight to
the source positions they rule out, so a heatmap shows only the positions a step uses.

Shapes: B batch, S source length, T target length, Q query size, K encoder state size,
A attention size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from seq2seq.models.layers import check_choice


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last dim that gives masked positions exactly zero weight.

    Args:
        scores: (..., S) unnormalised scores.
        mask: boolean, broadcastable to `scores`, True at positions that may be attended.

    Returns:
        Weights like `scores`; each row with at least one True position sums to 1.
    """
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def masked_log_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """The log of `masked_softmax`, computed as a log-softmax of the scores (so its gradient is
    exact however small a weight is: what guided alignment's KL needs); masked positions get
    the most negative number, whose `exp` is exactly 0."""
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.log_softmax(scores, dim=-1).masked_fill(~mask, torch.finfo(scores.dtype).min)


class _Sparsemax(torch.autograd.Function):
    """Euclidean projection of the scores onto the simplex; -inf scores get weight 0."""

    @staticmethod
    def forward(ctx, scores: Tensor) -> Tensor:  # type: ignore[override]
        z = scores - scores.amax(dim=-1, keepdim=True)
        ordered = z.sort(dim=-1, descending=True).values
        k = torch.arange(1, z.size(-1) + 1, device=z.device, dtype=z.dtype)
        cumulative = ordered.cumsum(dim=-1) - 1
        support = (k * ordered > cumulative).sum(dim=-1, keepdim=True)  # >= 1
        tau = cumulative.gather(-1, support - 1) / support.to(z.dtype)
        weights = (z - tau).clamp(min=0)
        ctx.save_for_backward(weights)
        return weights

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (weights,) = ctx.saved_tensors
        support = (weights > 0).to(grad.dtype)
        mean = (grad * support).sum(-1, keepdim=True) / support.sum(-1, keepdim=True)
        return support * (grad - mean)


class _Entmax15(torch.autograd.Function):
    """1.5-entmax by the exact sort-based threshold; -inf scores get weight 0."""

    @staticmethod
    def forward(ctx, scores: Tensor) -> Tensor:  # type: ignore[override]
        x = (scores - scores.amax(dim=-1, keepdim=True)) / 2
        ordered = x.sort(dim=-1, descending=True).values
        k = torch.arange(1, x.size(-1) + 1, device=x.device, dtype=x.dtype)
        mean = ordered.cumsum(dim=-1) / k
        mean_sq = (ordered * ordered).cumsum(dim=-1) / k
        delta = (1 - k * (mean_sq - mean * mean)) / k  # NaN past the -inf scores: not counted
        tau = mean - delta.clamp(min=0).sqrt()
        support = (tau <= ordered).sum(dim=-1, keepdim=True)  # >= 1
        weights = (x - tau.gather(-1, support - 1)).clamp(min=0) ** 2
        ctx.save_for_backward(weights)
        return weights

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (weights,) = ctx.saved_tensors
        root = weights.sqrt()
        scaled = grad * root
        return scaled - root * scaled.sum(-1, keepdim=True) / root.sum(-1, keepdim=True)


def masked_sparse(fn: type[torch.autograd.Function], scores: Tensor, mask: Tensor) -> Tensor:
    """A sparse attention mapping over the last dim, in float32 or wider; masked positions get
    -inf scores, hence exactly 0 weight."""
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    return fn.apply(scores.masked_fill(~mask, float("-inf")))


ATTENTION_FNS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "softmax": masked_softmax,
    "sparsemax": lambda scores, mask: masked_sparse(_Sparsemax, scores, mask),
    "entmax15": lambda scores, mask: masked_sparse(_Entmax15, scores, mask),
}


def normalizer(attention_fn: str) -> Callable[[Tensor, Tensor], Tensor]:
    """The mapping from scores to weights that `attention_fn` names (`ATTENTION_FNS`)."""
    check_choice("attention_fn", attention_fn, tuple(ATTENTION_FNS))
    return ATTENTION_FNS[attention_fn]


def attend(
    scores_fn: Callable[[Tensor, Tensor], Tensor],
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor,
    normalize: Callable[[Tensor, Tensor], Tensor] = masked_softmax,
    log_weights: bool = False,
) -> tuple[Tensor, Tensor]:
    """Score, normalise with padding masked out, and take the weighted sum of the values.

    Args:
        scores_fn: (B, T, Q) queries, (B, S, A) keys -> (B, T, S) scores.
        query: (B, Q) one decoder step, or (B, T, Q) all steps.
        keys: (B, S, A) from `project_keys`.
        values: (B, S, K) encoder states.
        mask: (B, S) True at real source tokens.
        normalize: (B, T, S) scores, broadcastable mask -> weights (`ATTENTION_FNS`).
        log_weights: return the weights' log, a log-softmax of the scores (softmax only).

    Returns:
        context (B, K) or (B, T, K), and weights (B, S) or (B, T, S) (their log with
        `log_weights`).
    """
    one_step = query.dim() == 2
    if one_step:
        query = query.unsqueeze(1)
    scores = scores_fn(query, keys)  # (B, T, S)
    if log_weights:
        if normalize is not masked_softmax:
            raise ValueError("log_weights needs attention_fn=softmax")
        logs = masked_log_softmax(scores, mask.unsqueeze(1))
        weights, returned = logs.exp(), logs
    else:
        weights = returned = normalize(scores, mask.unsqueeze(1))
    context = torch.bmm(weights.to(values.dtype), values)  # (B, T, K)
    if one_step:
        return context.squeeze(1), returned.squeeze(1)
    return context, returned


class AdditiveAttention(nn.Module):
    """Bahdanau: score(q, h) = v^T tanh(W q + U h); U h is the precomputed key.

    `query_extra` (B[, T], A) adds an already projected term to W q, e.g. the previous target
    word's Y y_{t-1}, projected once for all steps.
    """

    def __init__(
        self, query_size: int, key_size: int, attn_size: int, attention_fn: str = "softmax"
    ) -> None:
        super().__init__()
        self.normalize = normalizer(attention_fn)
        self.query_proj = nn.Linear(query_size, attn_size, bias=False)
        self.key_proj = nn.Linear(key_size, attn_size)
        self.v = nn.Linear(attn_size, 1, bias=False)

    def project_keys(self, states: Tensor) -> Tensor:
        return self.key_proj(states)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """(B, T, A) projected queries, (B, S, A) keys -> (B, T, S) scores, v^T tanh(q + k)."""
        return self.v(torch.tanh(query.unsqueeze(2) + keys.unsqueeze(1))).squeeze(-1)

    def score_recomputed(self, query: Tensor, keys: Tensor) -> Tensor:
        """`score`, without its (B, T, S, A) tanh kept for the backward pass.

        Autograd keeps tanh(q + k) of every decoder step until the backward pass, B*S*A floats a
        step: B*S*T*A for a batch, which for long pairs is most of the memory of training
        (4,096-token batches of 230-piece pairs: 0.85 GiB). Checkpointing keeps only q and k and
        recomputes the tanh in backward with the same operations, so the gradients are bit for
        bit the same; the price is a second tanh of the step.
        """
        if torch.is_grad_enabled() and (query.requires_grad or keys.requires_grad):
            return checkpoint(self.score, query, keys, use_reentrant=False)
        return self.score(query, keys)

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        query_extra: Tensor | None = None,
        recompute: bool = False,
        log_weights: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Query (B, Q) or (B, T, Q) -> context (B[, T], K), weights (B[, T], S); see `attend`.
        `recompute`: score with `score_recomputed`."""
        projected = self.query_proj(query)
        if query_extra is not None:
            projected = projected + query_extra
        scores_fn = self.score_recomputed if recompute else self.score
        return attend(scores_fn, projected, keys, values, mask, self.normalize, log_weights)


class DotAttention(nn.Module):
    """Luong dot: score(q, h) = q^T h; the query and the encoder states share one size.

    `scale` multiplies the scores: 1 is Luong's score; 1/sqrt(Q) is the Transformer's scaled
    dot product, which keeps the scores of a wide query near unit variance, so the softmax does
    not start out (and stay) one-hot on a single source position.
    """

    def __init__(self, attention_fn: str = "softmax", scale: float = 1.0) -> None:
        super().__init__()
        self.normalize = normalizer(attention_fn)
        self.scale = scale

    def project_keys(self, states: Tensor) -> Tensor:
        return states

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2)) * self.scale  # * 1.0 is exact

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
        log_weights: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Query (B, Q) or (B, T, Q) -> context (B[, T], K), weights (B[, T], S); see `attend`."""
        return attend(self.score, query, keys, values, mask, self.normalize, log_weights)


class GeneralAttention(DotAttention):
    """Luong general: score(q, h) = q^T W h; W h is the precomputed key."""

    def __init__(
        self, query_size: int, key_size: int, attention_fn: str = "softmax", scale: float = 1.0
    ) -> None:
        super().__init__(attention_fn, scale)
        self.key_proj = nn.Linear(key_size, query_size, bias=False)

    def project_keys(self, states: Tensor) -> Tensor:
        return self.key_proj(states)


class LexicalOutput(nn.Module):
    """The lexical model of Nguyen & Chiang (2018), "Improving Lexical Choice in NMT".

    The attention weights also average the source *embeddings*, f_t = tanh(sum_i a_ti x_i), and
    a one-layer residual network of f_t adds to the decoder's output vector, so a source word
    reaches the output layer through one short path. It helps rare words and names on small
    corpora, and rewards attending to the word being translated.
    """

    def __init__(self, emb_dim: int, out_size: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(emb_dim, emb_dim, bias=False)
        self.out = nn.Linear(emb_dim, out_size, bias=False)

    def forward(self, weights: Tensor, embedded: Tensor) -> Tensor:
        """weights (B, S) or (B, T, S), embedded source (B, S, E) -> (B[, T], O)."""
        one_step = weights.dim() == 2
        f = torch.tanh(torch.bmm(weights.unsqueeze(1) if one_step else weights, embedded))
        out = self.out(torch.tanh(self.hidden(f)) + f)  # (B, T, O)
        return out.squeeze(1) if one_step else out
