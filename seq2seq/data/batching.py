"""Token-budget batches of similar-length sentences, deterministic per (seed, epoch) and shardable.

Shapes: B sentences in the batch, S source length, T target length (both padded, EOS/BOS
included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

from seq2seq.errors import UserError
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """A padded batch of sentence pairs.

    Attributes:
        src: (B, S) long, source pieces + EOS, padded with PAD.
        src_mask: (B, S) bool, True at real source tokens.
        tgt_in: (B, T) long, BOS + target pieces (the decoder input), padded.
        tgt_out: (B, T) long, target pieces + EOS (what the decoder predicts), padded.
        indices: (B,) long, the dataset row of each sentence.
        tgt_positions: (N,) long, flat indices (row * T + column) of the real tokens of
            tgt_out, counted on the host so that a GPU step never waits to learn N.
        reference: (B, T, S) float, guided alignment's reference rows, built where the batch
            is collated (a loader worker) so the step never waits for the host; None unguided.
        groups: (B, S) long, the word group of each source column where guided per word.
    """

    src: Tensor
    src_mask: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    indices: Tensor
    tgt_positions: Tensor
    reference: Tensor | None = None
    groups: Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch on `device`."""
        return Batch(**{f.name: None if getattr(self, f.name) is None else
                        getattr(self, f.name).to(device, non_blocking=non_blocking)
                        for f in fields(self)})

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory (DataLoader calls this when pin_memory=True)."""
        return Batch(**{f.name: None if getattr(self, f.name) is None else
                        getattr(self, f.name).pin_memory() for f in fields(self)})

    @property
    def num_sentences(self) -> int:
        return self.src.size(0)

    @property
    def num_src_tokens(self) -> int:
        """Real source tokens (EOS included)."""
        return int(self.src_mask.sum())

    @property
    def num_tgt_tokens(self) -> int:
        """Real target tokens the loss is taken over: non-pad in tgt_out (EOS included)."""
        return int((self.tgt_out != PAD_ID).sum())

    @property
    def num_padded_tokens(self) -> int:
        """Source plus target positions, padding included: B * S + B * T."""
        return self.src.numel() + self.tgt_out.numel()

    @property
    def num_pad_positions(self) -> int:
        """The positions of `num_padded_tokens` that are padding."""
        return self.num_padded_tokens - self.num_src_tokens - self.num_tgt_tokens


def _padded_length(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def collate(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    indices: Sequence[int],
    pad_to_multiple: int = 1,
) -> Batch:
    """Pad a list of piece-id sequences into a Batch.

    Args:
        src_ids: source piece ids per sentence, without BOS/EOS.
        tgt_ids: target piece ids per sentence, without BOS/EOS.
        indices: the dataset row of each sentence.
        pad_to_multiple: round S and T up to a multiple of this (8 suits GPU kernels).
    """
    size = len(src_ids)
    src_len = _padded_length(max(len(s) for s in src_ids) + 1, pad_to_multiple)
    tgt_len = _padded_length(max(len(t) for t in tgt_ids) + 1, pad_to_multiple)
    src = torch.full((size, src_len), PAD_ID, dtype=torch.long)  # (B, S)
    tgt_in = torch.full((size, tgt_len), PAD_ID, dtype=torch.long)  # (B, T)
    tgt_out = torch.full((size, tgt_len), PAD_ID, dtype=torch.long)  # (B, T)
    for row, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        src[row, : len(s) + 1] = torch.tensor([*s, EOS_ID], dtype=torch.long)
        tgt_in[row, : len(t) + 1] = torch.tensor([BOS_ID, *t], dtype=torch.long)
        tgt_out[row, : len(t) + 1] = torch.tensor([*t, EOS_ID], dtype=torch.long)
    return Batch(
        src=src,
        src_mask=src != PAD_ID,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        indices=torch.tensor(list(indices), dtype=torch.long),
        tgt_positions=(tgt_out != PAD_ID).flatten().nonzero().squeeze(1),
    )


def token_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    batch_tokens: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
) -> list[list[int]]:
    """Group sentence indices into length-bucketed batches within a token budget.

    Sentences are sorted by (longer side, target length, source length), ties broken at
    random from (seed, epoch) when shuffling, and cut greedily into batches whose cost
    `B * max(max_src + 1, max_tgt + 1)` (EOS/BOS included) stays within `batch_tokens`; a
    single sentence over the budget gets a batch of its own. The longer side first fills each
    batch up to its cost (on Ding: 48 batches of 4,096 tokens per epoch, where sorting by
    source length first needs 59 and pads 25% of the target positions, 7% here). When
    shuffling, the batch order is then shuffled from (seed, epoch) alone, so every process
    computes the same list.

    For data parallelism each rank takes batches rank, rank + world_size, ...; the list is
    first cut to a multiple of world_size so every rank runs the same number of steps.

    Args:
        src_lens: source length (pieces, without EOS) of each sentence.
        tgt_lens: target length (pieces, without BOS/EOS) of each sentence.
        batch_tokens: the budget per batch, padding included.
        shuffle: randomize tie order and batch order (training); else a fixed order.
        seed: the run's seed.
        epoch: the epoch, so each epoch gets a new order.
        rank: this process's rank.
        world_size: the number of processes.

    Returns:
        This rank's batches, each a list of sentence indices.
    """
    if len(src_lens) != len(tgt_lens):
        raise ValueError(f"{len(src_lens)} source lengths but {len(tgt_lens)} target lengths")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world_size {world_size}")
    src = np.asarray(src_lens, dtype=np.int64)
    tgt = np.asarray(tgt_lens, dtype=np.int64)
    rng = np.random.default_rng([seed, epoch])
    ties = rng.permutation(len(src)) if shuffle else np.arange(len(src))
    order = np.lexsort((ties, src, tgt, np.maximum(src, tgt)))  # the last key sorts first

    batches: list[list[int]] = []
    current: list[int] = []
    max_len = 0
    for index in order.tolist():
        length = max(int(src[index]), int(tgt[index])) + 1
        grown = max(max_len, length)
        if current and (len(current) + 1) * grown > batch_tokens:
            batches.append(current)
            current, grown = [], length
        current.append(index)
        max_len = grown
    if current:
        batches.append(current)

    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches)).tolist()]
    if world_size > 1:
        if len(batches) < world_size:
            raise UserError(
                f"{len(batches)} batches of {batch_tokens} tokens cannot feed {world_size} "
                "processes; lower trainer.batch_tokens or use fewer processes"
            )
        per_rank = len(batches) // world_size
        batches = batches[rank::world_size][:per_rank]
    return batches


def budget_chunks(
    order: Sequence[int], sizes: Sequence[int], max_items: int, budget: int
) -> list[list[int]]:
    """Cut `order` into consecutive chunks of at most `max_items` whose cost, the chunk's
    length times the largest `sizes[i]` in it, stays within `budget`; an item over the budget
    gets a chunk of its own. Decoding takes sorted sentences in such chunks, so memory is
    bounded by the budget on long sentences and a chunk of short ones stays `max_items` long.
    """
    if max_items < 1 or budget < 1:
        raise UserError(f"max_items and budget must be at least 1, got {max_items}, {budget}")
    chunks: list[list[int]] = []
    current: list[int] = []
    largest = 0
    for index in order:
        grown = max(largest, sizes[index])
        if current and (len(current) == max_items or (len(current) + 1) * grown > budget):
            chunks.append(current)
            current, grown = [], sizes[index]
        current.append(index)
        largest = grown
    if current:
        chunks.append(current)
    return chunks


def padding_fraction(
    batches: Sequence[Sequence[int]], src_lens: Sequence[int], tgt_lens: Sequence[int]
) -> float:
    """The share of padded positions over all batches, source and target together.

    Each sentence takes len + 1 real positions per side (EOS, or BOS on the decoder input).
    """
    positions = 0
    real = 0
    for batch in batches:
        src = [src_lens[i] + 1 for i in batch]
        tgt = [tgt_lens[i] + 1 for i in batch]
        positions += len(batch) * (max(src) + max(tgt))
        real += sum(src) + sum(tgt)
    return 1.0 - real / positions if positions else 0.0
