"""A model's attention as word links: what `translate alignments=true` prints and
`python -m seq2seq.align` writes, as Pharaoh `i-j` pairs.

Words are the whitespace-separated tokens of the text as the user sees it (the input line, the
detokenized output), so an index counts the words printed. Pieces become words as the AER
metric reads them (`seq2seq.evaluation.aer`): a piece belongs to every word its characters
overlap, a target word's row is the mean of its pieces' rows, a source word's column the sum
of its pieces' columns, and a target word links to its strictly largest source column unless
the source EOS wins or two columns tie (then it links nothing).

Which attention (`choose_reading`): an RNN's, or an ensemble's mean, at the step predicting each
word, or with Shift-Att the step after it (Bahdanau's query is the previous state, so its
attention may sit a word ahead: the validation AER reports both readings). A model trained
with guided alignment (trainer.alignment_weight > 0): the attention it supervised, for the
Transformer its layer and head (trainer.alignment_layer/alignment_head). Otherwise a
Transformer's cross-attention of one decoder layer averaged over its heads: by default
the layer with the lowest validation AER in the checkpoint's history (the latest evaluation
recorded in it: for best.pt, the one that wrote it), else the last layer, whose mean the AER
metric's "model" figure reads; or, with Shift-Att (Chen et al. 2020), the row of the step that
reads the word as its input, at the layer validation chose for it, else the last.

Shapes: T target pieces and S source pieces, each with its EOS; L decoder layers, H heads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from seq2seq.data.batching import budget_chunks, collate
from seq2seq.errors import UserError
from seq2seq.evaluation.aer import (
    ALIGNMENT_BATCH_CELLS,
    hard_alignment,
    piece_words,
    shift_att,
    word_attention,
)
from seq2seq.evaluation.decode_and_score import eval_mode
from seq2seq.evaluation.hypotheses import one_line
from seq2seq.evaluation.pharaoh import Link, format_links
from seq2seq.search import Hypothesis
from seq2seq.tokenization import EOS_ID, Tokenizer

WHITESPACE_WORD = re.compile(r"\S+")
READINGS = ("attention", "shift_att")


def whitespace_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of the whitespace-separated words of `text`."""
    return [match.span() for match in WHITESPACE_WORD.finditer(text)]


@dataclass(frozen=True)
class Reading:
    """Which attention gives the links.

    Attributes:
        shift: Shift-Att, the row of the step that reads each target piece.
        layer: a Transformer decoder layer, its heads averaged; None: the attention the model
            returns (an RNN's, an ensemble's mean).
        head: that layer's head instead of the mean (the one guided alignment supervised).
        description: the reading in words, for the user.
    """

    shift: bool
    layer: int | None
    description: str
    head: int | None = None


def aer_label(config: DictConfig) -> str:
    """What an AER against eflomal's links measures for this run: alignment against eflomal,
    or, where guided alignment trained on those very links, agreement with its teacher."""
    if float(config.trainer.get("alignment_weight", 0.0)) > 0:
        return "agreement with eflomal, its teacher (AER)"
    return "AER against eflomal"


def recorded_layer(history: Sequence[dict], num_layers: int, shift: bool) -> tuple[int, int]:
    """(layer, step) of the latest evaluation in `history` that chose a layer: the lowest mean
    AER over heads (`valid_aer_layer<n>`; the first on a tie) or, with `shift`, its Shift-Att
    layer (`valid_shift_att_layer`); (-1, -1) when none did."""
    for row in reversed(history):
        if shift:
            layer = row.get("valid_shift_att_layer")
            if layer is not None and 0 <= int(layer) < num_layers:
                return int(layer), int(row.get("step", -1))
            continue
        aers = [row.get(f"valid_aer_layer{n}") for n in range(num_layers)]
        if all(aer is not None for aer in aers):
            return min(range(num_layers), key=lambda n: aers[n]), int(row.get("step", -1))
    return -1, -1


@torch.inference_mode()
def choose_reading(
    model: nn.Module, model_name: str, history: Sequence[dict], device: torch.device,
    reading: str = "attention", layer: int | str = "validation",
) -> Reading:
    """The reading of `model`'s attention that `reading` (attention | shift_att) and `layer`
    (validation: chosen on validation where `history` records it; or a decoder layer from 0)
    name. A Transformer read by the layer and head guided alignment trained (its `alignment`)
    is read there with reading=attention and layer=validation.

    Raises:
        UserError: a model without attention, an unknown reading, Shift-Att or a layer for a
            model without decoder layers, a layer it does not have.
    """
    if reading not in READINGS:
        raise UserError(f"reading={reading!r} is not one of {', '.join(READINGS)}")
    probe = collate([[EOS_ID]], [[EOS_ID]], [0]).to(device)
    with eval_mode(model):
        _, attention = model(probe.src, probe.src_mask, probe.tgt_in, project=False)
        heads = model.cross_attention(probe.src, probe.src_mask, probe.tgt_in)  # (L,1,H,T,S)
    if attention is None:
        raise UserError(f"the {model_name} model has no attention: it gives no word links")
    shift = reading == "shift_att"
    if heads is None:
        if layer != "validation":
            raise UserError(f"layer={layer}: the {model_name} model has no decoder layers to "
                            "choose from; leave layer=validation")
        step = "after the one predicting (Shift-Att)" if shift else "predicting"
        return Reading(shift, None, f"the {model_name} attention of the step {step} each "
                                    "target word")
    num_layers = heads.shape[0]
    supervised = getattr(model, "alignment", None)
    if supervised is not None and not shift and layer == "validation":
        chosen, head = supervised
        which = "mean over heads" if head is None else f"head {head}"
        return Reading(False, chosen, f"{model_name} cross-attention of the step predicting "
                                      f"each target word, decoder layer {chosen} of "
                                      f"0-{num_layers - 1}, {which}: the one guided alignment "
                                      "trained", head)
    if layer == "validation":
        chosen, step = recorded_layer(history, num_layers, shift)
        how = f"chosen on validation at step {step}"
        if chosen < 0:
            chosen, how = num_layers - 1, "the last: the checkpoint records no layer chosen on " \
                                          "validation"
    else:
        if not isinstance(layer, int) or not 0 <= layer < num_layers:
            raise UserError(f"layer={layer}: use validation or a decoder layer, 0 to "
                            f"{num_layers - 1}")
        chosen, how = layer, "as given"
    step_read = "reading each target word (Shift-Att)" if shift else "predicting each target word"
    return Reading(shift, chosen, f"{model_name} cross-attention of the step {step_read}, "
                                  f"decoder layer {chosen} of 0-{num_layers - 1} ({how}), "
                                  "mean over heads")


@torch.inference_mode()
def teacher_forced(
    model: nn.Module, src_ids: list[list[int]], tgt_ids: list[list[int]], reading: Reading,
    device: torch.device, batch_size: int = 64, batch_cells: int = ALIGNMENT_BATCH_CELLS,
) -> list[Tensor]:
    """Each pair's piece attention (T, S) of `reading`, the target fed as decoder input; EOS
    row and column included, float32 on the CPU, in input order. Pairs go by length in batches
    of at most `batch_size` within `batch_cells` (as `aer.score_alignment`'s)."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    cells = [(len(s) + 1) * (len(t) + 1) for s, t in zip(src_ids, tgt_ids, strict=True)]
    found: dict[int, Tensor] = {}
    with eval_mode(model):
        for chunk in budget_chunks(order, cells, batch_size, batch_cells):
            batch = collate([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk], chunk)
            batch = batch.to(device)
            if reading.layer is None:
                _, attn = model(batch.src, batch.src_mask, batch.tgt_in, project=False)
            else:
                heads = model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)
                chosen = heads[reading.layer]  # (L, B, H, T, S) -> (B, H, T, S)
                attn = chosen.mean(dim=1) if reading.head is None else chosen[:, reading.head]
            for b, i in enumerate(chunk):
                found[i] = attn[b, :len(tgt_ids[i]) + 1, :len(src_ids[i]) + 1].float().cpu()
    return [found[i] for i in range(len(src_ids))]


def word_links(
    attn: Tensor, src_text: str, tgt_text: str, src_spans: list[tuple[int, int]],
    tgt_spans: list[tuple[int, int]], shift: bool = False,
) -> frozenset[Link]:
    """The (source word, target word) links of one pair's piece attention (T, S), EOS
    included, with each source and target piece's character span in its text (one a row or
    column less EOS; a piece cut off by a length limit is simply absent)."""
    src_words, tgt_words = whitespace_spans(src_text), whitespace_spans(tgt_text)
    if not src_words or not tgt_words:
        return frozenset()
    rows = shift_att(attn) if shift else attn
    word_attn = word_attention(rows.float(), piece_words(src_spans, src_words),
                               piece_words(tgt_spans, tgt_words), len(src_words), len(tgt_words))
    aligned = hard_alignment(word_attn)  # (Tw,) a source word per target word, or -1
    return frozenset((int(i), j) for j, i in enumerate(aligned.tolist()) if i >= 0)


class HypothesisLinks:
    """The links of translations as `translate alignments=true` prints them: `text ||| links`
    with the whitespace words of the input line and of the printed output.

    Args:
        model: the decoding model, in eval mode.
        tokenizer: its tokenizer.
        reading: which attention (`choose_reading`); a Transformer layer is read again by
            feeding the hypothesis back, which is the attention its decoding computed.
        device: where the model lives.
    """

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, reading: Reading,
                 device: torch.device) -> None:
        self.model, self.tokenizer, self.reading, self.device = model, tokenizer, reading, device

    def __call__(self, src_text: str, src_ids: list[int], hyps: list[Hypothesis]) -> list[str]:
        """Per hypothesis of one input line (its text and source ids as decoded), the links."""
        if self.reading.layer is None:
            attention = [h.attention for h in hyps]
        else:
            attention = teacher_forced(self.model, [src_ids] * len(hyps),
                                       [h.tokens for h in hyps], self.reading, self.device)
        src_spans = self.tokenizer.src_spans([src_text])[0][:len(src_ids)]
        lines = []
        for hyp, attn in zip(hyps, attention, strict=True):
            if attn is None:
                raise UserError("the model gave no attention for a hypothesis: no word links")
            text, tgt_spans = self.tokenizer.tgt_decoded_spans(hyp.tokens)
            lines.append(format_links(word_links(attn, src_text, one_line(text), src_spans,
                                                 tgt_spans, self.reading.shift)))
        return lines
