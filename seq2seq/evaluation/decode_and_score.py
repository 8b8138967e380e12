"""Decode a split with any model and score it: the one path used by training (validation and
the final test), `python -m seq2seq.evaluate` and translate, so a checkpoint's BLEU is the same
wherever it is measured."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from seq2seq.corpus import EncodedSplit
from seq2seq.data.batching import collate
from seq2seq.decoding import DecodeSettings, Hypothesis, translate_batches
from seq2seq.evaluation.focus import focus_metric, transformer_focus
from seq2seq.evaluation.metrics import Scores, score
from seq2seq.tokenization import EOS_ID, Tokenizer


@dataclass
class SplitResult:
    hypotheses: list[str]
    references: list[str]
    sources: list[str]
    scores: Scores
    nbest: list[list[Hypothesis]]
    focus: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {**self.scores.as_dict(), "focus": self.focus}


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode (no dropout) inside; the caller's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.inference_mode()
def decode_ids(
    model: nn.Module, src_ids: list[list[int]], settings: DecodeSettings, device: torch.device
) -> list[list[Hypothesis]]:
    """Translate piece-id sequences (without EOS) in length-sorted batches; input order kept."""
    with eval_mode(model):
        return translate_batches(
            model,
            [[*ids, EOS_ID] for ids in src_ids],  # sources end with EOS, as in training
            beam_size=settings.beam_size,
            length_penalty=settings.length_penalty,
            max_len_a=settings.max_len_a,
            max_len_b=settings.max_len_b,
            nbest=settings.nbest,
            batch_size=settings.batch_size,
            device=device,
        )


@torch.inference_mode()
def split_focus(
    model: nn.Module,
    tokenizer: Tokenizer,
    src_ids: list[list[int]],
    best: list[Hypothesis],
    device: torch.device,
    batch_size: int = 64,
) -> dict[str, Any]:
    """The attention focus metric (DESIGN.md) of the chosen hypotheses; {} without attention."""
    eos = tokenizer.tgt_pieces([EOS_ID])[0]
    items = []
    for ids, hyp in zip(src_ids, best, strict=True):
        if hyp.attention is None:
            return {}
        src_pieces = tokenizer.src_pieces(ids) + [eos]
        tgt_pieces = tokenizer.tgt_pieces(hyp.tokens) + [eos]
        items.append((hyp.attention.float().cpu(), src_pieces, tgt_pieces))
    result: dict[str, Any] = focus_metric(items).as_dict()
    # Every layer's and head's cross-attention over the chosen hypotheses (the Transformer).
    head_items = []
    for start in range(0, len(src_ids), batch_size):
        rows = range(start, min(start + batch_size, len(src_ids)))
        # Teacher-forced on the hypothesis: BOS + tokens gives one row per emitted token and EOS.
        batch = collate([src_ids[i] for i in rows], [best[i].tokens for i in rows], list(rows))
        batch = batch.to(device)
        attn = model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)  # (L, B, H, T, S)
        if attn is None:  # one attention per step only (the RNNs)
            return result
        for j, i in enumerate(rows):
            s_len = len(src_ids[i]) + 1
            t_len = len(best[i].tokens) + 1
            head_items.append(
                (
                    attn[:, j, :, :t_len, :s_len].float().cpu(),
                    tokenizer.src_pieces(src_ids[i]) + [eos],
                    tokenizer.tgt_pieces(best[i].tokens) + [eos],
                )
            )
    result["heads"] = transformer_focus(head_items)
    return result


def decode_and_score(
    model: nn.Module,
    tokenizer: Tokenizer,
    split: EncodedSplit,
    settings: DecodeSettings,
    device: torch.device,
    max_sentences: int | None = None,
    with_focus: bool = True,
    bleu_tokenize: str | None = None,
) -> SplitResult:
    """Decode the sources of a split, detokenize and score against the text references.
    The model runs in eval mode throughout (decoding and the teacher-forced focus)."""
    n = len(split) if max_sentences is None else min(max_sentences, len(split))
    src_ids = split.src_ids[:n]
    with eval_mode(model):
        nbest = decode_ids(model, src_ids, settings, device)
        best = [hyps[0] for hyps in nbest]
        focus = split_focus(model, tokenizer, src_ids, best, device) if with_focus else {}
    hypotheses = [tokenizer.decode_tgt(h.tokens) for h in best]
    references = split.tgt_text[:n]
    scores = score(hypotheses, references, tokenize=bleu_tokenize)
    return SplitResult(hypotheses, references, split.src_text[:n], scores, nbest, focus)
