"""The contract every model keeps, so one training loop and one beam search serve them all.

Shapes: B batch, S source length, T target length, V target vocabulary, D model width.
Masks are boolean and True at real tokens, False at padding.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Protocol, TypeVar, runtime_checkable

from torch import Tensor, nn

T = TypeVar("T")


def reorder_tensors(obj: T, index: Tensor) -> T:
    """Return a copy of a dataclass with every tensor field indexed along dim 0 (the batch).

    Tuples and lists of tensors are indexed element-wise; other fields are kept as they are.
    """
    changes = {}
    for field in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, field.name)
        if isinstance(value, Tensor):
            changes[field.name] = value.index_select(0, index)
        elif isinstance(value, (tuple, list)) and all(isinstance(v, Tensor) for v in value):
            changes[field.name] = type(value)(v.index_select(0, index) for v in value)
    return replace(obj, **changes)  # type: ignore[type-var]


@dataclass
class EncoderOutput:
    """What the encoder hands to the decoder.

    Attributes:
        states: (B, S, D_enc) one vector per source position.
        mask: (B, S) True at real source tokens.
        final: (B, D) a summary of the whole source (RNN encoders), or None.
        keys: (B, S, A) attention keys projected once per sentence, or None.
        embedded: (B, S, E) the source embeddings, for a lexical output model, or None.
    """

    states: Tensor
    mask: Tensor
    final: Tensor | None = None
    keys: Tensor | None = None
    embedded: Tensor | None = None

    def reorder(self, index: Tensor) -> EncoderOutput:
        """Select (and repeat) batch rows, e.g. to expand each sentence into its beams."""
        return reorder_tensors(self, index)


@runtime_checkable
class DecoderState(Protocol):
    """A model's decoder state between steps; beam search only ever reorders it."""

    def reorder(self, index: Tensor) -> DecoderState: ...


@runtime_checkable
class Seq2SeqModel(Protocol):
    """The model Protocol of DESIGN.md. Every variant is also an `nn.Module`."""

    pad_id: int
    tgt_vocab_size: int

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        """(B, S) ids and mask -> EncoderOutput."""
        ...

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """The decoder state before the first target token."""
        ...

    def decode_step(
        self, prev_ids: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """One step: prev_ids (B,) -> logits (B, V), new state, attention (B, S) or None."""
        ...

    def forward(
        self,
        src_ids: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attn: bool = True,
        output_positions: Tensor | None = None,
        project: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V), attention (B, T, S) or None.

        need_attn=False lets a model skip computing weights it does not need (training).
        output_positions (N,): flat indices into the B * T target positions; the logits are
        then (N, V) for those positions only, so the output projection, the largest matrix
        product of a small model, skips the padding. project=False returns what the output
        layer `generator` (an nn.Linear) would project, (..., O), in place of the logits, for
        a loss that projects them itself (training.loss.linear_token_losses). The attention
        models also take log_attn=True (guided alignment): the attention comes as its log, a
        log-softmax of its scores, so the KL's gradient stays exact.
        """
        ...

    def self_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor
                       ) -> tuple[Tensor, Tensor] | None:
        """Teacher forcing: every layer's and head's self-attention, the encoder's
        (L_enc, B, H, S, S) and the decoder's masked one (L, B, H, T, T), for models that have
        it (the Transformer); None for the recurrent ones."""
        ...

    def cross_attention(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor | None:
        """Teacher forcing: every decoder layer's and head's weights over the source,
        (L, B, H, T, S), for models that have several (the Transformer); None for the rest."""
        ...


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
