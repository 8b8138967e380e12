"""Encoder-decoder Transformer (Vaswani et al. 2017), written out.

Multi-head scaled dot-product attention softmax(Q K^T / sqrt(d_k)) V with learned W^Q, W^K, W^V
and W^O; sinusoidal positions; pre-norm (default) or post-norm residual blocks; optionally one
embedding matrix for source, target and output projection. Training uses PyTorch's fused
`scaled_dot_product_attention`; the same function is computed explicitly when the weights are
wanted, and in bf16 on a CPU (`layers.bf16_on_cpu`). Step-by-step decoding caches each layer's
self-attention keys and values; the cross-attention keys and values are computed once.

Shapes: B batch, S source length, T target length, V target vocabulary, D d_model,
H heads, K = D / H per-head size, L decoder layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.models import layers
from seq2seq.models.attention import masked_softmax
from seq2seq.models.base import EncoderOutput, reorder_tensors
from seq2seq.models.layers import Dropout, ModelConfigError, bf16_on_cpu, check_joint_vocabulary
from seq2seq.tokenization import PAD_ID


def sinusoidal_positions(max_len: int, d_model: int) -> Tensor:
    """(max_len, D) with PE[p, 2i] = sin(p / 10000^(2i/D)) and PE[p, 2i+1] the cosine."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq[: d_model // 2])
    return pe


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
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x attend over projected keys and values.

        Args:
            x: (B, T, D) the query positions.
            keys, values: (B, H, N, K) from `project_kv`.
            mask: boolean, broadcastable to (B, H, T, N), True where attending is allowed;
                None: every key.
            need_weights: compute the weights explicitly and return them.
            causal: position i attends to keys 0..i only (T == N: the whole prefix at once).

        Returns:
            (B, T, D) outputs and (B, H, T, N) weights, or None when not needed.
        """
        q = self._split(self.w_q(x))  # (B, H, T, K)
        p = self.attn_dropout if self.training else 0.0
        if need_weights or bf16_on_cpu(q):
            scores = q @ keys.transpose(-2, -1) / math.sqrt(self.head_size)  # (B, H, T, N)
            if causal:
                mask = torch.ones(x.size(1), keys.size(2), dtype=torch.bool, device=x.device).tril()
            weights = scores.softmax(dim=-1) if mask is None else masked_softmax(scores, mask)
            out = layers.dropout(weights, p, self.training) @ values  # (B, H, T, K)
        else:
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, dropout_p=p, is_causal=causal
            )
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, -1)  # (B, T, D)
        return self.w_o(out), weights if need_weights else None

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

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool) -> Tensor:
        """x (B, S, D), mask (B, 1, 1, S) -> (B, S, D)."""
        if self.pre_norm:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, mask, need_weights)[0])
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, mask, need_weights)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))


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
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor | None]:
        """One decoder layer over new positions x.

        Args:
            x: (B, T, D) the new target positions (T = 1 when stepping).
            self_kv: cached self-attention keys and values (B, H, t, K) of earlier positions,
                or None when x holds the whole prefix (then a causal mask applies).
            cross_kv: the encoder memory's keys and values (B, H, S, K).
            src_mask: (B, 1, 1, S) True at real source tokens.
            need_weights: return the cross-attention weights.

        Returns:
            (B, T, D) outputs, self-attention keys and values (B, H, t + T, K) including x,
            cross-attention weights (B, H, T, S) or None.
        """
        h = self.norm1(x) if self.pre_norm else x
        keys, values = self.self_attn.project_kv(h)
        if self_kv is not None:
            keys = torch.cat([self_kv[0], keys], dim=2)
            values = torch.cat([self_kv[1], values], dim=2)
        causal = self_kv is None  # a cached step sees all earlier positions and itself
        a = self.self_attn.attend(h, keys, values, None, need_weights=False, causal=causal)[0]
        x = x + self.dropout(a) if self.pre_norm else self.norm1(x + self.dropout(a))

        h = self.norm2(x) if self.pre_norm else x
        a, weights = self.cross_attn.attend(h, *cross_kv, src_mask, need_weights)
        x = x + self.dropout(a) if self.pre_norm else self.norm2(x + self.dropout(a))

        if self.pre_norm:
            x = x + self.dropout(self.ff(self.norm3(x)))
        else:
            x = self.norm3(x + self.dropout(self.ff(x)))
        return x, (keys, values), weights


@dataclass
class TransformerState:
    """Decoder cache; every tensor is batch-first for `reorder`.

    Attributes:
        self_keys, self_values: per layer (B, H, t, K), the t target positions decoded so far.
        cross_keys, cross_values: per layer (B, H, S, K), projected once from the encoder output.
    """

    self_keys: tuple[Tensor, ...]
    self_values: tuple[Tensor, ...]
    cross_keys: tuple[Tensor, ...]
    cross_values: tuple[Tensor, ...]

    def reorder(self, index: Tensor) -> TransformerState:
        return reorder_tensors(self, index)


class Transformer(nn.Module):
    """Encoder-decoder Transformer.

    Args:
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size V.
        pad_id: the padding id of both vocabularies.
        name: the config's name (kept for messages).
        d_model: D.
        num_heads: H; must divide D.
        num_encoder_layers, num_decoder_layers: stack depths.
        ff_dim: feed-forward hidden size.
        dropout: on embeddings, sublayer outputs and the feed-forward hidden layer.
        attn_dropout: on attention weights.
        pre_norm: LayerNorm before each sublayer (and after each stack) instead of after it.
        tie_embeddings: one matrix for source and target embeddings and the output projection;
            needs a joint vocabulary (src_vocab_size == tgt_vocab_size).
        max_len: the longest sequence positions are precomputed for.
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int = PAD_ID,
        name: str = "transformer",
        d_model: int = 256,
        num_heads: int = 4,
        num_encoder_layers: int = 3,
        num_decoder_layers: int = 3,
        ff_dim: int = 1024,
        dropout: float = 0.1,
        attn_dropout: float = 0.1,
        pre_norm: bool = True,
        tie_embeddings: bool = True,
        max_len: int = 1024,
    ) -> None:
        super().__init__()
        if tie_embeddings:
            check_joint_vocabulary("tie_embeddings", src_vocab_size, tgt_vocab_size)
        self.name = name
        self.pad_id = pad_id
        self.tgt_vocab_size = tgt_vocab_size
        self.d_model = d_model
        self.max_len = max_len
        self.pre_norm = pre_norm

        self.tgt_emb = nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        self.src_emb = (
            self.tgt_emb
            if tie_embeddings
            else nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        )
        for emb in [self.tgt_emb] if tie_embeddings else [self.tgt_emb, self.src_emb]:
            nn.init.normal_(emb.weight, std=d_model**-0.5)
            with torch.no_grad():
                emb.weight[pad_id].zero_()
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model), persistent=False)
        self.dropout = Dropout(dropout)
        layer_args = (d_model, num_heads, ff_dim, dropout, attn_dropout, pre_norm)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(*layer_args) for _ in range(num_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*layer_args) for _ in range(num_decoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_embeddings:
            self.generator.weight = self.tgt_emb.weight

    def _embed(self, emb: nn.Embedding, ids: Tensor, start: int = 0) -> Tensor:
        """(B, N) ids at positions start.. -> (B, N, D) scaled embeddings plus positions."""
        end = start + ids.size(1)
        if end > self.max_len:
            raise ModelConfigError(
                f"a sequence of {end} positions is longer than model.max_len={self.max_len}"
            )
        x = emb(ids) * math.sqrt(self.d_model) + self.positions[start:end]
        return self.dropout(x)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> states (B, S, D) of the last encoder layer."""
        x = self._embed(self.src_emb, src_ids)
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.encoder_layers:
            x = layer(x, mask, need_weights=False)
        return EncoderOutput(states=self.encoder_norm(x), mask=src_mask)

    def init_state(self, enc: EncoderOutput) -> TransformerState:
        cross = [layer.cross_attn.project_kv(enc.states) for layer in self.decoder_layers]
        no_prefix = enc.states[:, :0]  # (B, 0, D)
        empty = [layer.self_attn.project_kv(no_prefix) for layer in self.decoder_layers]
        return TransformerState(
            self_keys=tuple(k for k, _ in empty),
            self_values=tuple(v for _, v in empty),
            cross_keys=tuple(k for k, _ in cross),
            cross_values=tuple(v for _, v in cross),
        )

    def _decode(
        self, tgt_in: Tensor, enc: EncoderOutput, need_weights: bool
    ) -> tuple[Tensor, list[Tensor | None]]:
        """Teacher forcing: tgt_in (B, T) -> outputs (B, T, D), per-layer weights (B, H, T, S)."""
        x = self._embed(self.tgt_emb, tgt_in)
        src_mask = enc.mask[:, None, None, :]  # (B, 1, 1, S)
        weights = []
        for layer in self.decoder_layers:
            cross_kv = layer.cross_attn.project_kv(enc.states)
            x, _, layer_weights = layer(x, None, cross_kv, src_mask, need_weights)
            weights.append(layer_weights)
        return self.decoder_norm(x), weights

    def decode_step(
        self, prev_ids: Tensor, state: TransformerState, enc: EncoderOutput
    ) -> tuple[Tensor, TransformerState, Tensor]:
        """prev_ids (B,) -> logits (B, V), the state with this position cached, and the
        last layer's cross-attention averaged over heads (B, S)."""
        position = state.self_keys[0].size(2)
        x = self._embed(self.tgt_emb, prev_ids.unsqueeze(1), start=position)  # (B, 1, D)
        src_mask = enc.mask[:, None, None, :]  # (B, 1, 1, S)
        keys, values = [], []
        weights = None
        last = len(self.decoder_layers) - 1
        for i, layer in enumerate(self.decoder_layers):
            cross_kv = (state.cross_keys[i], state.cross_values[i])
            self_kv = (state.self_keys[i], state.self_values[i])
            x, (k, v), weights = layer(x, self_kv, cross_kv, src_mask, i == last)
            keys.append(k)
            values.append(v)
        logits = self.generator(self.decoder_norm(x)).squeeze(1)  # (B, V)
        new_state = TransformerState(
            self_keys=tuple(keys),
            self_values=tuple(values),
            cross_keys=state.cross_keys,
            cross_values=state.cross_values,
        )
        assert weights is not None
        return logits, new_state, weights.mean(dim=1).squeeze(1)

    def forward(
        self,
        src_ids: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attn: bool = True,
        output_positions: Tensor | None = None,
        project: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V) (or (N, V) at output_positions;
        project=False: the generator's inputs), last layer's cross-attention mean over heads."""
        enc = self.encode(src_ids, src_mask)
        out, weights = self._decode(tgt_in, enc, need_attn)
        if output_positions is not None:
            out = out.flatten(0, 1).index_select(0, output_positions)  # (N, D)
        logits = self.generator(out) if project else out
        last = weights[-1]
        return logits, last.mean(dim=1) if last is not None else None

    def cross_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Every decoder layer's and head's cross-attention, (L, B, H, T, S)."""
        enc = self.encode(src_ids, src_mask)
        _, weights = self._decode(tgt_in, enc, need_weights=True)
        return torch.stack([w for w in weights if w is not None])
