"""Pieces the recurrent models share: building, packing and stepping GRU/LSTM stacks, and the
embeddings, bridge and output layer of the attention models (bahdanau.py, luong.py).

A decoder keeps one `nn.GRU`/`nn.LSTM` module. Teacher forcing can run it over the whole target
in one fused call; stepping calls the same weights one layer at a time through `torch.gru_cell` /
`torch.lstm_cell`, so the two paths compute the same function.

Shapes: B batch, S source length, T target length, L layers, H hidden size, I input size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import _VF, Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq.errors import UserError
from seq2seq.models.base import reorder_tensors

CELLS = ("gru", "lstm")


class ModelConfigError(UserError, ValueError):
    """A model setting that cannot work (an unknown cell, tied embeddings over two vocabularies).

    A UserError, so entry points print one line; a ValueError, as Python code expects.
    """


def bf16_on_cpu(x: Tensor) -> bool:
    """Where torch 2.13's fused kernels are slow: in bf16 on a CPU its fused attention takes
    about 5x the time of matmul, softmax and matmul (forward and backward, B 64, H 4, T 32,
    K 64; in fp32 the fused one is faster), and F.dropout a little more than a mask and a
    multiply (scripts/measurements/bf16_kernels.py)."""
    return x.dtype == torch.bfloat16 and x.device.type == "cpu"


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout, but for bf16 on a CPU a mask from fp32 uniforms (`bf16_on_cpu`)."""
    if not training or p == 0.0 or not bf16_on_cpu(x):
        return F.dropout(x, p, training)
    if p == 1.0:
        return x * 0.0
    keep = torch.rand(x.shape, device=x.device) >= p
    return x * keep * (1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """nn.Dropout through `dropout` (the same module and state; faster in bf16 on a CPU)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ModelConfigError naming `model.<key>` unless `value` is one of `choices`."""
    if value not in choices:
        raise ModelConfigError(f"model.{key}={value!r} is not one of {', '.join(choices)}")


def check_joint_vocabulary(key: str, src_vocab_size: int, tgt_vocab_size: int) -> None:
    """Raise ModelConfigError unless both sides share one vocabulary, as `model.<key>` needs."""
    if src_vocab_size != tgt_vocab_size:
        raise ModelConfigError(
            f"model.{key}=true needs one joint vocabulary, but the source has "
            f"{src_vocab_size} pieces and the target {tgt_vocab_size}; "
            f"set tokenizer.joint=true or model.{key}=false"
        )


def make_rnn(
    cell: str,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool = False,
) -> nn.GRU | nn.LSTM:
    """A batch-first GRU or LSTM stack; `dropout` acts between layers only."""
    check_choice("cell", cell, CELLS)
    rnn_class = nn.GRU if cell == "gru" else nn.LSTM
    return rnn_class(
        input_size,
        hidden_size,
        num_layers=num_layers,
        dropout=dropout if num_layers > 1 else 0.0,
        bidirectional=bidirectional,
        batch_first=True,
    )


@dataclass
class RNNState:
    """Decoder state of the recurrent models; every tensor is batch-first for `reorder`.

    Attributes:
        hidden: L tensors (B, H), one per layer.
        cell: L tensors (B, H) for an LSTM, else None.
        feed: (B, D_out) the previous attentional vector (input feeding), else None.
    """

    hidden: tuple[Tensor, ...]
    cell: tuple[Tensor, ...] | None = None
    feed: Tensor | None = None

    def reorder(self, index: Tensor) -> RNNState:
        return reorder_tensors(self, index)


def encode_source(rnn: nn.GRU | nn.LSTM, emb: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Run an encoder RNN over padded input so each final state sits at its real last token.

    On a CPU each direction of each layer runs over the padded batch, the backward direction
    over every row reversed within its length (padding stays last, so it never reaches a real
    state). That is the packed sequence's function without its CPU backward, which fills a
    zero (tokens, gates) tensor for every time step: forward and backward 1.04x as fast at
    Ding's batches, 1.24x at the documentation corpus's and 2.85x at its longest sentences
    (scripts/measurements/encoder_backward.py, docs/benchmark.md). On CUDA cuDNN runs the packed
    sequence.

    Args:
        rnn: a batch-first encoder (uni- or bidirectional).
        emb: (B, S, I) embedded source.
        mask: (B, S) True at real tokens; every row has at least one.

    Returns:
        states (B, S, H * directions), zero at padding, and the final hidden state
        (B, L, directions * H) with each layer's directions concatenated.
    """
    if emb.is_cuda:
        return encode_packed_sequence(rnn, emb, mask)
    batch, src_len = mask.shape
    lengths = mask.sum(dim=1)
    positions = torch.arange(src_len, device=emb.device)
    # a row read backwards within its length: an involution that leaves padding in place
    reverse = torch.where(mask, lengths[:, None] - 1 - positions, positions)[..., None]
    last = (lengths - 1)[:, None, None].expand(batch, 1, rnn.hidden_size)
    run = _VF.lstm if isinstance(rnn, nn.LSTM) else _VF.gru
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")[: 4 if rnn.bias else 2]
    x, finals = emb, []
    for layer in range(rnn.num_layers):
        if layer:
            x = F.dropout(x, rnn.dropout, rnn.training)
        outputs = []
        for suffix in ("", "_reverse")[: 2 if rnn.bidirectional else 1]:
            weights = [getattr(rnn, f"{name}_l{layer}{suffix}") for name in names]
            start = emb.new_zeros(1, batch, rnn.hidden_size)
            hidden = (start, start) if run is _VF.lstm else start
            reads = x.gather(1, reverse.expand_as(x)) if suffix else x
            out = run(reads, hidden, weights, rnn.bias, 1, 0.0, rnn.training, False, True)[0]
            finals.append(out.gather(1, last)[:, 0])  # (B, H): the state after the last read
            outputs.append(out.gather(1, reverse.expand_as(out)) if suffix else out)
        x = torch.cat(outputs, dim=-1)
    states = x.masked_fill(~mask[..., None], 0.0)
    return states, torch.stack(finals, dim=1).view(batch, rnn.num_layers, -1)


def encode_packed_sequence(
    rnn: nn.GRU | nn.LSTM, emb: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """`encode_source` through a PackedSequence: cuDNN's way on CUDA, the reference in tests."""
    lengths = mask.sum(dim=1).cpu()
    packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
    packed_out, final = rnn(packed)
    if isinstance(final, tuple):  # LSTM: (h_n, c_n); the summary is h_n
        final = final[0]
    states, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=emb.size(1))
    directions = 2 if rnn.bidirectional else 1
    batch = emb.size(0)
    final = final.view(rnn.num_layers, directions, batch, rnn.hidden_size)
    final = final.permute(2, 0, 1, 3).reshape(batch, rnn.num_layers, -1)  # (B, L, dirs * H)
    return states, final


def initial_state(rnn: nn.GRU | nn.LSTM, hidden: Tensor) -> RNNState:
    """Decoder state from (B, L, H) initial hidden vectors; an LSTM's cell starts equal to them."""
    layers = tuple(hidden.unbind(dim=1))
    return RNNState(hidden=layers, cell=layers if isinstance(rnn, nn.LSTM) else None)


def source_embedding(tgt_emb: nn.Embedding, src_vocab_size: int, share: bool) -> nn.Embedding:
    """The source embedding: `tgt_emb` itself when `share` (one joint vocabulary), else a new
    table of the same width and padding id."""
    if not share:
        return nn.Embedding(src_vocab_size, tgt_emb.embedding_dim, padding_idx=tgt_emb.padding_idx)
    check_joint_vocabulary("share_embeddings", src_vocab_size, tgt_emb.num_embeddings)
    return tgt_emb


def bridge_state(bridge: nn.Linear, decoder: nn.GRU | nn.LSTM, final: Tensor) -> RNNState:
    """The decoder's initial state tanh(W [h_fwd; h_bwd]) of a bidirectional encoder's final
    states, layer by layer.

    Args:
        bridge: the linear map W, 2H -> H.
        decoder: the decoder stack (L layers).
        final: (B, L * 2H) `EncoderOutput.final`.
    """
    final = final.view(final.size(0), decoder.num_layers, -1)  # (B, L, 2H)
    return initial_state(decoder, torch.tanh(bridge(final)))


def output_layer(out_size: int, tgt_emb: nn.Embedding, tie: bool) -> nn.Linear:
    """The projection of the output vector to the target vocabulary, (..., O) -> (..., V).

    No bias, as in JoeyNMT and fairseq: the layer before it has one, and adding a (N, V) bias
    costs as much as a fifth of the projection on a CPU. Tied: the target embedding's matrix,
    rescaled by `init_output_embedding` (O must then be E).
    """
    generator = nn.Linear(out_size, tgt_emb.num_embeddings, bias=False)
    if tie:
        generator.weight = tgt_emb.weight
        init_output_embedding(tgt_emb)
    return generator


def init_output_embedding(emb: nn.Embedding) -> None:
    """Rescale an embedding that is also the output projection to N(0, 1/E), padding row zero.

    nn.Embedding's N(0, 1) rows would make the first logits as large as sqrt(E): on Ding the
    loss was still 9.2 after 120 updates (4.8 untied), and the model lagged for a thousand.
    """
    nn.init.normal_(emb.weight, std=emb.embedding_dim**-0.5)
    if emb.padding_idx is not None:
        with torch.no_grad():
            emb.weight[emb.padding_idx].zero_()


def input_gates(rnn: nn.GRU | nn.LSTM, leading: Tensor) -> Tensor:
    """The first layer's input-gate term of the leading input features, W_ih[:, :k] x + b_ih.

    A decoder whose step input is [x_t; c_t] with x_t known in advance (the embedded previous
    word under teacher forcing) computes this for all steps in one large matrix product and
    passes each step's slice to `rnn_step(..., gates=...)` with c_t alone.

    Args:
        rnn: the decoder stack.
        leading: (..., k) the leading k features of the first layer's input.

    Returns:
        (..., G) with G = 3H (GRU) or 4H (LSTM).
    """
    weight = rnn.weight_ih_l0
    return F.linear(leading, weight[:, : leading.size(-1)], rnn.bias_ih_l0)


def _cell_from_gates(
    gates: Tensor, hidden: Tensor, cell: Tensor | None, w_hh: Tensor, b_hh: Tensor
) -> tuple[Tensor, Tensor | None]:
    """One GRU/LSTM cell step from its full input-gate term W_ih x + b_ih, as torch.gru_cell /
    torch.lstm_cell compute it (gate order r, z, n and i, f, g, o)."""
    size = hidden.size(1)
    if cell is None:  # GRU
        hidden_gates = F.linear(hidden, w_hh, b_hh)  # (B, 3H)
        rz = torch.sigmoid(gates[:, : 2 * size] + hidden_gates[:, : 2 * size])
        reset, update = rz[:, :size], rz[:, size:]
        new = torch.tanh(torch.addcmul(gates[:, 2 * size :], reset, hidden_gates[:, 2 * size :]))
        return torch.lerp(new, hidden, update), None  # (1 - z) * n + z * h
    all_gates = torch.addmm(gates, hidden, w_hh.t()) + b_hh  # (B, 4H)
    in_gate, forget, candidate, out_gate = all_gates.chunk(4, dim=1)
    cell = torch.sigmoid(forget) * cell + torch.sigmoid(in_gate) * torch.tanh(candidate)
    return torch.sigmoid(out_gate) * torch.tanh(cell), cell


def rnn_step(
    rnn: nn.GRU | nn.LSTM, x: Tensor | None, state: RNNState, gates: Tensor | None = None
) -> RNNState:
    """Advance a unidirectional stack by one time step with the module's own weights.

    Args:
        rnn: the decoder stack.
        x: (B, I) input of this step; with `gates`, only the trailing features of the first
            layer's input, or None when `gates` covers all of it.
        state: hidden (and cell) per layer; `feed` is carried over unchanged.
        gates: (B, G) `input_gates` of the leading input features of this step, or None.

    Returns:
        The new state; its top-layer hidden is the step's output.
    """
    hidden: list[Tensor] = []
    cells: list[Tensor] = []
    for layer in range(rnn.num_layers):
        if layer > 0:
            x = F.dropout(x, rnn.dropout, rnn.training)
        weights = (
            getattr(rnn, f"weight_ih_l{layer}"),
            getattr(rnn, f"weight_hh_l{layer}"),
            getattr(rnn, f"bias_ih_l{layer}"),
            getattr(rnn, f"bias_hh_l{layer}"),
        )
        cell = state.cell[layer] if state.cell is not None else None
        if layer == 0 and gates is not None:
            w_ih = weights[0]
            full = gates
            if x is not None:
                full = torch.addmm(gates, x, w_ih[:, w_ih.size(1) - x.size(1) :].t())
            x, c = _cell_from_gates(full, state.hidden[layer], cell, weights[1], weights[3])
        elif x is None:
            raise ValueError("rnn_step needs x or gates")
        elif cell is None:
            x, c = torch.gru_cell(x, state.hidden[layer], *weights), None
        else:
            x, c = torch.lstm_cell(x, (state.hidden[layer], cell), *weights)
        hidden.append(x)
        if c is not None:
            cells.append(c)
    return RNNState(
        hidden=tuple(hidden), cell=tuple(cells) if state.cell is not None else None, feed=state.feed
    )


def rnn_run(rnn: nn.GRU | nn.LSTM, x: Tensor, state: RNNState) -> tuple[Tensor, RNNState]:
    """Run a unidirectional stack over a whole sequence in one fused call.

    Args:
        rnn: the decoder stack.
        x: (B, T, I) inputs of all steps.
        state: the state before the first step.

    Returns:
        outputs (B, T, H) of the top layer and the state after the last step.
    """
    h0 = torch.stack(state.hidden)  # (L, B, H)
    if state.cell is None:
        outputs, h_n = rnn(x, h0)
        return outputs, RNNState(hidden=tuple(h_n.unbind(0)), feed=state.feed)
    outputs, (h_n, c_n) = rnn(x, (h0, torch.stack(state.cell)))
    return outputs, RNNState(
        hidden=tuple(h_n.unbind(0)), cell=tuple(c_n.unbind(0)), feed=state.feed
    )
