"""Decode a split with any model and score it: the one path used by training (validation and
the final test), `python -m seq2seq.evaluate` and translate, so a checkpoint's BLEU is the same
wherever it is measured."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from seq2seq.alignment import Links
from seq2seq.corpus import EncodedSplit
from seq2seq.decoding import DecodeSettings, translate_batches
from seq2seq.evaluation.aer import Chosen, SplitAlignment, score_alignment
from seq2seq.evaluation.metrics import Scores, score
from seq2seq.runtime import release_freed_memory
from seq2seq.search import Hypothesis
from seq2seq.tokenization import EOS_ID, Tokenizer


@dataclass
class SplitResult:
    hypotheses: list[str]
    references: list[str]
    sources: list[str]
    scores: Scores
    nbest: list[list[Hypothesis]]
    alignment: SplitAlignment | None = None  # attention against the reference links

    def summary(self, chosen: Chosen | None = None) -> dict[str, Any]:
        """The scores and, with reference links, the attention alignment (`chosen`: the
        Transformer's head and Shift-Att layer chosen on validation; None chooses on this
        split)."""
        alignment = None if self.alignment is None else self.alignment.report(chosen)
        return {**self.scores.as_dict(), "alignment": alignment}


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
            batch_tokens=settings.batch_tokens,
        )


def decode_and_score(
    model: nn.Module,
    tokenizer: Tokenizer,
    split: EncodedSplit,
    settings: DecodeSettings,
    device: torch.device,
    links: list[Links] | None = None,
    bleu_tokenize: str | None = None,
) -> SplitResult:
    """Decode the sources of a split, detokenize and score against the text references; with
    the split's reference `links`, also score the attention teacher-forced on the references
    (`seq2seq.evaluation.aer`: the attention the model returns). The model runs in eval mode
    throughout."""
    alignment = None
    with eval_mode(model):
        nbest = decode_ids(model, split.src_ids, settings, device)
        if links is not None:
            release_freed_memory()  # the beam search's heap, before the scoring's other shapes
            alignment = score_alignment(model, tokenizer, split.src_text, split.tgt_text,
                                        split.src_ids, split.tgt_ids, links, device)
    hypotheses = [tokenizer.decode_tgt(hyps[0].tokens) for hyps in nbest]
    scores = score(hypotheses, split.tgt_text, tokenize=bleu_tokenize)
    return SplitResult(hypotheses, split.tgt_text, split.src_text, scores, nbest, alignment)


def choose_best(
    model: nn.Module, tokenizer: Tokenizer, split: EncodedSplit, links: list[Links],
    device: torch.device,
) -> Chosen | None:
    """The (layer, head) and the Shift-Att layer whose attention agrees best with `links` on
    `split` (lowest AER), teacher-forced; None for a model without attention. Chosen on
    validation, reported on test."""
    with eval_mode(model):
        found = score_alignment(model, tokenizer, split.src_text, split.tgt_text, split.src_ids,
                                split.tgt_ids, links, device)
    return None if found is None else found.choose()
