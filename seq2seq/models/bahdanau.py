"""Bahdanau et al. (2014): attend with the previous decoder state, then step.

A bidirectional GRU/LSTM reads the source into states h_i = [h_fwd_i; h_bwd_i]; the decoder
starts from s_0 = tanh(W_b [h_fwd_n; h_bwd_1]), layer by layer. Decoder step t:

    a_t = softmax_i(v^T tanh(W s_{t-1} + Y y_{t-1} + U h_i))     additive scores of s_{t-1}
    c_t = sum_i a_ti h_i                                           the context
    s_t = RNN([y_{t-1}; c_t], s_{t-1})                             the step reads the context
    o_t = tanh(W_o [s_t; c_t; y_{t-1}]) (+ lexical(a_t, x))        the output vector
    logits_t = W_gen o_t

The term Y y_{t-1} is there with `query_word` only: the step that chooses where to look then
knows the word it has just written, which Bahdanau's s_{t-1} has not read.

Options for small corpora (on in configs/model/bahdanau.yaml): query_word; lexical (Nguyen &
Chiang 2018: the attended average of the source embeddings reaches the output vector through
one small layer, `LexicalOutput`); share_embeddings with tie_embeddings (one matrix for both
embeddings and the output layer).

Measured, not defaults, kept while validation runs decide: the conditional GRU/LSTM of Nematus
(Sennrich et al. 2017; every line of it is marked "conditional", removable as one deletion), and
sparse attention weights (`attention_fn`, seq2seq/models/attention.py).

Shapes: B batch, S source length, T target length, V target vocabulary, E embedding size,
H hidden size, L layers, A attention size, G input-gate size (3H GRU, 4H LSTM), O output size
(E when the output layer is tied to the target embedding, else H).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.models.attention import AdditiveAttention, LexicalOutput
from seq2seq.models.base import EncoderOutput
from seq2seq.models.layers import (
    RNNState,
    bridge_state,
    encode_source,
    input_gates,
    make_rnn,
    output_layer,
    rnn_step,
    source_embedding,
)
from seq2seq.tokenization import PAD_ID

# Teacher forcing recomputes the additive scores' tanh in backward when keeping it would take
# more than this (B*T*S*attn_dim floats): long batches only. Ding's 1,500-token batches keep at
# most 132 MiB (B*max(S, T) <= 1,500, targets up to 89 pieces), so Ding never recomputes; a
# 4,096-token docs batch of 30-piece pairs keeps 120 MiB, one of 230-piece pairs 0.85 GiB.
RECOMPUTE_ATTENTION_BYTES = 256 * 2**20


class Bahdanau(nn.Module):
    """Bidirectional RNN encoder and a decoder that attends with s_{t-1}, then steps.

    Args:
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size V.
        pad_id: the padding id of both vocabularies.
        name: the config's name (kept for messages and run folders).
        cell: "gru" or "lstm".
        emb_dim: embedding size E.
        hidden_size: H, per direction in the encoder and in the decoder.
        attn_dim: the additive scorer's hidden size A.
        num_layers: layers of the encoder and of the decoder.
        dropout: on embeddings, between RNN layers and before the output projection.
        tie_embeddings: the target embedding is the output projection.
        share_embeddings: one embedding for source and target (needs a joint vocabulary).
        lexical: add the lexical model (`LexicalOutput`) to the output vector.
        query_word: the previous target word joins s_{t-1} in the attention query.
        conditional: the conditional GRU/LSTM: s'_t = RNN(y_{t-1}, s_{t-1}) queries, and
            s_t = RNN_2(c_t, s'_t) reads the context (on the top layer of a stack).
        attention_fn: "softmax", or a sparse mapping, "sparsemax" or "entmax15".
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int = PAD_ID,
        name: str = "bahdanau",
        cell: str = "gru",
        emb_dim: int = 256,
        hidden_size: int = 256,
        attn_dim: int = 256,
        num_layers: int = 1,
        dropout: float = 0.2,
        tie_embeddings: bool = False,
        share_embeddings: bool = False,
        lexical: bool = False,
        query_word: bool = False,
        conditional: bool = False,
        attention_fn: str = "softmax",
    ) -> None:
        super().__init__()
        self.name = name
        self.pad_id = pad_id
        self.tgt_vocab_size = tgt_vocab_size
        out_size = emb_dim if tie_embeddings else hidden_size

        # modules in this order: parameter creation order fixes the random initialisation
        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb_dim, padding_idx=pad_id)
        self.src_emb = source_embedding(self.tgt_emb, src_vocab_size, share_embeddings)
        self.dropout = nn.Dropout(dropout)
        self.encoder = make_rnn(cell, emb_dim, hidden_size, num_layers, dropout, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden_size, hidden_size)
        self.attention = AdditiveAttention(hidden_size, 2 * hidden_size, attn_dim, attention_fn)
        # conditional: a second transition reads c_t, so the decoder RNN reads y_{t-1} alone
        self.context_rnn = (
            make_rnn(cell, 2 * hidden_size, hidden_size, 1, 0.0) if conditional else None
        )
        rnn_input = emb_dim if conditional else emb_dim + 2 * hidden_size  # [y_{t-1}; c_t]
        self.combine = nn.Linear(hidden_size + 2 * hidden_size + emb_dim, out_size)
        self.decoder = make_rnn(cell, rnn_input, hidden_size, num_layers, dropout)
        self.lexical = LexicalOutput(emb_dim, out_size) if lexical else None
        self.word_query = nn.Linear(emb_dim, attn_dim, bias=False) if query_word else None
        self.generator = output_layer(out_size, self.tgt_emb, tie_embeddings)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> states (B, S, 2H), keys (B, S, A), final (B, L * 2H)."""
        emb = self.dropout(self.src_emb(src_ids))  # (B, S, E)
        states, final = encode_source(self.encoder, emb, src_mask)  # (B, S, 2H), (B, L, 2H)
        return EncoderOutput(
            states=states,
            mask=src_mask,
            final=final.flatten(1),
            keys=self.attention.project_keys(states),  # U h_i, once per sentence
            embedded=emb if self.lexical is not None else None,
        )

    def init_state(self, enc: EncoderOutput) -> RNNState:
        """s_0 = tanh(W_b [h_fwd_n; h_bwd_1]) per layer."""
        assert enc.final is not None
        return bridge_state(self.bridge, self.decoder, enc.final)

    def _step(
        self,
        gates: Tensor,
        word_query: Tensor | None,
        state: RNNState,
        enc: EncoderOutput,
        recompute: bool = False,
        log_weights: bool = False,
    ) -> tuple[RNNState, Tensor, Tensor]:
        """One decoder step after the embedding: attend, then step.

        Args:
            gates: (B, G) the embedding's share of the RNN input gates (`input_gates`).
            word_query: (B, A) Y y_{t-1}, or None without `query_word`.
            state: s_{t-1}.
            enc: the encoder output.
            recompute: the attention recomputes its tanh in backward (`score_recomputed`).
            log_weights: return the weights' log-softmax (guided alignment).

        Returns:
            s_t, the context c_t (B, 2H) and the weights a_t (B, S) (their log with
            `log_weights`).
        """
        if self.context_rnn is not None:  # conditional
            return self._conditional_step(gates, word_query, state, enc, recompute, log_weights)
        context, weights = self.attention(
            state.hidden[-1], enc.keys, enc.states, enc.mask, word_query, recompute, log_weights
        )  # s_{t-1} queries: (B, 2H), (B, S)
        state = rnn_step(self.decoder, context, state, gates=gates)  # RNN([y_{t-1}; c_t])
        return state, context, weights

    def _conditional_step(
        self,
        gates: Tensor,
        word_query: Tensor | None,
        state: RNNState,
        enc: EncoderOutput,
        recompute: bool,
        log_weights: bool = False,
    ) -> tuple[RNNState, Tensor, Tensor]:
        """conditional: s'_t = RNN(y_{t-1}, s_{t-1}) queries; s_t = RNN_2(c_t, s'_t) on the
        top layer. Arguments and results as `_step`."""
        state = rnn_step(self.decoder, None, state, gates=gates)  # s'_t
        context, weights = self.attention(
            state.hidden[-1], enc.keys, enc.states, enc.mask, word_query, recompute, log_weights
        )
        assert self.context_rnn is not None
        top = RNNState(
            hidden=state.hidden[-1:], cell=state.cell[-1:] if state.cell is not None else None
        )
        top = rnn_step(self.context_rnn, context, top)  # s_t
        cell = None if state.cell is None or top.cell is None else state.cell[:-1] + top.cell
        return RNNState(hidden=state.hidden[:-1] + top.hidden, cell=cell), context, weights

    def _output(self, top: Tensor, context: Tensor, emb: Tensor) -> Tensor:
        """o = tanh(W_o [s_t; c_t; y_{t-1}]): (..., H), (..., 2H), (..., E) -> (..., O), for
        one step or all steps at once."""
        return torch.tanh(self.combine(torch.cat([top, context, emb], dim=-1)))

    def decode_step(
        self, prev_ids: Tensor, state: RNNState, enc: EncoderOutput
    ) -> tuple[Tensor, RNNState, Tensor]:
        """prev_ids (B,) -> logits (B, V), s_t, attention (B, S)."""
        emb = self.dropout(self.tgt_emb(prev_ids))  # (B, E)
        gates = input_gates(self.decoder, emb)  # (B, G)
        word_query = self.word_query(emb) if self.word_query is not None else None  # (B, A)
        state, context, weights = self._step(gates, word_query, state, enc)
        out = self._output(state.hidden[-1], context, emb)  # (B, O)
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
        instead of logits; log_attn: the attention's log, a log-softmax of its scores (guided
        alignment's KL, whose gradient it keeps exact).

        The decoder steps T times (each step's query is the previous step's state); what does
        not feed back, the embedding's gate and query terms and the output layer, runs once for
        all steps.
        """
        enc = self.encode(src_ids, src_mask)
        state = self.init_state(enc)
        emb = self.dropout(self.tgt_emb(tgt_in))  # (B, T, E)
        gates = input_gates(self.decoder, emb)  # (B, T, G)
        word_queries: list[Tensor | None] = (
            list(self.word_query(emb).unbind(dim=1))  # T x (B, A)
            if self.word_query is not None
            else [None] * emb.size(1)
        )
        assert enc.keys is not None
        kept = enc.keys.numel() * emb.size(1) * enc.keys.element_size()  # B*S*A*T
        recompute = torch.is_grad_enabled() and kept > RECOMPUTE_ATTENTION_BYTES
        tops, contexts, weights = [], [], []
        # unbind: its backward is one stack, not T copies
        for gates_t, word_t in zip(gates.unbind(dim=1), word_queries, strict=True):
            state, context, step_weights = self._step(gates_t, word_t, state, enc, recompute,
                                                      log_attn)
            tops.append(state.hidden[-1])
            contexts.append(context)
            weights.append(step_weights)
        out = self._output(torch.stack(tops, 1), torch.stack(contexts, 1), emb)  # (B, T, O)
        attn = torch.stack(weights, dim=1)  # (B, T, S)
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
