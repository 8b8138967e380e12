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
`possible`, either direction's links, `sure`, both directions', or `grow-diag-final`, Koehn et
al.'s symmetrisation of the two as `seq2seq.evaluation.pharaoh` computes it; the cache keeps the
intersection and the union, so its final step adds the union's links in (i, j) order, where
atools takes the first direction's before the second's), each with an equal share, spread evenly
over that word's pieces. A target piece none of whose words is linked (eflomal's
null link, an unaligned word) is not supervised (`trainer.alignment_null=skip`) or is pulled to
the source EOS, the column aer.py reads as "no link" (`eos`). The target EOS is not supervised.

The attention supervised: the RNNs' (Bahdanau's and Luong's) only one; for the Transformer
the cross-attention of decoder layer `trainer.alignment_layer` (-1: the last), head
`trainer.alignment_head` (null: the mean over its heads, the reading the heatmaps and the AER
use). The segmentation must be the fixed one (no `trainer.subword_alpha`).

The divergence is taken per piece (`trainer.alignment_level=piece`: each target piece's row
against the reference spread over the linked words' pieces, so a word of three pieces is pulled
to a third on each) or per word (`word`: the attention summed over each source word's pieces and
compared with the reference summed the same way, so the model may put a linked word's share on
any of its pieces, as the word links the AER reads leave it free to). Pieces that share a word
are one group; the source EOS is a group of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.alignment import Links, word_spans
from seq2seq.evaluation.aer import piece_words
from seq2seq.evaluation.pharaoh import grow_diag_final

LINKS = ("possible", "sure", "grow-diag-final")
NULLS = ("skip", "eos")
LEVELS = ("piece", "word")


@dataclass(frozen=True)
class Cells:
    """The reference of one pair: `weights[k]` at (target piece `rows[k]`, source piece
    `columns[k]`); each supervised row sums to 1. The source EOS is column len(source pieces).
    `groups[c]`: the word group of source column c (pieces that share a word share a group;
    the EOS has one of its own), ids from 0."""

    rows: Tensor  # (K,) long
    columns: Tensor  # (K,) long
    weights: Tensor  # (K,) float
    groups: Tensor  # (source pieces + 1,) long


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
        which: `possible`, `sure` or `grow-diag-final`.
        null: `skip` or `eos`, for target pieces with no linked word.
    """
    linked = {"possible": lambda: links.possible, "sure": lambda: links.sure,
              "grow-diag-final": lambda: grow_diag_final(links.possible, links.sure)}[which]()
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
                 torch.tensor([cells[k] for k in keys], dtype=torch.float32),
                 torch.tensor(word_groups(src_owners), dtype=torch.long))


def word_groups(owners: Sequence[Sequence[int]]) -> list[int]:
    """The group of each source piece, then of the EOS: pieces joined through the words they
    overlap (a piece spanning two words joins both words' pieces), numbered in order of first
    appearance; a piece of no word and the EOS are groups of their own."""
    parent = list(range(len(owners)))

    def root(piece: int) -> int:
        while parent[piece] != piece:
            parent[piece] = parent[parent[piece]]
            piece = parent[piece]
        return piece

    first_piece: dict[int, int] = {}
    for piece, words in enumerate(owners):
        for word in words:
            if word in first_piece:
                parent[root(piece)] = root(first_piece[word])
            else:
                first_piece[word] = piece
    numbers: dict[int, int] = {}
    groups = [numbers.setdefault(root(piece), len(numbers)) for piece in range(len(owners))]
    return [*groups, len(numbers)]  # the EOS


def dense_reference(cells: Sequence[Cells], num_rows: int, num_columns: int) -> Tensor:
    """The references of a batch's pairs as one (B, T, S) tensor, zeros where unsupervised."""
    flat = torch.zeros(len(cells) * num_rows * num_columns)
    for b, pair in enumerate(cells):
        flat.index_add_(0, (b * num_rows + pair.rows) * num_columns + pair.columns, pair.weights)
    return flat.view(len(cells), num_rows, num_columns)


def dense_groups(cells: Sequence[Cells], num_columns: int) -> Tensor:
    """The word groups of a batch's source columns as one (B, S) tensor; a padding column is
    a group of its own (ids from S on), which no reference weight reaches."""
    groups = torch.arange(num_columns, 2 * num_columns).repeat(len(cells), 1)
    for b, pair in enumerate(cells):
        groups[b, :len(pair.groups)] = pair.groups
    return groups


def grouped(log_attn: Tensor, reference: Tensor, groups: Tensor) -> tuple[Tensor, Tensor]:
    """The log attention and the reference summed over each row's word groups, (B, T, 2S)
    each: a log-sum-exp with the group's peak taken out, so that a tiny attention keeps its
    gradient. A group no column belongs to has reference 0."""
    b, t, s = log_attn.shape
    index = groups.to(log_attn.device)[:, None, :].expand(b, t, s)
    shape = (b, t, 2 * s)
    peak = torch.full(shape, -torch.inf, device=log_attn.device).scatter_reduce(
        2, index, log_attn.detach(), "amax")
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    summed = torch.zeros(shape, device=log_attn.device).scatter_add(
        2, index, (log_attn - peak.gather(2, index)).exp())
    # a group with a finite peak sums to >= 1; only the empty ones (padding) are raised
    log_grouped = summed.clamp_min(torch.finfo(summed.dtype).tiny).log() + peak
    ref = torch.zeros(shape, device=log_attn.device).scatter_add(2, index, reference)
    return log_grouped, ref


def alignment_loss(log_attn: Tensor, reference: Tensor, groups: Tensor | None = None) -> Tensor:
    """The summed KL divergence KL(reference || attention) over the supervised rows, per
    source piece, or per word group where `groups` are given (`trainer.alignment_level=word`).

    The attention comes as its log, the log-softmax of its scores (the models' `log_attn`; a
    mean over heads as logsumexp - log H), so a logit's gradient is exactly attention -
    reference however small the attention is: a confidently wrong cell (weight 1e-20 where the
    reference puts its mass) is pulled back at full strength, where log(attention + eps) or a
    clamp would leave it almost no gradient.

    Args:
        log_attn: (B, T, S) log attention rows over the source pieces.
        reference: (B, T, S) reference rows, each summing to 1 or all zero (unsupervised).
        groups: (B, S) long, each source column's word group (`dense_groups`); None: per
            piece.

    Returns:
        A scalar: 0 when every supervised row of the attention equals its reference (per
        word: when each word group's summed attention equals the group's reference).
    """
    log_attn = log_attn.float()
    ref = reference.to(log_attn.device)
    if groups is not None:
        log_attn, ref = grouped(log_attn, ref, groups)
    supervised = ref > 0
    log_attn = torch.where(supervised, log_attn, torch.zeros_like(log_attn))
    log_ratio = torch.log(ref.clamp(min=1e-12)) - log_attn
    return torch.where(supervised, ref * log_ratio, torch.zeros_like(ref)).sum()


@dataclass
class Guidance:
    """What the update needs: the weight, the Transformer's layer and head, the level, and
    the reference of every training pair (row i of the encoded training split)."""

    weight: float
    layer: int | None
    head: int | None
    cells: list[Cells]
    level: str = "piece"

    def reference(self, indices: Tensor, num_rows: int, num_columns: int) -> Tensor:
        """(B, T, S) references of the batch's rows `indices` (of the training split)."""
        return dense_reference([self.cells[i] for i in indices.tolist()], num_rows, num_columns)

    def groups(self, indices: Tensor, num_columns: int) -> Tensor | None:
        """(B, S) word groups of the batch's source columns; None at the piece level."""
        if self.level == "piece":
            return None
        return dense_groups([self.cells[i] for i in indices.tolist()], num_columns)
