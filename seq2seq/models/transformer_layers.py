"""The Transformer's building blocks (Vaswani et al. 2017): sinusoidal positions, or relative
ones as T5 has them (a learned bias per head and bucket of offsets), multi-head scaled
dot-product attention with its four projections, the feed-forward layer, and the encoder and
decoder layers, each sublayer in a pre-norm or post-norm residual block. The model that stacks
them is `seq2seq.models.transformer.Transformer`.

Shapes: B batch, S source length, T target length, D d_model, H heads, K = D / H per-head size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.models import layers
from seq2seq.models.attention import masked_log_softmax, masked_softmax
from seq2seq.models.layers import Dropout, ModelConfigError, bf16_on_cpu


def sinusoidal_positions(max_len: int, d_model: int) -> Tensor:
    """(max_len, D) with PE[p, 2i] = sin(p / 10000^(2i/D)) and PE[p, 2i+1] the cosine."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq[: d_model // 2])
    return pe


class RelativePositionBias(nn.Module):
    """Relative positions as T5 has them (Raffel et al. 2020; Shaw et al. 2018 before it): each
    head adds a learned scalar to the score of query i and key j, one per bucket of the offset
    j - i. Offsets below `num_buckets / 4` (bidirectional) or `/ 2` (causal) have a bucket each,
    larger ones share logarithmically wider buckets up to `max_distance`, and every offset beyond
    shares the last. Bidirectional (the encoder): half the buckets for keys after the query;
    causal (the decoder's self-attention): every bucket for keys at or before it. The table
    starts at zero, so a new model starts without positions and learns them.
    """

    def __init__(
        self, num_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        if max_distance <= num_buckets // (4 if bidirectional else 2):
            raise ModelConfigError(f"max_distance={max_distance} leaves no logarithmic buckets")
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.table = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.table.weight)

    def bucket(self, offset: Tensor) -> Tensor:
        """Offsets j - i (any shape, long) -> their buckets."""
        buckets, result = self.num_buckets, torch.zeros_like(offset)
        if self.bidirectional:
            buckets //= 2
            result = (offset > 0).long() * buckets  # keys after the query
            distance = offset.abs()
        else:
            distance = (-offset).clamp(min=0)  # keys after the query are masked anyway
        exact = buckets // 2
        wide = exact + (
            torch.log(distance.clamp(min=1).float() / exact)
            / math.log(self.max_distance / exact) * (buckets - exact)
        ).long()
        return result + torch.where(distance < exact, distance, wide.clamp(max=buckets - 1))

    def forward(self, num_queries: int, num_keys: int, start: int = 0) -> Tensor:
        """The bias (H, T, N) of queries at positions start..start + T - 1 over keys 0..N - 1."""
        device = self.table.weight.device
        queries = torch.arange(start, start + num_queries, device=device)
        offset = torch.arange(num_keys, device=device)[None, :] - queries[:, None]  # (T, N)
        return self.table(self.bucket(offset)).permute(2, 0, 1)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with its four projections."""

    def __init__(self, d_model: int, num_heads: int, attn_dropout: float) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ModelConfigError(
                f"model.d_model={d_model} is not divisible by model.num_heads={num_heads}"
            )
        self.num_heads = num_heads
        self.head_size = d_model // num_heads
        self.attn_dropout = attn_dropout
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        # (H,) 1 to keep a head, 0 to mask it (its output zeroed before W^O: Michel et al. 2019,
        # `seq2seq.heads`); None, as in training: no gate at all
        self.head_gate: Tensor | None = None

    def _split(self, x: Tensor) -> Tensor:
        """(B, N, D) -> (B, H, N, K)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_size).transpose(1, 2)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, D) -> keys and values (B, H, N, K)."""
        return self._split(self.w_k(memory)), self._split(self.w_v(memory))

    def attend(
        self,
        x: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None,
        need_weights: bool,
        causal: bool = False,
        bias: Tensor | None = None,
        log_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x attend over projected keys and values.

        Args:
            x: (B, T, D) the query positions.
            keys, values: (B, H, N, K) from `project_kv`.
            mask: boolean, broadcastable to (B, H, T, N), True where attending is allowed;
                None: every key.
            need_weights: compute the weights explicitly and return them.
            causal: position i attends to keys 0..i only (T == N: the whole prefix at once).
            bias: (H, T, N) added to the scores (`RelativePositionBias`), or None.
            log_weights: with need_weights, return the weights' log, a log-softmax of the
                scores (guided alignment's KL keeps an exact gradient from it).

        Returns:
            (B, T, D) outputs and (B, H, T, N) weights (their log with `log_weights`), or
            None when not needed.
        """
        q = self._split(self.w_q(x))  # (B, H, T, K)
        p = self.attn_dropout if self.training else 0.0
        if need_weights or bf16_on_cpu(q):
            scores = q @ keys.transpose(-2, -1) / math.sqrt(self.head_size)  # (B, H, T, N)
            if bias is not None:
                scores = scores + bias.to(scores.dtype)
            if causal:
                mask = torch.ones(x.size(1), keys.size(2), dtype=torch.bool, device=x.device).tril()
            if log_weights:
                logs = (scores.log_softmax(dim=-1) if mask is None
                        else masked_log_softmax(scores, mask))
                weights = logs.exp()
            else:
                weights = scores.softmax(dim=-1) if mask is None else masked_softmax(scores, mask)
            out = layers.dropout(weights, p, self.training) @ values  # (B, H, T, K)
        else:
            if bias is not None:  # one float mask: the bias, -inf where attending is not allowed
                allowed = torch.ones(bias.shape[-2:], dtype=torch.bool, device=x.device)
                allowed = allowed.tril() if causal else allowed
                allowed = allowed if mask is None else allowed & mask
                mask = torch.where(allowed, bias.to(q.dtype), float("-inf"))  # (B, H, T, N)
                causal = False
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, dropout_p=p, is_causal=causal
            )
        if self.head_gate is not None:
            out = out * self.head_gate.to(out)[None, :, None, None]  # (B, H, T, K)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, -1)  # (B, T, D)
        if not need_weights:
            return self.w_o(out), None
        return self.w_o(out), logs if log_weights else weights

    def forward(
        self, x: Tensor, memory: Tensor, mask: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) attends over memory (B, N, D); see `attend`."""
        keys, values = self.project_kv(memory)
        return self.attend(x, keys, values, mask, need_weights)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, ff_dim), nn.ReLU(), Dropout(dropout), nn.Linear(ff_dim, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each in a residual block (pre- or post-norm)."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ff_dim: int,
        dropout: float,
        attn_dropout: float,
        pre_norm: bool,
    ) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.self_attn = MultiHeadAttention(d_model, num_heads, attn_dropout)
        self.ff = FeedForward(d_model, ff_dim, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def forward(
        self, x: Tensor, mask: Tensor, need_weights: bool, bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), mask (B, 1, 1, S), relative positions' bias (H, S, S) -> (B, S, D) and
        the self-attention weights (B, H, S, S) where `need_weights`, else None."""
        h = self.norm1(x) if self.pre_norm else x
        a, weights = self.self_attn.attend(h, *self.self_attn.project_kv(h), mask, need_weights,
                                           bias=bias)
        x = x + self.dropout(a) if self.pre_norm else self.norm1(x + self.dropout(a))
        if self.pre_norm:
            return x + self.dropout(self.ff(self.norm2(x))), weights
        return self.norm2(x + self.dropout(self.ff(x))), weights


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention and feed-forward, each in a residual block."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ff_dim: int,
        dropout: float,
        attn_dropout: float,
        pre_norm: bool,
    ) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.self_attn = MultiHeadAttention(d_model, num_heads, attn_dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, attn_dropout)
        self.ff = FeedForward(d_model, ff_dim, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        self_kv: tuple[Tensor, Tensor] | None,
        cross_kv: tuple[Tensor, Tensor],
        src_mask: Tensor,
        need_weights: bool,
        self_bias: Tensor | None = None,
        need_self_weights: bool = False,
        log_weights: bool = False,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor | None, Tensor | None]:
        """One decoder layer over new positions x.

        Args:
            x: (B, T, D) the new target positions (T = 1 when stepping).
            self_kv: cached self-attention keys and values (B, H, t, K) of earlier positions,
                or None when x holds the whole prefix (then a causal mask applies).
            cross_kv: the encoder memory's keys and values (B, H, S, K).
            src_mask: (B, 1, 1, S) True at real source tokens.
            need_weights: return the cross-attention weights.
            self_bias: relative positions' bias (H, T, t + T) of the self-attention, or None.
            need_self_weights: return the self-attention weights too.
            log_weights: the cross-attention weights as their log-softmax.

        Returns:
            (B, T, D) outputs, self-attention keys and values (B, H, t + T, K) including x,
            cross-attention weights (B, H, T, S) or None, self-attention weights
            (B, H, T, t + T) or None.
        """
        h = self.norm1(x) if self.pre_norm else x
        keys, values = self.self_attn.project_kv(h)
        if self_kv is not None:
            keys = torch.cat([self_kv[0], keys], dim=2)
            values = torch.cat([self_kv[1], values], dim=2)
        causal = self_kv is None  # a cached step sees all earlier positions and itself
        a, self_weights = self.self_attn.attend(h, keys, values, None, need_self_weights,
                                                causal=causal, bias=self_bias)
        x = x + self.dropout(a) if self.pre_norm else self.norm1(x + self.dropout(a))

        h = self.norm2(x) if self.pre_norm else x
        a, weights = self.cross_attn.attend(h, *cross_kv, src_mask, need_weights,
                                            log_weights=log_weights)
        x = x + self.dropout(a) if self.pre_norm else self.norm2(x + self.dropout(a))

        if self.pre_norm:
            x = x + self.dropout(self.ff(self.norm3(x)))
        else:
            x = self.norm3(x + self.dropout(self.ff(x)))
        return x, (keys, values), weights, self_weights
