"""The probe sentences of a checkpoint's corpus teacher-forced on their references, as heatmaps
at word level (the reading TensorBoard's attention/probe_0_reference shows) and as text: each
target word's strongest source word and its weight.

    python scripts/measurements/probe_heatmaps.py CKPT OUT_DIR

The first probe's reference is data.probe_reference (its probe_words weights are printed);
a later probe's is its translation in the corpus's validation or test split. Writes
OUT_DIR/probe_<i>_teacher_forced.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from seq2seq.data import data_root, load_corpus
from seq2seq.evaluation.aer import probe_alignment
from seq2seq.fonts import fonts_for
from seq2seq.inference import load_for_inference
from seq2seq.training.validation import reference_probe
from seq2seq.visualization import figure_to_png


def references(ckpt: Path) -> list[tuple[str, str]]:
    """(probe, its reference) for every probe that has one."""
    data = load_for_inference(ckpt, "cpu").config.data
    pairs = [(data.probe[0], data.probe_reference)] if data.probe_reference else []
    corpus = load_corpus(data)
    held_out = {src: tgt for split in ("validation", "test")
                for src, tgt in zip(corpus[split]["src"], corpus[split]["tgt"], strict=True)}
    pairs += [(probe, held_out[probe]) for probe in list(data.probe)[1:] if probe in held_out]
    return pairs


def main(ckpt: Path, out: Path) -> None:
    loaded = load_for_inference(ckpt, "cpu")
    data, cpu = loaded.config.data, torch.device("cpu")
    fonts_for((data.src_lang, data.tgt_lang), data_root(data.root) / "raw")
    out.mkdir(parents=True, exist_ok=True)
    step = int(loaded.history[-1]["step"]) if loaded.history else -1  # the evaluation that wrote it
    for i, (src, tgt) in enumerate(references(ckpt)):
        words = [list(w) for w in data.probe_words] if i == 0 else []
        # a guided Transformer is read by the layer and head it was guided on (its alignment)
        found = reference_probe(loaded.model, loaded.tokenizer, src, tgt, words, cpu, step)
        aligned = probe_alignment(loaded.model, loaded.tokenizer, src, tgt, cpu)
        if found is None or aligned is None:
            print(f"{ckpt}: no attention")
            return
        fig, weights = found
        path = out / f"probe_{i}_teacher_forced.png"
        figure_to_png(fig, path)
        word_attn, src_words, tgt_words = aligned  # (Tw, Sw + 1), the last column EOS
        columns = [*src_words, "</s>"]
        strongest = ", ".join(f"{t}→{columns[int(row.argmax())]} {float(row.max()):.2f}"
                              for t, row in zip(tgt_words, word_attn, strict=True))
        print(f"{path.name}: {src} → {tgt}\n  strongest: {strongest}")
        if weights:
            print("  probe words: " + ", ".join(f"{t}→{s} {w:.2f}"
                                                for (t, s), w in weights.items()))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
