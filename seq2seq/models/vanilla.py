"""The encoder-decoder without attention (Cho et al. 2014).

The encoder squeezes the whole source into one vector c: its final state at the real last token
(bidirectional: tanh(W [h_fwd; h_bwd]) of both directions' final states). The decoder starts from
tanh(V c) and sees the same c at every step, in its input and in its output layer. Nothing else
of the source reaches the decoder, so long sentences lose their beginning.

Shapes: B batch, S source length, T target length, V target vocabulary, E embedding size,
H hidden size, L layers, O output size (E when tied to the target embedding, else H).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.models.base import EncoderOutput
from seq2seq.models.layers import (
    RNNState,
    encode_source,
    init_output_embedding,
    initial_state,
    make_rnn,
    rnn_run,
    rnn_step,
)
from seq2seq.tokenization import PAD_ID


class VanillaSeq2Seq(nn.Module):
    """GRU/LSTM encoder-decoder whose only link is the fixed context vector c.

    Args:
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size V.
        pad_id: the padding id of both vocabularies.
        name: the config's name (kept for messages).
        cell: "gru" or "lstm".
        emb_dim: embedding size E.
        hidden_size: H, of the encoder (per direction), the context and the decoder.
        num_layers: layers of the encoder and of the decoder.
        bidirectional: run the encoder in both directions.
        dropout: on embeddings, between RNN layers and before the output projection.
        tie_embeddings: share the target embedding with the output projection.
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int = PAD_ID,
        name: str = "vanilla",
        cell: str = "gru",
        emb_dim: int = 256,
        hidden_size: int = 512,
        num_layers: int = 1,
        bidirectional: bool = True,
        dropout: float = 0.2,
        tie_embeddings: bool = False,
    ) -> None:
        super().__init__()
        self.name = name
        self.pad_id = pad_id
        self.tgt_vocab_size = tgt_vocab_size
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        out_size = emb_dim if tie_embeddings else hidden_size

        self.src_emb = nn.Embedding(src_vocab_size, emb_dim, padding_idx=pad_id)
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.encoder = make_rnn(cell, emb_dim, hidden_size, num_layers, dropout, bidirectional)
        self.context_proj = nn.Linear(2 * hidden_size, hidden_size) if bidirectional else None
        self.init_proj = nn.Linear(hidden_size, num_layers * hidden_size)
        self.decoder = make_rnn(cell, emb_dim + hidden_size, hidden_size, num_layers, dropout)
        self.combine = nn.Linear(hidden_size + emb_dim + hidden_size, out_size)
        self.generator = nn.Linear(out_size, tgt_vocab_size)
        if tie_embeddings:
            self.generator.weight = self.tgt_emb.weight
            init_output_embedding(self.tgt_emb)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> states (B, S, H * directions), the context c as final (B, H)."""
        emb = self.dropout(self.src_emb(src_ids))  # (B, S, E)
        states, final = encode_source(self.encoder, emb, src_mask)  # final: (B, L, dirs * H)
        context = final[:, -1]  # the top layer
        if self.context_proj is not None:
            context = torch.tanh(self.context_proj(context))  # (B, H)
        return EncoderOutput(states=states, mask=src_mask, final=context)

    def init_state(self, enc: EncoderOutput) -> RNNState:
        assert enc.final is not None
        hidden = torch.tanh(self.init_proj(enc.final))  # (B, L * H)
        return initial_state(self.decoder, hidden.view(-1, self.num_layers, self.hidden_size))

    def _output(self, top: Tensor, emb: Tensor, context: Tensor) -> Tensor:
        """[s_t; y_{t-1}; c] -> (..., O), for one step or all steps at once."""
        return torch.tanh(self.combine(torch.cat([top, emb, context], dim=-1)))

    def decode_step(
        self, prev_ids: Tensor, state: RNNState, enc: EncoderOutput
    ) -> tuple[Tensor, RNNState, None]:
        """prev_ids (B,) -> logits (B, V), new state, no attention."""
        assert enc.final is not None
        emb = self.dropout(self.tgt_emb(prev_ids))  # (B, E)
        state = rnn_step(self.decoder, torch.cat([emb, enc.final], dim=-1), state)
        out = self._output(state.hidden[-1], emb, enc.final)
        return self.generator(self.dropout(out)), state, None

    def forward(
        self,
        src_ids: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attn: bool = True,
        output_positions: Tensor | None = None,
        project: bool = True,
    ) -> tuple[Tensor, None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V) (or (N, V) at
        output_positions) and no attention; project=False: the generator's inputs instead.

        c is the same at every step, so the decoder RNN runs over the whole target in one call.
        """
        enc = self.encode(src_ids, src_mask)
        assert enc.final is not None
        emb = self.dropout(self.tgt_emb(tgt_in))  # (B, T, E)
        context = enc.final.unsqueeze(1).expand(-1, tgt_in.size(1), -1)  # (B, T, H)
        tops, _ = rnn_run(self.decoder, torch.cat([emb, context], dim=-1), self.init_state(enc))
        out = self._output(tops, emb, context)  # (B, T, O)
        if output_positions is not None:
            out = out.flatten(0, 1).index_select(0, output_positions)  # (N, O)
        out = self.dropout(out)
        return self.generator(out) if project else out, None

    def self_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> None:
        """No self-attention: its encoder and decoder are recurrent."""
        return None

    def cross_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> None:
        """No attention at all."""
        return None
