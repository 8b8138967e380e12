"""Encoder-decoder Transformer (Vaswani et al. 2017), written out.

Multi-head scaled dot-product attention softmax(Q K^T / sqrt(d_k)) V with learned W^Q, W^K, W^V
and W^O; sinusoidal positions, or T5's relative ones (`positions`); pre-norm (default) or
post-norm residual blocks (the blocks are in `seq2seq.models.transformer_layers`); optionally
one embedding matrix for source, target and output projection. Training uses PyTorch's fused
`scaled_dot_product_attention`; the same function is computed explicitly when the weights are
wanted, and in bf16 on a CPU (`layers.bf16_on_cpu`). Step-by-step decoding caches each layer's
self-attention keys and values; the cross-attention keys and values are computed once.

Optionally (`lexical`) the lexical model of Nguyen & Chiang (2018) that the attention RNNs have:
the last decoder layer's cross-attention, averaged over heads, also averages the source
embeddings, and `LexicalOutput` of that average joins the generator's input, a short path from a
source word (a name, an option, a path) to the tied output layer. It needs that layer's weights,
so the layer takes the explicit attention path (as it does in bf16 on a CPU anyway).

Shapes: B batch, S source length, T target length, V target vocabulary, D d_model,
H heads, K = D / H per-head size, L decoder layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.models.attention import LexicalOutput
from seq2seq.models.base import EncoderOutput, reorder_tensors
from seq2seq.models.layers import Dropout, ModelConfigError, check_joint_vocabulary
from seq2seq.models.transformer_layers import (
    DecoderLayer,
    EncoderLayer,
    RelativePositionBias,
    sinusoidal_positions,
)
from seq2seq.tokenization import PAD_ID


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
        lexical: add the lexical model (`LexicalOutput`) of the last layer's cross-attention
            to the generator's input.
        init: the layers' linear weights: "torch" (nn.Linear's own, uniform with bound
            1/sqrt(fan_in)) or "xavier" (Glorot uniform, bound sqrt(6 / (fan_in + fan_out)),
            zero biases: fairseq's and JoeyNMT's Transformers); embeddings are N(0, 1/D) either way.
        positions: "sinusoidal" (added to the embeddings) or "relative" (T5's: a learned bias
            per head and bucket of offsets in each self-attention, one table for the encoder's
            layers and one for the decoder's; `RelativePositionBias`).

    Attributes:
        alignment: the cross-attention the model is read by (fairseq's alignment_layer and
            alignment_heads): (decoder layer, head, or None for the mean over heads), which
            `forward` and `decode_step` return as "the attention"; None: the last layer's mean.
            Set by `read_alignment` where the model is built for a run guided on a layer.
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
        lexical: bool = False,
        init: str = "torch",
        positions: str = "sinusoidal",
    ) -> None:
        super().__init__()
        if tie_embeddings:
            check_joint_vocabulary("tie_embeddings", src_vocab_size, tgt_vocab_size)
        if init not in ("torch", "xavier"):
            raise ModelConfigError(f"model.init={init!r} is not one of torch, xavier")
        if positions not in ("sinusoidal", "relative"):
            raise ModelConfigError(
                f"model.positions={positions!r} is not one of sinusoidal, relative"
            )
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
        if init == "xavier":
            for module in [*self.encoder_layers.modules(), *self.decoder_layers.modules()]:
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)
        self.encoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_embeddings:
            self.generator.weight = self.tgt_emb.weight
        # created last, so that the other parameters draw the same initial weights without it
        self.lexical = LexicalOutput(d_model, d_model) if lexical else None
        relative = positions == "relative"  # after the rest, which keeps its initial weights
        self.encoder_positions = RelativePositionBias(num_heads, True) if relative else None
        self.decoder_positions = RelativePositionBias(num_heads, False) if relative else None
        self.alignment: tuple[int, int | None] | None = None

    def read_alignment(self, layer: int, head: int | None) -> None:
        """Read the model by decoder layer `layer`'s cross-attention (-1: the last), head `head`
        or the mean over heads (None), from `forward` and every decoding step.

        Raises:
            ValueError: a layer or head the model does not have.
        """
        num_layers = len(self.decoder_layers)
        num_heads = self.decoder_layers[0].cross_attn.num_heads
        if not -num_layers <= layer < num_layers:
            raise ValueError(f"alignment layer {layer} is outside [{-num_layers}, {num_layers})")
        if head is not None and not 0 <= head < num_heads:
            raise ValueError(f"alignment head {head} is outside [0, {num_heads})")
        self.alignment = (layer % num_layers, head)

    def _embed(self, emb: nn.Embedding, ids: Tensor, start: int = 0) -> Tensor:
        """(B, N) ids at positions start.. -> (B, N, D) scaled embeddings plus sinusoidal
        positions (none with relative ones)."""
        x = emb(ids) * math.sqrt(self.d_model)
        if self.encoder_positions is None:
            end = start + ids.size(1)
            if end > self.max_len:
                raise ModelConfigError(
                    f"a sequence of {end} positions is longer than model.max_len={self.max_len}"
                )
            x = x + self.positions[start:end]
        return self.dropout(x)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> states (B, S, D) of the last encoder layer."""
        return self._encode(src_ids, src_mask)[0]

    def _encode(self, src_ids: Tensor, src_mask: Tensor, need_weights: bool = False
                ) -> tuple[EncoderOutput, list[Tensor | None]]:
        """`encode`, and each layer's self-attention weights (B, H, S, S) where wanted."""
        x = self._embed(self.src_emb, src_ids)
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        length, relative = src_ids.size(1), self.encoder_positions
        bias = relative(length, length) if relative is not None else None
        weights = []
        for layer in self.encoder_layers:
            x, layer_weights = layer(x, mask, need_weights=need_weights, bias=bias)
            weights.append(layer_weights)
        # the lexical model reads the embeddings unscaled, on the output layer's scale
        embedded = self.dropout(self.src_emb(src_ids)) if self.lexical is not None else None
        return EncoderOutput(states=self.encoder_norm(x), mask=src_mask,
                             embedded=embedded), weights

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
        self, tgt_in: Tensor, enc: EncoderOutput, need_weights: bool,
        weights_of: int | None = None, self_weights: list[Tensor] | None = None,
        log_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor | None]]:
        """Teacher forcing: tgt_in (B, T) -> the generator's inputs (B, T, D) and per-layer
        weights (B, H, T, S), None where not needed (the lexical model needs the last; guided
        alignment the layer `weights_of`, as log-softmax with `log_weights`); each layer's
        masked self-attention weights (B, H, T, T) are appended to `self_weights` when it is
        given."""
        x = self._embed(self.tgt_emb, tgt_in)
        src_mask = enc.mask[:, None, None, :]  # (B, 1, 1, S)
        length, relative = tgt_in.size(1), self.decoder_positions
        bias = relative(length, length) if relative is not None else None
        weights = []
        last = len(self.decoder_layers) - 1
        for i, layer in enumerate(self.decoder_layers):
            cross_kv = layer.cross_attn.project_kv(enc.states)
            needed = need_weights or i == weights_of or (i == last and self.lexical is not None)
            as_log = log_weights and i == weights_of
            x, _, layer_weights, own = layer(x, None, cross_kv, src_mask, needed, bias,
                                             need_self_weights=self_weights is not None,
                                             log_weights=as_log)
            if as_log and i == last and self.lexical is not None:
                assert layer_weights is not None
                last_weights = layer_weights.exp()  # the lexical model reads the weights
            else:
                last_weights = layer_weights
            weights.append(layer_weights)
            if self_weights is not None and own is not None:
                self_weights.append(own)
        return self._output(x, last_weights, enc), weights

    def _output(self, x: Tensor, last_weights: Tensor | None, enc: EncoderOutput) -> Tensor:
        """The generator's input from the last layer's x (B, T, D) and its cross-attention
        weights (B, H, T, S): the final norm, plus the lexical model where there is one."""
        out = self.decoder_norm(x)
        if self.lexical is None:
            return out
        assert last_weights is not None and enc.embedded is not None
        return out + self.lexical(last_weights.mean(dim=1), enc.embedded)

    def decode_step(
        self, prev_ids: Tensor, state: TransformerState, enc: EncoderOutput
    ) -> tuple[Tensor, TransformerState, Tensor]:
        """prev_ids (B,) -> logits (B, V), the state with this position cached, and the
        attention the model is read by (B, S) (`alignment`; by default the last layer's
        cross-attention averaged over heads)."""
        position = state.self_keys[0].size(2)
        x = self._embed(self.tgt_emb, prev_ids.unsqueeze(1), start=position)  # (B, 1, D)
        src_mask = enc.mask[:, None, None, :]  # (B, 1, 1, S)
        bias = (  # the new position over every cached one and itself
            self.decoder_positions(1, position + 1, start=position)
            if self.decoder_positions is not None else None
        )
        keys, values = [], []
        weights = read = None
        last = len(self.decoder_layers) - 1
        chosen, head = self.alignment if self.alignment is not None else (last, None)
        for i, layer in enumerate(self.decoder_layers):
            cross_kv = (state.cross_keys[i], state.cross_values[i])
            self_kv = (state.self_keys[i], state.self_values[i])
            x, (k, v), weights, _ = layer(x, self_kv, cross_kv, src_mask, i in (last, chosen),
                                          bias)
            if i == chosen:
                read = weights
            keys.append(k)
            values.append(v)
        logits = self.generator(self._output(x, weights, enc)).squeeze(1)  # (B, V)
        new_state = TransformerState(
            self_keys=tuple(keys),
            self_values=tuple(values),
            cross_keys=state.cross_keys,
            cross_values=state.cross_values,
        )
        assert read is not None
        return logits, new_state, (read.mean(dim=1) if head is None else read[:, head]).squeeze(1)

    def forward(
        self,
        src_ids: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attn: bool = True,
        output_positions: Tensor | None = None,
        project: bool = True,
        attn_layer: int | None = None,
        attn_head: int | None = None,
        log_attn: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V) (or (N, V) at output_positions;
        project=False: the generator's inputs), the attention the model is read by (`alignment`;
        by default the last layer's cross-attention, mean over heads).
        `attn_layer` (guided alignment): that layer's cross-attention instead, of head
        `attn_head` or the mean over heads when None, computed even when need_attn is False
        (the other layers keep the fused kernel); with `log_attn` as its log, from the
        log-softmax of the scores (the mean over H heads as logsumexp - log H), for guided
        alignment's KL."""
        enc = self.encode(src_ids, src_mask)
        if attn_layer is None and need_attn and self.alignment is not None:
            attn_layer, attn_head = self.alignment
        if log_attn and attn_layer is None:
            raise ValueError("log_attn needs attn_layer: the one layer read as its log")
        if attn_layer is not None:
            num_layers = len(self.decoder_layers)
            if not -num_layers <= attn_layer < num_layers:
                raise ValueError(f"attn_layer={attn_layer} is outside [{-num_layers}, "
                                 f"{num_layers})")
            attn_layer %= num_layers  # -1: the last
        out, weights = self._decode(tgt_in, enc, need_attn, weights_of=attn_layer,
                                    log_weights=log_attn)
        if output_positions is not None:
            out = out.flatten(0, 1).index_select(0, output_positions)  # (N, D)
        logits = self.generator(out) if project else out
        if attn_layer is not None:
            chosen = weights[attn_layer]
            assert chosen is not None
            if attn_head is not None:
                return logits, chosen[:, attn_head]
            if log_attn:  # log of the mean over heads
                return logits, torch.logsumexp(chosen, dim=1) - math.log(chosen.size(1))
            return logits, chosen.mean(dim=1)
        last = weights[-1]
        return logits, last.mean(dim=1) if need_attn and last is not None else None

    def cross_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Every decoder layer's and head's cross-attention, (L, B, H, T, S)."""
        enc = self.encode(src_ids, src_mask)
        _, weights = self._decode(tgt_in, enc, need_weights=True)
        return torch.stack([w for w in weights if w is not None])

    def self_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor
                       ) -> tuple[Tensor, Tensor]:
        """Teacher forcing: every layer's and head's self-attention, the encoder's
        (L_enc, B, H, S, S) and the decoder's masked one (L, B, H, T, T), computed explicitly
        (the pictures and `seq2seq.heads` call this; training keeps the fused kernel)."""
        enc, encoder = self._encode(src_ids, src_mask, need_weights=True)
        decoder: list[Tensor] = []
        self._decode(tgt_in, enc, need_weights=False, self_weights=decoder)
        return torch.stack([w for w in encoder if w is not None]), torch.stack(decoder)
