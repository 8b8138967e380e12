"""What each attention head of a Transformer does, measured over a split: the statistics the
field uses to tell heads apart (Voita et al. 2019: positional heads, confidence; Clark et al.
2019: attention to the previous or next token, to separator-like tokens and punctuation).

Three attentions, each (layers, heads): the encoder's self-attention, the decoder's masked
self-attention, the decoder's cross-attention. For every head, over the rows (query positions)
of every sentence of the split:
- entropy: -sum p log p of a row, in nats (a uniform row over N keys: log N, the maximum);
- confidence: the row's largest weight (Voita et al.'s measure);
- previous, same, next: the weight on the key one position before the query, at it, one after
  (self-attention only: the query and key positions are the same sequence's); each averaged
  over the rows that have such a key, so a pure previous-token head scores exactly 1.0. In the
  decoder's masked self-attention "next" is never allowed (reported NaN: not applicable), and
  the target BOS is the boundary, not a "previous" word;
- boundary: the weight on the sentence's boundary token, the source EOS (encoder, cross) or the
  target BOS the decoder starts from (decoder): where BERT's heads park unneeded weight on
  [SEP], an NMT head parks it here;
- punctuation: the weight on pieces that are punctuation only (`is_punctuation`).

Rows the mask forces are no measurement and are skipped: a decoder query that may see only
the BOS (its first) puts all of its weight there whatever the head does, and would add 1 to
"same" and "boundary", confidence 1 and entropy 0; so every row with one allowed key.

Shapes: H heads, T query positions, N key positions (the sentence's own, without padding).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

import torch
from torch import Tensor

KINDS = ("encoder", "decoder", "cross")
STATISTICS = ("entropy", "confidence", "previous", "same", "next", "boundary", "punctuation")
POSITIONAL = ("previous", "same", "next")


def is_punctuation(piece: str) -> bool:
    """Whether a sentencepiece piece is punctuation only (`.`, `▁,`, `?!`), the `▁` word mark
    aside; a bare `▁` is not."""
    text = piece.replace("▁", "")
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def row_sums(attn: Tensor, boundary: int, punctuation: Tensor, positional: bool,
             causal: bool = False) -> tuple[Tensor, Tensor]:
    """One sentence's attention (H, T, N) -> each statistic summed over its rows, and the
    number of rows each sum is over (both (H, len(STATISTICS)), float64).

    Args:
        attn: the weights of one sentence, every row summing to 1.
        boundary: the key index of the boundary token (source EOS, target BOS).
        punctuation: (N,) bool, the keys that are punctuation.
        positional: whether queries and keys are one sequence (self-attention): the
            previous/same/next shares are measured; else they stay 0 over 0 rows.
        causal: the decoder's masked self-attention: query q sees keys 0 to q, key 0 is the
            BOS (`boundary`). Its rows with one allowed key are skipped, "previous" never
            counts the BOS, and "next" (never allowed) stays 0 over 0 rows.
    """
    attn = attn.double()
    num_heads, num_rows, num_keys = attn.shape
    allowed = [q + 1 if causal else num_keys for q in range(num_rows)]
    kept = [q for q in range(num_rows) if allowed[q] > 1]  # a forced row measures nothing
    sums = torch.zeros(num_heads, len(STATISTICS), dtype=torch.float64)
    rows = torch.zeros_like(sums)
    if not kept:
        return sums, rows
    kept_attn = attn[:, kept]
    logs = torch.where(kept_attn > 0, kept_attn.log(), torch.zeros_like(kept_attn))
    sums[:, 0] = -(kept_attn * logs).sum(dim=(1, 2))
    sums[:, 1] = kept_attn.amax(dim=2).sum(dim=1)
    sums[:, 5] = kept_attn[:, :, boundary].sum(dim=1)
    sums[:, 6] = kept_attn[:, :, punctuation.to(attn.device)].sum(dim=(1, 2))
    rows[:, [0, 1, 5, 6]] = len(kept)
    if positional:
        first_key = 1 if causal else 0  # the decoder's BOS is the boundary, not a word
        for column, offset in ((2, -1), (3, 0), (4, 1)):
            queries = [q for q in kept if first_key <= q + offset < min(num_keys, allowed[q])]
            if queries:
                index = torch.tensor(queries)
                sums[:, column] = attn[:, index, index + offset].sum(dim=1)
                rows[:, column] = len(queries)
    return sums, rows


@dataclass
class HeadStatistics:
    """The sums of every head of one attention kind over a split; `means` divides them."""

    sums: Tensor | None = None  # (L, H, len(STATISTICS)) float64
    rows: Tensor | None = None
    sentences: int = 0
    aer: list[list[float | None]] | None = field(default=None)  # (L, H), cross-attention only

    def add(self, layers: Tensor, boundary: int, punctuation: Tensor, positional: bool,
            causal: bool = False) -> None:
        """One sentence's weights of every layer, (L, H, T, N) (`row_sums`)."""
        found = [row_sums(layer, boundary, punctuation, positional, causal) for layer in layers]
        sums = torch.stack([s for s, _ in found])
        rows = torch.stack([r for _, r in found])
        self.sums = sums if self.sums is None else self.sums + sums
        self.rows = rows if self.rows is None else self.rows + rows
        self.sentences += 1

    def means(self) -> Tensor:
        """(L, H, len(STATISTICS)) each statistic's mean over its rows (NaN over no rows: not
        applicable, as the decoder's "next" or the cross-attention's positions)."""
        assert self.sums is not None and self.rows is not None
        return self.sums / self.rows
