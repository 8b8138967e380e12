"""Guided alignment: a loss term that pulls one attention toward the corpus's reference links.

As fairseq's `transformer_align` (Garg et al. 2019), OpenNMT-py's guided alignment and Marian's
`--guided-alignment`: the training pairs' eflomal links (seq2seq.alignment, cached for every
split) give each target piece a reference distribution over the source pieces, and the loss
adds `trainer.alignment_weight` times its Kullback-Leibler divergence from the attention of
the step that predicts that piece (summed over supervised pieces and normalised like the
token loss, per target token of the update). KL rather than cross-entropy: it is zero exactly
when the attention equals the reference, and has the same gradient.

Words to pieces as aer.py maps them back: a piece belongs to every word its characters overlap.
The reference of target piece t: its words' linked source words (`trainer.alignment_links`:
`possible`, either direction's links, or `sure`, both directions'), each with an equal share,
spread evenly over that word's pieces. A target piece none of whose words is linked (eflomal's
null link, an unaligned word) is not supervised (`trainer.alignment_null=skip`) or is pulled to
the source EOS, the column aer.py reads as "no link" (`eos`). The target EOS is not supervised.

The attention supervised: the RNNs' (Bahdanau's and Luong's) only one; for the Transformer
the cross-attention of decoder layer `trainer.alignment_layer` (-1: the last), head
`trainer.alignment_head` (null: the mean over its heads, the reading the heatmaps and the AER
use). The segmentation must be the fixed one (no `trainer.subword_alpha`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.alignment import Links, word_spans
from seq2seq.evaluation.aer import piece_words

LINKS = ("possible", "sure")
NULLS = ("skip", "eos")


@dataclass(frozen=True)
class Cells:
    """The reference of one pair: `weights[k]` at (target piece `rows[k]`, source piece
    `columns[k]`); each supervised row sums to 1. The source EOS is column len(source pieces)."""

    rows: Tensor  # (K,) long
    columns: Tensor  # (K,) long
    weights: Tensor  # (K,) float


def reference_cells(
    src_text: str,
    tgt_text: str,
    src_spans: Sequence[tuple[int, int]],
    tgt_spans: Sequence[tuple[int, int]],
    links: Links,
    which: str = "possible",
    null: str = "skip",
) -> Cells:
    """The reference distribution of one pair over its pieces (see the module docstring).

    Args:
        src_text, tgt_text: the pair's texts.
        src_spans, tgt_spans: the character span of each source and target piece (EOS aside).
        links: the pair's reference word links (source word, target word).
        which: `possible` or `sure`.
        null: `skip` or `eos`, for target pieces with no linked word.
    """
    linked = links.possible if which == "possible" else links.sure
    src_owners = piece_words(list(src_spans), word_spans(src_text))
    tgt_owners = piece_words(list(tgt_spans), word_spans(tgt_text))
    pieces_of: dict[int, list[int]] = {}
    for piece, owners in enumerate(src_owners):
        for word in owners:
            pieces_of.setdefault(word, []).append(piece)
    sources_of: dict[int, set[int]] = {}
    for source, target in linked:
        sources_of.setdefault(target, set()).add(source)
    eos = len(src_spans)
    cells: dict[tuple[int, int], float] = {}
    for row, owners in enumerate(tgt_owners):
        sources = sorted({s for w in owners for s in sources_of.get(w, ()) if s in pieces_of})
        if not sources:
            if null == "eos" and owners:
                cells[(row, eos)] = 1.0
            continue
        for source in sources:
            share = 1.0 / (len(sources) * len(pieces_of[source]))
            for piece in pieces_of[source]:
                cells[(row, piece)] = cells.get((row, piece), 0.0) + share
    keys = sorted(cells)
    return Cells(torch.tensor([r for r, _ in keys], dtype=torch.long),
                 torch.tensor([c for _, c in keys], dtype=torch.long),
                 torch.tensor([cells[k] for k in keys], dtype=torch.float32))


def dense_reference(cells: Sequence[Cells], num_rows: int, num_columns: int) -> Tensor:
    """The references of a batch's pairs as one (B, T, S) tensor, zeros where unsupervised."""
    flat = torch.zeros(len(cells) * num_rows * num_columns)
    for b, pair in enumerate(cells):
        flat.index_add_(0, (b * num_rows + pair.rows) * num_columns + pair.columns, pair.weights)
    return flat.view(len(cells), num_rows, num_columns)


def alignment_loss(log_attn: Tensor, reference: Tensor) -> Tensor:
    """The summed KL divergence KL(reference || attention) over the supervised rows.

    The attention comes as its log, the log-softmax of its scores (the models' `log_attn`; a
    mean over heads as logsumexp - log H), so a logit's gradient is exactly attention -
    reference however small the attention is: a confidently wrong cell (weight 1e-20 where the
    reference puts its mass) is pulled back at full strength, where log(attention + eps) or a
    clamp would leave it almost no gradient.

    Args:
        log_attn: (B, T, S) log attention rows over the source pieces.
        reference: (B, T, S) reference rows, each summing to 1 or all zero (unsupervised).

    Returns:
        A scalar: 0 when every supervised row of the attention equals its reference.
    """
    log_attn = log_attn.float()
    ref = reference.to(log_attn.device)
    supervised = ref > 0
    log_attn = torch.where(supervised, log_attn, torch.zeros_like(log_attn))
    log_ratio = torch.log(ref.clamp(min=1e-12)) - log_attn
    return torch.where(supervised, ref * log_ratio, torch.zeros_like(ref)).sum()


@dataclass
class Guidance:
    """What the update needs: the weight, the Transformer's layer and head, and the reference
    of every training pair (row i of the encoded training split)."""

    weight: float
    layer: int | None
    head: int | None
    cells: list[Cells]

    def reference(self, indices: Tensor, num_rows: int, num_columns: int) -> Tensor:
        """(B, T, S) references of the batch's rows `indices` (of the training split)."""
        return dense_reference([self.cells[i] for i in indices.tolist()], num_rows, num_columns)
