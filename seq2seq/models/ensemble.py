"""Several trained models decoding as one: the `Ensemble` keeps the model Protocol, so greedy
and beam search (`seq2seq.search`) serve it unchanged.

At every step each member scores the next token on its own; the ensemble's log-probability is
the log of the mean of the members' probabilities, log(1/M * sum_m p_m(y)), as fairseq's
EnsembleModel averages (not the mean of the log-probabilities). Its attention is the mean of
the members' attention over the source (B, S): a Transformer member contributes its last
layer's weights averaged over heads, the row its heatmaps show; a member without attention
(vanilla) contributes none. The members must share the target vocabulary (in practice one
tokenizer: `seq2seq.inference.load_models` checks it), and any variants may be mixed.

Shapes: M members, B batch, S source length, T target length, V target vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from seq2seq.models.base import DecoderState, EncoderOutput, reorder_tensors


@dataclass
class EnsembleEncoderOutput(EncoderOutput):
    """The members' encoder outputs side by side. `states` is empty, (B, S, 0): the ensemble has
    no encoder states of its own; `mask` is the source mask all members share."""

    members: tuple[EncoderOutput, ...] = ()

    def reorder(self, index: Tensor) -> EnsembleEncoderOutput:
        """Select (and repeat) batch rows of every member's output."""
        return replace(reorder_tensors(self, index),
                       members=tuple(member.reorder(index) for member in self.members))


@dataclass
class EnsembleState:
    """The members' decoder states, in member order; beam search reorders each."""

    members: tuple[DecoderState, ...]

    def reorder(self, index: Tensor) -> EnsembleState:
        return EnsembleState(tuple(state.reorder(index) for state in self.members))


def mean_log_probs(logits: Sequence[Tensor]) -> Tensor:
    """M tensors of logits (..., V) -> log of the mean of their softmax probabilities (..., V),
    float32, computed as logsumexp over members minus log M (no probability underflows)."""
    log_probs = torch.stack([torch.log_softmax(x.float(), dim=-1) for x in logits])  # (M, ..., V)
    return torch.logsumexp(log_probs, dim=0) - math.log(len(logits))


def mean_attention(weights: Sequence[Tensor | None]) -> Tensor | None:
    """The mean of the members' attention that exist (float32); None when no member has one."""
    present = [w.float() for w in weights if w is not None]
    return torch.stack(present).mean(dim=0) if present else None


class Ensemble(nn.Module):
    """Models of the Protocol decoding as one model (see the module docstring).

    `decode_step` and `forward` return log-probabilities in place of logits: they are already
    normalised, so the searches' log-softmax leaves them as they are (up to rounding).
    `cross_attention` is None: the per-layer and per-head readings of a Transformer (its best
    head, Shift-Att) are a single model's; an ensemble's alignment is read from its mean
    attention only.

    Args:
        members: trained models in eval mode, sharing pad_id and the target vocabulary.

    Raises:
        ValueError: no members, or members with another target vocabulary size or pad id.
    """

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        sizes = {(int(m.tgt_vocab_size), int(m.pad_id)) for m in members}
        if len(sizes) != 1:
            raise ValueError(f"ensemble members disagree on (tgt_vocab_size, pad_id): {sizes}")
        self.members = nn.ModuleList(members)
        self.tgt_vocab_size, self.pad_id = sizes.pop()

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EnsembleEncoderOutput:
        """(B, S) ids and mask -> every member's encoder output."""
        outputs = tuple(member.encode(src_ids, src_mask) for member in self.members)
        empty = src_mask.new_zeros((*src_mask.shape, 0), dtype=torch.float)  # (B, S, 0)
        return EnsembleEncoderOutput(states=empty, mask=src_mask, members=outputs)

    def init_state(self, enc: EnsembleEncoderOutput) -> EnsembleState:
        return EnsembleState(tuple(member.init_state(member_enc)
                                   for member, member_enc in zip(self.members, enc.members,
                                                                 strict=True)))

    def decode_step(
        self, prev_ids: Tensor, state: EnsembleState, enc: EnsembleEncoderOutput
    ) -> tuple[Tensor, EnsembleState, Tensor | None]:
        """prev_ids (B,) -> log of the members' mean probability (B, V), the new states, the
        members' mean attention (B, S) or None."""
        steps = [member.decode_step(prev_ids, member_state, member_enc)
                 for member, member_state, member_enc
                 in zip(self.members, state.members, enc.members, strict=True)]
        return (mean_log_probs([logits for logits, _, _ in steps]),
                EnsembleState(tuple(new_state for _, new_state, _ in steps)),
                mean_attention([attn for _, _, attn in steps]))

    def forward(
        self,
        src_ids: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attn: bool = True,
        output_positions: Tensor | None = None,
        project: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> the log of the members' mean probability (B, T, V)
        (or (N, V) at output_positions), their mean attention (B, T, S) or None.

        project=False (the alignment scoring, which reads the attention only) skips the members'
        output layers and returns an empty tensor in place of the log-probabilities: an ensemble
        has no single output layer whose inputs a loss could project.
        """
        outputs = [member(src_ids, src_mask, tgt_in, need_attn=need_attn,
                          output_positions=output_positions, project=project)
                   for member in self.members]
        attention = mean_attention([attn for _, attn in outputs]) if need_attn else None
        if not project:
            return src_ids.new_empty(0, dtype=torch.float), attention
        return mean_log_probs([logits for logits, _ in outputs]), attention

    def self_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> None:
        """None: self-attention is read from single models only."""
        return None

    def cross_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> None:
        """None: per-layer, per-head attention is read from single models only."""
        return None
