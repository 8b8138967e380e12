"""Decoding a corpus: the settings (`DecodeSettings`, from a `decoding` config group) and
`translate_batches`, which sorts sentences by length, cuts them into batches within a budget of
source positions times beams and hands each batch to `seq2seq.search` (greedy or beam search,
whose conventions hold here: length limit, banned tokens, GNMT length penalty).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from torch import nn

from seq2seq.data.batching import budget_chunks
from seq2seq.errors import UserError
from seq2seq.models.base import Seq2SeqModel
from seq2seq.search import Hypothesis, beam_search, check_settings, greedy_search

# Source positions (EOS and padding included) times beams per decode batch: the Transformer's
# cache and the attention history grow with it. 64 docs test sentences of 256 pieces at beam 5
# are 320 rows of the docs Transformer's 2 decoder layers' keys and values (d_model 256) over
# up to 394 + 256 positions, 0.79 GiB in float32 by their shapes (1.19 GiB for
# configs/model/transformer.yaml's 3 layers); 8,192 keeps 64 sentences of up to 25 pieces
# together at beam 5, and of up to 128 greedily.
DECODE_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class DecodeSettings:
    """How to search: beam size (1 is greedy), length penalty, length limit
    `max_len_a * src_len + max_len_b`, hypotheses kept per sentence, sentences per batch and
    the batch's budget of source positions times beams (`translate_batches`)."""

    beam_size: int = 5
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    nbest: int = 1
    batch_size: int = 64
    batch_tokens: int = DECODE_BATCH_TOKENS


def decode_settings(decoding: DictConfig, beam_size: int) -> DecodeSettings:
    """The settings of a `decoding` config group with the given beam size and one hypothesis
    per sentence (validation, the final test, evaluate and translate all start from here)."""
    return DecodeSettings(
        beam_size=beam_size,
        length_penalty=decoding.length_penalty,
        max_len_a=decoding.max_len_a,
        max_len_b=decoding.max_len_b,
        nbest=1,
        batch_size=decoding.batch_size,
        # checkpoints saved before the budget existed decode with the default
        batch_tokens=decoding.get("batch_tokens", DECODE_BATCH_TOKENS),
    )


def translate_batches(
    model: Seq2SeqModel,
    src: Sequence[Sequence[int]],
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    nbest: int = 1,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    batch_tokens: int = DECODE_BATCH_TOKENS,
) -> list[list[Hypothesis]]:
    """Decode many sentences in batches of similar length; results come back in input order.

    Sentences are sorted by length (longest first) so a batch carries little padding, cut
    into batches of at most `batch_size` sentences whose padded source positions times
    beam_size stay within `batch_tokens` (`budget_chunks`: memory is bounded on long
    sentences), padded on the right with `model.pad_id`, and decoded with `greedy_search`
    when beam_size is 1, else `beam_search`.

    Args:
        model: any model of the Protocol, in eval mode.
        src: source id lists, each non-empty.
        beam_size, length_penalty, max_len_a, max_len_b, nbest: as in `beam_search`.
        batch_size: sentences decoded at once, at most.
        batch_tokens: a batch's source positions (padding included) times beam_size, at most;
            a sentence over it is decoded alone.
        device: where to decode; None: the device of the model's parameters (CPU if none).

    Returns:
        One list of up to nbest hypotheses per source sentence, in the order of `src`.

    Raises:
        UserError: bad beam_size, nbest, batch_size or batch_tokens.
        ValueError: an empty source sentence (callers handle empty lines themselves).
    """
    check_settings(beam_size, nbest)
    if batch_size < 1 or batch_tokens < 1:
        raise UserError(f"batch_size and batch_tokens must be at least 1, got {batch_size}, "
                        f"{batch_tokens}")
    for i, ids in enumerate(src):
        if len(ids) == 0:
            raise ValueError(f"source sentence {i} is empty; translate empty lines to ''")
    if device is None:
        params = list(model.parameters()) if isinstance(model, nn.Module) else []
        device = params[0].device if params else torch.device("cpu")

    order = sorted(range(len(src)), key=lambda i: len(src[i]), reverse=True)
    results: list[list[Hypothesis]] = [[] for _ in src]
    sizes = [len(ids) * beam_size for ids in src]
    for chunk in budget_chunks(order, sizes, batch_size, batch_tokens):
        width = max(len(src[i]) for i in chunk)
        src_ids = torch.full((len(chunk), width), model.pad_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            src_ids[row, : len(src[i])] = torch.tensor(src[i], dtype=torch.long)
        lengths = torch.tensor([len(src[i]) for i in chunk])
        src_mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)  # (b, S)
        src_ids, src_mask = src_ids.to(device), src_mask.to(device)
        if beam_size == 1:
            decoded = greedy_search(
                model, src_ids, src_mask, max_len_a, max_len_b, length_penalty=length_penalty
            )
        else:
            decoded = beam_search(
                model,
                src_ids,
                src_mask,
                beam_size=beam_size,
                length_penalty=length_penalty,
                max_len_a=max_len_a,
                max_len_b=max_len_b,
                nbest=nbest,
            )
        for i, hyps in zip(chunk, decoded, strict=True):
            results[i] = hyps
    return results
