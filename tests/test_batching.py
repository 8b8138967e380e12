"""Padding, token-budget batches, their determinism per (seed, epoch), and DDP sharding."""

from __future__ import annotations

import random

import pytest
import torch

from seq2seq.data.batching import budget_chunks, collate, padding_fraction, token_batches
from seq2seq.errors import UserError
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID


def lengths(n: int = 600, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    src = [rng.randint(1, 60) for _ in range(n)]
    tgt = [max(1, s + rng.randint(-5, 5)) for s in src]
    return src, tgt


def test_collate_layout() -> None:
    batch = collate([[5, 6, 7], [8]], [[9, 10], [11, 12, 13, 14]], [4, 1])
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, 10, PAD_ID, PAD_ID], [BOS_ID, 11, 12, 13, 14]]
    assert batch.tgt_out.tolist() == [[9, 10, EOS_ID, PAD_ID, PAD_ID], [11, 12, 13, 14, EOS_ID]]
    assert batch.indices.tolist() == [4, 1]
    assert batch.src.dtype == batch.tgt_in.dtype == torch.long
    assert batch.src_mask.dtype == torch.bool
    assert batch.num_sentences == 2
    assert batch.num_src_tokens == 6
    assert batch.num_tgt_tokens == 8
    assert batch.num_padded_tokens == 2 * 4 + 2 * 5
    assert batch.num_pad_positions == 18 - 6 - 8
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_out, batch.tgt_out)


def test_collate_pads_to_a_multiple() -> None:
    batch = collate([[5, 6, 7]], [[9]], [0], pad_to_multiple=8)
    assert batch.src.shape == (1, 8)
    assert batch.tgt_in.shape == (1, 8)
    assert batch.num_src_tokens == 4 and batch.num_tgt_tokens == 2


def test_budget_is_respected_and_every_sentence_used_once() -> None:
    src, tgt = lengths()
    src[7] = 500  # longer than the budget allows with anything else
    budget = 400
    batches = token_batches(src, tgt, budget, shuffle=True, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    for batch in batches:
        cost = len(batch) * max(max(src[i] + 1 for i in batch), max(tgt[i] + 1 for i in batch))
        assert cost <= budget or batch == [7]
    assert [7] in batches


def test_length_bucketing_pads_much_less_than_random_batches() -> None:
    src, tgt = lengths()
    batches = token_batches(src, tgt, 1000, shuffle=True, seed=1, epoch=0)
    size = len(src) // len(batches)
    order = list(range(len(src)))
    random.Random(0).shuffle(order)
    random_batches = [order[i : i + size] for i in range(0, len(order), size)]
    bucketed = padding_fraction(batches, src, tgt)
    assert bucketed < 0.15
    assert bucketed < padding_fraction(random_batches, src, tgt) / 3


def test_same_seed_and_epoch_same_batches_other_epoch_other_batches() -> None:
    src, tgt = lengths()
    first = token_batches(src, tgt, 500, shuffle=True, seed=3, epoch=2)
    assert token_batches(src, tgt, 500, shuffle=True, seed=3, epoch=2) == first
    assert token_batches(src, tgt, 500, shuffle=True, seed=3, epoch=3) != first
    assert token_batches(src, tgt, 500, shuffle=True, seed=4, epoch=2) != first
    fixed = token_batches(src, tgt, 500, shuffle=False, seed=3, epoch=2)
    assert token_batches(src, tgt, 500, shuffle=False, seed=9, epoch=7) == fixed
    firsts = [max(src[b[0]], tgt[b[0]]) for b in fixed]
    assert firsts == sorted(firsts)  # unshuffled batches come in order of the longer side


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ddp_shards_are_equal_length_and_disjoint(world_size: int) -> None:
    src, tgt = lengths()
    full = token_batches(src, tgt, 700, shuffle=True, seed=5, epoch=1)
    shards = [
        token_batches(src, tgt, 700, shuffle=True, seed=5, epoch=1, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    assert len({len(shard) for shard in shards}) == 1
    assert len(shards[0]) == len(full) // world_size
    seen = [i for shard in shards for batch in shard for i in batch]
    assert len(seen) == len(set(seen))
    assert all(batch in full for shard in shards for batch in shard)


def test_too_few_batches_for_the_processes() -> None:
    with pytest.raises(UserError, match="cannot feed 4 processes"):
        token_batches([3, 3], [3, 3], 100, shuffle=True, seed=0, epoch=0, rank=0, world_size=4)


def test_budget_chunks_keep_order_and_bound_items_and_cost() -> None:
    rng = random.Random(3)
    sizes = [rng.randint(1, 60) for _ in range(200)]
    order = sorted(range(200), key=lambda i: sizes[i], reverse=True)
    chunks = budget_chunks(order, sizes, max_items=16, budget=300)
    assert [i for chunk in chunks for i in chunk] == order  # consecutive, nothing lost
    for chunk in chunks:
        assert len(chunk) <= 16
        assert len(chunk) == 1 or len(chunk) * max(sizes[i] for i in chunk) <= 300
    # long items get short chunks, short ones fill max_items
    assert len(chunks[0]) == 300 // sizes[order[0]]
    # a chunk closes only when the next item would break a bound
    for chunk, after in zip(chunks, chunks[1:], strict=False):
        grown = max(sizes[i] for i in [*chunk, after[0]])
        assert len(chunk) == 16 or (len(chunk) + 1) * grown > 300


def test_budget_chunks_give_an_oversized_item_its_own_chunk() -> None:
    assert budget_chunks([0, 1, 2], [5, 50, 5], max_items=8, budget=20) == [[0], [1], [2]]
    assert budget_chunks([0, 2, 1], [5, 50, 5], max_items=8, budget=20) == [[0, 2], [1]]
    with pytest.raises(UserError, match="at least 1"):
        budget_chunks([0], [1], max_items=0, budget=10)
