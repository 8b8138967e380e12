"""Luong et al. (2015): step, then attend with the new decoder state.

A bidirectional GRU/LSTM reads the source into states h_i = [h_fwd_i; h_bwd_i]; the decoder
starts from s_0 = tanh(W_b [h_fwd_n; h_bwd_1]), layer by layer. Decoder step t:

    s_t = RNN(y_{t-1}, s_{t-1})     (with input feeding RNN([y_{t-1}; h~_{t-1}], s_{t-1}))
    a_t = softmax_i(score(s_t, h_i))    general: s_t^T W h_i; dot: s_t^T P h_i (/ sqrt(H): scaled)
    c_t = sum_i a_ti h_i
    h~_t = tanh(W_c [c_t; s_t]) (+ lexical(a_t, x))     the attentional vector
    logits_t = W_gen h~_t

Dot scoring compares s_t with the states directly, so the 2H states are first projected to H
(P above) and the context is H wide. Without input feeding nothing feeds back from the
attention into the RNN, so teacher forcing runs the RNN over the whole target in one fused call
and attends for all steps at once (much faster); with it, training steps through time.

Options for small corpora (on in configs/model/luong.yaml): lexical (Nguyen & Chiang 2018,
`LexicalOutput`), share_embeddings with tie_embeddings. Sparse attention weights
(`attention_fn`, seq2seq/models/attention.py) are measured, not a default.

Shapes: B batch, S source length, T target length, V target vocabulary, E embedding size,
H hidden size, L layers, K encoder state size (2H general, H dot), O output size (E when the
output layer is tied to the target embedding, else H).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.models.attention import DotAttention, GeneralAttention, LexicalOutput
from seq2seq.models.base import EncoderOutput
from seq2seq.models.layers import (
    RNNState,
    bridge_state,
    check_choice,
    encode_source,
    make_rnn,
    output_layer,
    rnn_run,
    rnn_step,
    source_embedding,
)
from seq2seq.tokenization import PAD_ID

SCORES = ("dot", "general")


class Luong(nn.Module):
    """Bidirectional RNN encoder and a decoder that steps, then attends with s_t.

    Args:
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size V.
        pad_id: the padding id of both vocabularies.
        name: the config's name (kept for messages and run folders).
        cell: "gru" or "lstm".
        score: "general" (s^T W h) or "dot" (s^T h, the states projected to H first).
        input_feeding: feed h~_{t-1} into step t (training then steps through time).
        emb_dim: embedding size E.
        hidden_size: H, per direction in the encoder and in the decoder.
        num_layers: layers of the encoder and of the decoder.
        dropout: on embeddings, between RNN layers and before the output projection.
        tie_embeddings: the target embedding is the output projection.
        share_embeddings: one embedding for source and target (needs a joint vocabulary).
        lexical: add the lexical model (`LexicalOutput`) to the attentional vector.
        attention_fn: "softmax", or a sparse mapping, "sparsemax" or "entmax15".
        scaled_score: divide the scores by sqrt(H), as the Transformer does (`DotAttention`).
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int = PAD_ID,
        name: str = "luong",
        cell: str = "gru",
        score: str = "general",
        input_feeding: bool = False,
        emb_dim: int = 256,
        hidden_size: int = 256,
        num_layers: int = 1,
        dropout: float = 0.2,
        tie_embeddings: bool = False,
        share_embeddings: bool = False,
        lexical: bool = False,
        attention_fn: str = "softmax",
        scaled_score: bool = False,
    ) -> None:
        super().__init__()
        check_choice("score", score, SCORES)
        self.name = name
        self.pad_id = pad_id
        self.tgt_vocab_size = tgt_vocab_size
        self.input_feeding = input_feeding
        out_size = emb_dim if tie_embeddings else hidden_size
        self.out_size = out_size
        memory_size = hidden_size if score == "dot" else 2 * hidden_size  # K

        # modules in this order: parameter creation order fixes the random initialisation
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb_dim, padding_idx=pad_id)
        self.src_emb = source_embedding(self.tgt_emb, src_vocab_size, share_embeddings)
        self.dropout = nn.Dropout(dropout)
        self.encoder = make_rnn(cell, emb_dim, hidden_size, num_layers, dropout, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden_size, hidden_size)
        self.memory_proj = nn.Linear(2 * hidden_size, hidden_size) if score == "dot" else None
        scale = hidden_size**-0.5 if scaled_score else 1.0  # the query s_t is H wide
        self.attention: DotAttention = (
            DotAttention(attention_fn, scale)
            if score == "dot"
            else GeneralAttention(hidden_size, memory_size, attention_fn, scale)
        )
        self.combine = nn.Linear(memory_size + hidden_size, out_size, bias=False)
        rnn_input = emb_dim + (out_size if input_feeding else 0)  # [y_{t-1}; h~_{t-1}]
        self.decoder = make_rnn(cell, rnn_input, hidden_size, num_layers, dropout)
        self.lexical = LexicalOutput(emb_dim, out_size) if lexical else None
        self.generator = output_layer(out_size, self.tgt_emb, tie_embeddings)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> states (B, S, K), keys (B, S, K), final (B, L * 2H)."""
        emb = self.dropout(self.src_emb(src_ids))  # (B, S, E)
        states, final = encode_source(self.encoder, emb, src_mask)  # (B, S, 2H), (B, L, 2H)
        if self.memory_proj is not None:
            states = self.memory_proj(states)  # (B, S, H)
        return EncoderOutput(
            states=states,
            mask=src_mask,
            final=final.flatten(1),
            keys=self.attention.project_keys(states),  # W h_i (general), once per sentence
            embedded=emb if self.lexical is not None else None,
        )

    def init_state(self, enc: EncoderOutput) -> RNNState:
        """s_0 = tanh(W_b [h_fwd_n; h_bwd_1]) per layer; with input feeding h~_0 = 0."""
        assert enc.final is not None
        state = bridge_state(self.bridge, self.decoder, enc.final)
        if self.input_feeding:
            state.feed = enc.final.new_zeros(enc.final.size(0), self.out_size)  # (B, O)
        return state

    def _attentional(self, context: Tensor, top: Tensor) -> Tensor:
        """h~ = tanh(W_c [c; s]): (..., K), (..., H) -> (..., O), one step or all steps."""
        return torch.tanh(self.combine(torch.cat([context, top], dim=-1)))

    def _step(
        self, emb: Tensor, state: RNNState, enc: EncoderOutput, log_weights: bool = False
    ) -> tuple[RNNState, Tensor, Tensor]:
        """Step, then attend with s_t: emb (B, E) -> s_t, h~_t (B, O), weights (B, S) (their
        log-softmax with `log_weights`)."""
        x = torch.cat([emb, state.feed], dim=-1) if state.feed is not None else emb
        state = rnn_step(self.decoder, x, state)
        top = state.hidden[-1]  # (B, H)
        context, weights = self.attention(top, enc.keys, enc.states, enc.mask,
                                          log_weights)  # (B, K), (B, S)
        attentional = self._attentional(context, top)
        if self.input_feeding:
            state.feed = attentional
        return state, attentional, weights

    def decode_step(
        self, prev_ids: Tensor, state: RNNState, enc: EncoderOutput
    ) -> tuple[Tensor, RNNState, Tensor]:
        """prev_ids (B,) -> logits (B, V), s_t, attention (B, S)."""
        emb = self.dropout(self.tgt_emb(prev_ids))  # (B, E)
        state, out, weights = self._step(emb, state, enc)  # out: (B, O)
        if self.lexical is not None:
            out = out + self.lexical(weights, enc.embedded)
        return self.generator(self.dropout(out)), state, weights

    def forward(
        self,
        src_ids: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attn: bool = True,
        output_positions: Tensor | None = None,
        project: bool = True,
        log_attn: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V) (or (N, V) at
        output_positions), attention (B, T, S) or None; project=False: the generator's inputs
        instead of logits; log_attn: the attention's log-softmax (guided alignment)."""
        enc = self.encode(src_ids, src_mask)
        state = self.init_state(enc)
        emb = self.dropout(self.tgt_emb(tgt_in))  # (B, T, E)
        if self.input_feeding:  # h~_{t-1} is part of step t's input: step through time
            outs, weights = [], []
            for emb_t in emb.unbind(dim=1):
                state, step_out, step_weights = self._step(emb_t, state, enc, log_attn)
                outs.append(step_out)
                weights.append(step_weights)
            out = torch.stack(outs, dim=1)  # (B, T, O)
            attn = torch.stack(weights, dim=1)  # (B, T, S)
        else:  # nothing feeds back: one fused RNN call, then attend for all steps at once
            tops, _ = rnn_run(self.decoder, emb, state)  # (B, T, H)
            context, attn = self.attention(tops, enc.keys, enc.states, enc.mask,
                                           log_attn)  # (B, T, K)
            out = self._attentional(context, tops)  # (B, T, O)
        if self.lexical is not None:
            out = out + self.lexical(attn.exp() if log_attn else attn, enc.embedded)
        if output_positions is not None:
            out = out.flatten(0, 1).index_select(0, output_positions)  # (N, O)
        out = self.dropout(out)
        logits = self.generator(out) if project else out  # (B, T, V) or (N, V)
        return logits, attn if need_attn else None

    def self_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> None:
        """No self-attention: its encoder and decoder are recurrent."""
        return None

    def cross_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> None:
        """No per-layer, per-head attention: `forward`'s (B, T, S) weights are all there is."""
        return None
