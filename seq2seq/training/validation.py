"""Validation during training and the final test, on the evaluated weights.

Validation measures the loss, BLEU, chrF and the attention's agreement with word alignments
(AER, `seq2seq.evaluation.aer`) on the validation split and shows a few samples and the probe
sentences' attention heatmaps in TensorBoard, the first probe also teacher-forced on its
reference at word level (for the Transformer also read the Shift-Att way). The final test
decodes the test split with beam search, scores it and writes the hypotheses; the
Transformer's best head and Shift-Att layer are chosen on validation.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from seq2seq.alignment import Links
from seq2seq.checkpoint import load_checkpoint
from seq2seq.corpus import EncodedSplit, PreparedData, encode_split
from seq2seq.data.batching import Batch, collate, token_batches
from seq2seq.decoding import DecodeSettings
from seq2seq.evaluation.aer import probe_alignment
from seq2seq.evaluation.decode_and_score import (
    choose_best,
    decode_and_score,
    decode_ids,
    eval_mode,
)
from seq2seq.evaluation.hypotheses import write_hypotheses
from seq2seq.runtime import Runtime, release_freed_memory
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from seq2seq.training.loss import linear_token_losses
from seq2seq.visualization import attention_heatmap, head_grid


@torch.inference_mode()
def split_loss(model: nn.Module, split: EncodedSplit, rt: Runtime, batch_tokens: int,
               pad_to_multiple: int = 1) -> float:
    """The per-token NLL of `model` teacher-forced on `split` (no label smoothing), in eval
    mode, in batches of about `batch_tokens` at `rt`'s device and precision."""
    total, tokens = 0.0, 0
    batches = token_batches(split.src_lens, split.tgt_lens, batch_tokens, shuffle=False,
                            seed=0, epoch=0)
    with eval_mode(model):
        for indices in batches:
            batch = collate(
                [split.src_ids[i] for i in indices], [split.tgt_ids[i] for i in indices],
                indices, pad_to_multiple=pad_to_multiple,
            ).to(rt.device, non_blocking=rt.device.type == "cuda")
            with rt.autocast():
                features, _ = model(batch.src, batch.src_mask, batch.tgt_in, need_attn=False,
                                    project=False)
            generator = model.generator
            _, nll = linear_token_losses(features.flatten(0, 1), generator.weight,
                                         generator.bias, batch.tgt_out.flatten(), PAD_ID)
            total += nll.item()
            tokens += batch.num_tgt_tokens
    return total / max(tokens, 1)


class Validator:
    """Scores the evaluated weights on rank 0.

    Args:
        model: the evaluated weights: the average (trainer.ema_decay) or the trained model.
        data: the tokenizer and the validation and test splits.
        rt: the runtime (device and precision of the validation loss).
        writer: TensorBoard, or None (processes other than rank 0).
        valid_settings: the search during validation (the probe is decoded greedily).
        test_settings: the search of the final test.
        batch_tokens: tokens per batch of the validation loss.
        pad_to_multiple: sequence lengths are padded up to a multiple of this, as in training.
        max_sentences: validate on N pairs spread evenly over the validation split (the same N
            at every validation: loss, BLEU, chrF and AER); None: all.
        bleu_tokenize: sacrebleu's BLEU tokenizer (`bleu_tokenize_for` the target language);
            None: 13a.
        test_set: the name every test score carries.
        probe: sentences translated at every validation, their heatmaps to TensorBoard.
        probe_reference: the first probe sentence's reference, for its teacher-forced heatmap.
        probe_words: [target word, source word] pairs whose probe weight is logged.
        links: the reference word links of the validation and test splits; None: no AER.
    The AER, the probes' heatmaps and their scalars read the attention the model returns: a
    guided Transformer's is the layer and head it was guided on (its `alignment`).
    """

    def __init__(
        self,
        model: nn.Module,
        data: PreparedData,
        rt: Runtime,
        writer: SummaryWriter | None,
        *,
        valid_settings: DecodeSettings,
        test_settings: DecodeSettings,
        batch_tokens: int,
        pad_to_multiple: int = 1,
        max_sentences: int | None = None,
        bleu_tokenize: str | None = None,
        test_set: str = "test",
        probe: list[str] | None = None,
        probe_reference: str | None = None,
        probe_words: list[list[str]] | None = None,
        links: dict[str, list[Links]] | None = None,
    ) -> None:
        self.model, self.data, self.rt, self.writer = model, data, rt, writer
        self.valid_settings, self.test_settings = valid_settings, test_settings
        self.batch_tokens, self.pad_to_multiple = batch_tokens, pad_to_multiple
        self.bleu_tokenize = bleu_tokenize
        self.test_set = test_set
        self.probe = list(probe or [])
        self.probe_reference, self.probe_words = probe_reference, list(probe_words or [])
        self.links = links
        self.said_no_self_attention = False
        valid = data.splits["validation"]
        keep = valid.spread(max_sentences)
        self.valid = valid if len(keep) == len(valid) else valid.subset(keep)
        self.valid_links = None if links is None else [links["validation"][i] for i in keep]

    def loss(self) -> float:
        """The per-token NLL of the validation split (no label smoothing)."""
        return split_loss(self.model, self.valid, self.rt, self.batch_tokens,
                          self.pad_to_multiple)

    def validate(self, step: int, elapsed: float) -> dict[str, float]:
        """Validation loss, BLEU, chrF, focus as one history row; to TensorBoard with samples
        and the probe heatmaps."""
        release_freed_memory()  # the training step's heap, before the decode's
        loss = self.loss()
        result = decode_and_score(
            self.model, self.data.tokenizer, self.valid, self.valid_settings, self.rt.device,
            bleu_tokenize=self.bleu_tokenize, links=self.valid_links,
        )
        row = {
            "step": step,
            "time": round(elapsed, 1),
            "valid_loss": loss,
            "valid_ppl": math.exp(min(loss, 50.0)),
            "valid_bleu": result.scores.bleu,
            "valid_chrf": result.scores.chrf,
            "bleu_signature": result.scores.bleu_signature,  # which BLEU: the best compares alike
        }
        shift_layer = None  # the Transformer's best Shift-Att layer on this validation
        if result.alignment is not None:
            row.update(alignment_row(result.summary()["alignment"]))
            shift_layer = result.alignment.best_shift_layer()
        if self.writer is not None:
            for key, value in row.items():
                if key.startswith("valid_") and value is not None:
                    self.writer.add_scalar(key.replace("valid_", "valid/"), value, step)
            samples = "\n".join(
                f"| {s} | {r} | {h} |"
                for s, r, h in list(
                    zip(result.sources, result.references, result.hypotheses, strict=True)
                )[:5]
            )
            self.writer.add_text("samples", "| source | reference | hypothesis |\n|---|---|---|\n"
                                 + samples, step)
            self.log_probe(step, shift_layer)
        return row

    @torch.inference_mode()
    def log_probe(self, step: int, shift_layer: int | None = None) -> None:
        """Translate the probe sentences greedily; their attention heatmaps (and, for the
        Transformer, the last layer's heads) go to TensorBoard. `shift_layer`: the layer whose
        Shift-Att the teacher-forced probe is also drawn with; None: not drawn."""
        if not self.probe or self.writer is None:
            return
        if self.probe_reference is not None:
            self.log_probe_alignment(step, shift_layer)
        tok = self.data.tokenizer
        split = encode_split(tok, self.probe, [""] * len(self.probe), 10_000, 10_000)
        eos = tok.tgt_pieces([EOS_ID])[0]
        settings = dataclasses.replace(self.valid_settings, beam_size=1)
        with eval_mode(self.model):
            hyps = decode_ids(self.model, split.src_ids, settings, self.rt.device)
            for i, (src_ids, nbest) in enumerate(zip(split.src_ids, hyps, strict=True)):
                hyp = nbest[0]
                text = tok.decode_tgt(hyp.tokens)
                self.writer.add_text(f"probe/{i}", f"{self.probe[i]} → {text}", step)
                if hyp.attention is None:
                    continue
                src_labels = tok.src_pieces(src_ids) + [eos]
                tgt_labels = tok.tgt_pieces(hyp.tokens) + [eos]
                batch = collate([src_ids], [hyp.tokens], [0]).to(self.rt.device)
                heads = self.model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)
                fig = attention_heatmap(hyp.attention.float().cpu(), src_labels, tgt_labels,
                                        title=f"step {step}: {text}")
                self.writer.add_figure(f"attention/probe_{i}", fig, step)
                if heads is not None:  # (L, 1, H, T, S): the Transformer's layers and heads
                    fig = head_grid(heads[-1, 0].float().cpu(), src_labels, tgt_labels,
                                    title=f"step {step}: last layer, per head")
                    self.writer.add_figure(f"attention_heads/probe_{i}", fig, step)
                self.log_self_attention(i, batch, src_labels,
                                        tok.tgt_pieces([BOS_ID]) + tgt_labels[:-1], step)

    def log_self_attention(self, i: int, batch: Batch, src_labels: list[str],
                           tgt_labels: list[str], step: int) -> None:
        """Probe i's encoder self-attention and decoder masked self-attention, every layer's
        heads as a grid (`self_attention/probe_<i>/{encoder,decoder}_layer<l>`); a recurrent
        model says once, in text, that it has none."""
        assert self.writer is not None
        found = self.model.self_attention(batch.src, batch.src_mask, batch.tgt_in)
        if found is None:
            if not self.said_no_self_attention:
                self.writer.add_text("self_attention", "this model has no self-attention: its "
                                     "encoder and decoder are recurrent", step)
                self.said_no_self_attention = True
            return
        for kind, layers, labels in (("encoder", found[0], src_labels),
                                     ("decoder", found[1], tgt_labels)):
            for layer, weights in enumerate(layers[:, 0].float().cpu()):  # (H, N, N) each
                fig = head_grid(weights, labels, labels,
                                title=f"step {step}: {kind} self-attention, layer {layer}")
                self.writer.add_figure(f"self_attention/probe_{i}/{kind}_layer{layer}", fig,
                                       step)

    def log_probe_alignment(self, step: int, shift_layer: int | None = None) -> None:
        """The first probe sentence teacher-forced on its reference at word level: a heatmap
        with the weight of each `probe_words` pair on it, and those weights as scalars; with
        `shift_layer`, the same for that layer's Shift-Att (`probe_shift_att/...`)."""
        assert self.writer is not None and self.probe_reference is not None
        readings = [("attention/probe_0_reference", "probe", None)]
        if shift_layer is not None:
            readings.append(("attention/probe_0_reference_shift_att", "probe_shift_att",
                             shift_layer))
        for tag, prefix, layer in readings:
            with eval_mode(self.model):
                found = reference_probe(self.model, self.data.tokenizer, self.probe[0],
                                        self.probe_reference, self.probe_words, self.rt.device,
                                        step, layer)
            if found is None:  # no attention (the vanilla model)
                continue
            fig, weights = found
            for (target, source), weight in weights.items():
                self.writer.add_scalar(f"{prefix}/{target}->{source}", weight, step)
            self.writer.add_figure(tag, fig, step)

    def final_test(
        self, trained: nn.Module, best: Path, hypotheses: Path, step: int
    ) -> dict[str, Any]:
        """Decode the test split with beam search and write the hypotheses. The weights scored
        are best.pt's, loaded into `trained`, when it exists, else the evaluated weights;
        "checkpoint" in the summary names the file scored, or is None for the weights in
        memory."""
        model, scored = self.model, None
        if best.is_file():
            trained.load_state_dict(load_checkpoint(best)["model"])
            model, scored = trained, str(best)
        release_freed_memory()  # the training's heap and the checkpoint, before the decode
        start = time.monotonic()
        result = decode_and_score(model, self.data.tokenizer, self.data.splits["test"],
                                  self.test_settings, self.rt.device,
                                  bleu_tokenize=self.bleu_tokenize,
                                  links=None if self.links is None else self.links["test"])
        seconds = time.monotonic() - start
        write_hypotheses(hypotheses, result.hypotheses)
        if self.writer is not None:
            self.writer.add_scalar("test/bleu", result.scores.bleu, step)
            self.writer.add_scalar("test/chrf", result.scores.chrf, step)
        chosen = None  # the Transformer's best head and Shift-Att layer, chosen on validation
        if self.links is not None and result.alignment is not None and result.alignment.heads:
            chosen = choose_best(model, self.data.tokenizer, self.data.splits["validation"],
                                 self.links["validation"], self.rt.device)
        return {**result.summary(chosen), "test_set": self.test_set,
                "beam_size": self.test_settings.beam_size, "decode_seconds": round(seconds, 2),
                "checkpoint": scored}


def reference_probe(
    model: nn.Module, tokenizer: Tokenizer, src_text: str, tgt_text: str,
    probe_words: list[list[str]], device: torch.device, step: int,
    shift_layer: int | None = None,
) -> tuple[Figure, dict[tuple[str, str], float]] | None:
    """A probe sentence teacher-forced on its reference at word level (`probe_alignment`),
    as a heatmap whose title names the reading (the step predicting the word, or Shift-Att at
    `shift_layer`) and the weight of each `probe_words` [target, source] pair found; the
    figure and those weights. None without attention of that reading."""
    found = probe_alignment(model, tokenizer, src_text, tgt_text, device, shift_layer)
    if found is None:
        return None
    word_attn, src_words, tgt_words = found  # (Tw, Sw + 1)
    weights = {(target, source): float(word_attn[tgt_words.index(target),
                                                 src_words.index(source)])
               for target, source in probe_words if target in tgt_words and source in src_words}
    what = ("cross-attention, step predicting the word" if shift_layer is None
            else f"Shift-Att, layer {shift_layer}")
    reading = getattr(model, "alignment", None)
    if reading is not None and shift_layer is None:
        what += f", guided layer {reading[0]} " + (
            "mean" if reading[1] is None else f"head {reading[1]}")
    title = f"step {step}, teacher-forced, {what}: " + ", ".join(
        f"{target}→{source} {weight:.2f}" for (target, source), weight in weights.items())
    return attention_heatmap(word_attn, src_words, tgt_words, title=title), weights


def alignment_row(report: dict[str, Any]) -> dict[str, float | None]:
    """The figures of an alignment report logged at every validation (history, TensorBoard)."""
    row = {f"valid_{key}": report[key] for key in
           ("aer", "sure_accuracy", "sure_mass", "copy_accuracy", "copy_mass")}
    for name, baseline in report["baselines"].items():
        row[f"valid_aer_{name}"] = baseline["aer"]
    if "best_head" in report:
        row["valid_aer_best_head"] = report["best_head"]["aer"]
        for layer, figures in enumerate(report["layers"]):
            row[f"valid_aer_layer{layer}"] = figures["aer"]
    if report.get("shift_att") is not None:
        row["valid_aer_shift_att"] = report["shift_att"]["aer"]
        row["valid_shift_att_layer"] = report["shift_att"]["layer"]
        for layer, figures in enumerate(report["shift_att"]["layers"]):
            row[f"valid_aer_shift_att_layer{layer}"] = figures["aer"]
    return row
