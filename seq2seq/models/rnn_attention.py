"""Recurrent encoder-decoder with attention: Bahdanau et al. (2014) and Luong et al. (2015).

The encoder is a bidirectional GRU/LSTM; the decoder a unidirectional stack whose initial state
is tanh(W [h_fwd; h_bwd]) of the encoder's final states, layer by layer.

score="additive" (Bahdanau): the previous decoder state s_{t-1} queries the encoder states,
  c_t = sum_i a_ti h_i enters the RNN input with the previous word, and the output layer reads
  [s_t; c_t; y_{t-1}]. The context always feeds the RNN, so `input_feeding` has no effect here.
  With `conditional` (the conditional GRU of Nematus, Sennrich et al. 2017) the step has two
  transitions: s'_t = RNN_1(y_{t-1}, s_{t-1}) reads the previous word, s'_t queries the encoder
  states, and s_t = RNN_2(c_t, s'_t) reads the context (on the top layer of a stack).
score="dot" | "general" (Luong): the RNN steps first; its state s_t then queries the encoder
  states and h~_t = tanh(W_c [c_t; s_t]) feeds the output layer. With input feeding h~_{t-1} is
  part of the next input, so training steps through time. Without it, training runs the decoder
  RNN over the whole target in one fused call and attends for all steps at once (much faster).

Options for small corpora (on by default in configs/model/bahdanau.yaml and luong.yaml):
query_word (Bahdanau: y_{t-1} joins s_{t-1} in the query), lexical (Nguyen & Chiang 2018: the
attended average of the source embeddings reaches the output vector through one small layer)
and share_embeddings with tie_embeddings (one matrix for both embeddings and the output layer).
Off by default (measured in the config): conditional, and sparse attention weights
(attention_fn, seq2seq/models/attention.py).

Shapes: B batch, S source length, T target length, V target vocabulary, E embedding size,
H hidden size, K encoder state size (2H, or H for dot scoring), O output size (E when the
output layer is tied to the target embedding, else H).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.models.attention import (
    ATTENTION_FNS,
    AdditiveAttention,
    DotAttention,
    GeneralAttention,
    LexicalOutput,
)
from seq2seq.models.base import EncoderOutput
from seq2seq.models.layers import (
    ModelConfigError,
    RNNState,
    check_choice,
    check_joint_vocabulary,
    encode_packed,
    init_output_embedding,
    initial_state,
    input_gates,
    make_rnn,
    rnn_run,
    rnn_step,
)
from seq2seq.tokenization import PAD_ID

SCORES = ("additive", "dot", "general")


class AttentionRNN(nn.Module):
    """Bidirectional RNN encoder and attentional RNN decoder.

    Args:
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size V.
        pad_id: the padding id of both vocabularies.
        name: the config's name (kept for messages).
        cell: "gru" or "lstm".
        score: "additive" (Bahdanau), "dot" or "general" (Luong).
        input_feeding: Luong only: feed h~_{t-1} into the next step (Bahdanau's context
            always feeds the RNN, so asking for it there is an error).
        emb_dim: embedding size E.
        hidden_size: H, per direction in the encoder and in the decoder.
        attn_dim: the additive scorer's hidden size.
        num_layers: layers of the encoder and of the decoder.
        dropout: on embeddings, between RNN layers and before the output projection.
        tie_embeddings: share the target embedding with the output projection.
        share_embeddings: one embedding for source and target (needs a joint vocabulary).
        lexical: add the lexical model (`LexicalOutput`) to the output vector.
        query_word: Bahdanau only: the previous target word joins s_{t-1} in the attention
            query, v^T tanh(W s_{t-1} + Y y_{t-1} + U h_i), so the step that chooses where to
            look knows which word it has just written.
        conditional: Bahdanau only: the conditional GRU/LSTM (see the module docstring); the
            query s'_t has read y_{t-1} through the recurrent transition.
        attention_fn: "softmax", or a sparse mapping, "sparsemax" or "entmax15"
            (seq2seq/models/attention.py).
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int = PAD_ID,
        name: str = "bahdanau",
        cell: str = "gru",
        score: str = "additive",
        input_feeding: bool = False,
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
        check_choice("score", score, SCORES)
        check_choice("attention_fn", attention_fn, tuple(ATTENTION_FNS))
        self.name = name
        self.pad_id = pad_id
        self.tgt_vocab_size = tgt_vocab_size
        self.num_layers = num_layers
        self.bahdanau = score == "additive"
        if input_feeding and self.bahdanau:
            raise ModelConfigError(
                "model.input_feeding=true is for Luong's scorers (dot, general); with "
                "model.score=additive the context always feeds the RNN"
            )
        self.input_feeding = input_feeding
        out_size = emb_dim if tie_embeddings else hidden_size
        self.out_size = out_size

        self.tgt_emb = nn.Embedding(tgt_vocab_size, emb_dim, padding_idx=pad_id)
        if share_embeddings:
            check_joint_vocabulary("share_embeddings", src_vocab_size, tgt_vocab_size)
        self.src_emb = (
            self.tgt_emb
            if share_embeddings
            else nn.Embedding(src_vocab_size, emb_dim, padding_idx=pad_id)
        )
        self.dropout = nn.Dropout(dropout)
        self.encoder = make_rnn(cell, emb_dim, hidden_size, num_layers, dropout, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden_size, hidden_size)

        # dot scoring compares s_t with h_i directly, so the 2H encoder states are projected to H
        self.memory_proj = nn.Linear(2 * hidden_size, hidden_size) if score == "dot" else None
        memory_size = hidden_size if score == "dot" else 2 * hidden_size
        self.attention: AdditiveAttention | DotAttention
        if score == "additive":
            self.attention = AdditiveAttention(hidden_size, memory_size, attn_dim, attention_fn)
        elif score == "dot":
            self.attention = DotAttention(attention_fn)
        else:
            self.attention = GeneralAttention(hidden_size, memory_size, attention_fn)

        # conditional: the second transition reads c_t into the top layer's state
        self.context_rnn = (
            make_rnn(cell, memory_size, hidden_size, 1, 0.0)
            if conditional and self.bahdanau
            else None
        )
        if self.bahdanau:
            rnn_input = emb_dim + (0 if self.context_rnn is not None else memory_size)
            self.combine = nn.Linear(hidden_size + memory_size + emb_dim, out_size)
        else:
            rnn_input = emb_dim + (out_size if self.input_feeding else 0)
            self.combine = nn.Linear(memory_size + hidden_size, out_size, bias=False)
        self.decoder = make_rnn(cell, rnn_input, hidden_size, num_layers, dropout)
        self.lexical = LexicalOutput(emb_dim, out_size) if lexical else None
        use_word = query_word and self.bahdanau
        self.word_query = nn.Linear(emb_dim, attn_dim, bias=False) if use_word else None
        # no bias, as in JoeyNMT and fairseq: the combine layer before it has one, and adding an
        # (N, V) bias costs as much as a fifth of the output projection on a CPU
        self.generator = nn.Linear(out_size, tgt_vocab_size, bias=False)
        if tie_embeddings:
            self.generator.weight = self.tgt_emb.weight
            init_output_embedding(self.tgt_emb)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> states (B, S, K), keys, final (B, L * 2H)."""
        emb = self.dropout(self.src_emb(src_ids))  # (B, S, E)
        states, final = encode_packed(self.encoder, emb, src_mask)  # (B, S, 2H), (B, L, 2H)
        if self.memory_proj is not None:
            states = self.memory_proj(states)  # (B, S, H)
        keys = self.attention.project_keys(states)
        embedded = emb if self.lexical is not None else None
        return EncoderOutput(
            states=states, mask=src_mask, final=final.flatten(1), keys=keys, embedded=embedded
        )

    def init_state(self, enc: EncoderOutput) -> RNNState:
        assert enc.final is not None
        batch = enc.final.size(0)
        final = enc.final.view(batch, self.num_layers, -1)  # (B, L, 2H)
        state = initial_state(self.decoder, torch.tanh(self.bridge(final)))
        if self.input_feeding:
            state.feed = enc.final.new_zeros(batch, self.out_size)
        return state

    def _bahdanau_step(
        self, gates: Tensor, word_query: Tensor | None, state: RNNState, enc: EncoderOutput
    ) -> tuple[RNNState, Tensor, Tensor]:
        """Attend with s_{t-1} (and Y y_{t-1}: word_query (B, A) or None), then step on
        [y_{t-1}; c_t]: the embedding's input-gate term gates (B, G) -> state, context (B, K),
        weights (B, S). Conditional: step on y_{t-1}, attend with s'_t, step on c_t."""
        if self.context_rnn is not None:
            state = rnn_step(self.decoder, None, state, gates=gates)  # s'_t
        context, weights = self.attention(
            state.hidden[-1], enc.keys, enc.states, enc.mask, query_extra=word_query
        )
        if self.context_rnn is None:
            return rnn_step(self.decoder, context, state, gates=gates), context, weights
        top = RNNState(
            hidden=state.hidden[-1:], cell=state.cell[-1:] if state.cell is not None else None
        )
        top = rnn_step(self.context_rnn, context, top)  # s_t
        cell = None if state.cell is None or top.cell is None else state.cell[:-1] + top.cell
        return RNNState(hidden=state.hidden[:-1] + top.hidden, cell=cell), context, weights

    def _bahdanau_output(self, top: Tensor, context: Tensor, emb: Tensor) -> Tensor:
        """[s_t; c_t; y_{t-1}] -> (..., O), for one step or all steps at once."""
        return torch.tanh(self.combine(torch.cat([top, context, emb], dim=-1)))

    def _luong_step(
        self, emb: Tensor, state: RNNState, enc: EncoderOutput
    ) -> tuple[RNNState, Tensor, Tensor]:
        """Step, then attend with s_t: emb (B, E) -> state, h~ (B, O), weights (B, S)."""
        x = torch.cat([emb, state.feed], dim=-1) if state.feed is not None else emb
        state = rnn_step(self.decoder, x, state)
        top = state.hidden[-1]  # (B, H)
        context, weights = self.attention(top, enc.keys, enc.states, enc.mask)
        attentional = torch.tanh(self.combine(torch.cat([context, top], dim=-1)))
        if self.input_feeding:
            state.feed = attentional
        return state, attentional, weights

    def decode_step(
        self, prev_ids: Tensor, state: RNNState, enc: EncoderOutput
    ) -> tuple[Tensor, RNNState, Tensor]:
        """prev_ids (B,) -> logits (B, V), new state, attention (B, S)."""
        emb = self.dropout(self.tgt_emb(prev_ids))  # (B, E)
        if self.bahdanau:
            gates = input_gates(self.decoder, emb)
            word_query = self.word_query(emb) if self.word_query is not None else None
            state, context, weights = self._bahdanau_step(gates, word_query, state, enc)
            out = self._bahdanau_output(state.hidden[-1], context, emb)
        else:
            state, out, weights = self._luong_step(emb, state, enc)
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
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V) (or (N, V) at
        output_positions), attention (B, T, S) or None."""
        enc = self.encode(src_ids, src_mask)
        state = self.init_state(enc)
        emb = self.dropout(self.tgt_emb(tgt_in))  # (B, T, E), embedded once for all steps
        if self.bahdanau:
            tops, contexts, weights = [], [], []
            # the embeddings' share of the RNN input gates, for all steps in one product
            gates = input_gates(self.decoder, emb)  # (B, T, G)
            word_queries: list[Tensor | None] = (
                list(self.word_query(emb).unbind(dim=1))  # (B, A) per step, one product
                if self.word_query is not None
                else [None] * emb.size(1)
            )
            # unbind: its backward is one stack, not T copies
            for gates_t, word_t in zip(gates.unbind(dim=1), word_queries, strict=True):
                state, context, step_weights = self._bahdanau_step(gates_t, word_t, state, enc)
                tops.append(state.hidden[-1])
                contexts.append(context)
                weights.append(step_weights)
            # the output layer does not feed back, so it runs once over all steps
            out = self._bahdanau_output(torch.stack(tops, 1), torch.stack(contexts, 1), emb)
            attn = torch.stack(weights, dim=1)  # (B, T, S)
        elif self.input_feeding:
            outs, weights = [], []
            for emb_t in emb.unbind(dim=1):
                state, step_out, step_weights = self._luong_step(emb_t, state, enc)
                outs.append(step_out)
                weights.append(step_weights)
            out = torch.stack(outs, dim=1)  # (B, T, O)
            attn = torch.stack(weights, dim=1)  # (B, T, S)
        else:
            tops, _ = rnn_run(self.decoder, emb, state)  # (B, T, H) in one fused call
            context, attn = self.attention(tops, enc.keys, enc.states, enc.mask)
            out = torch.tanh(self.combine(torch.cat([context, tops], dim=-1)))  # (B, T, O)
        if self.lexical is not None:
            out = out + self.lexical(attn, enc.embedded)
        if output_positions is not None:
            out = out.flatten(0, 1).index_select(0, output_positions)  # (N, O)
        logits = self.generator(self.dropout(out))  # (B, T, V) or (N, V)
        return logits, attn if need_attn else None
