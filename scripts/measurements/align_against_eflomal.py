"""`python -m seq2seq.align` on a corpus's validation split against the project's eflomal
reference links (those the AER metric of every run uses): precision, recall and AER.

    python scripts/measurements/align_against_eflomal.py CKPT [OUT_DIR] [REVERSE_CKPT]

Writes the validation split into OUT_DIR (default: a temporary folder) as the metric's words
(`seq2seq.alignment.words`, "Laden." as "Laden" and ".") joined by spaces, so the whitespace
words of `align` are the words the links index; the gold file holds the sure links (both
eflomal directions) as `i-j` and the possible-only ones (either direction) as `ipj`. Then runs
align with the checkpoint (and REVERSE_CKPT, a model of the other direction, for the
symmetrised rows) and prints its table. eflomal's links are an automatic aligner's, not a
human gold set: the figures say how close the model's attention comes to eflomal.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from seq2seq.align import align
from seq2seq.alignment import corpus_links, words
from seq2seq.corpus import SPLITS
from seq2seq.data import data_root, load_corpus
from seq2seq.inference import load_for_inference


def write_split(ckpt: Path, folder: Path) -> tuple[Path, Path, Path]:
    """The validation split's source, target and gold files under `folder`."""
    data = load_for_inference(ckpt, "cpu").config.data
    corpus = load_corpus(data)
    texts = {split: (corpus[split]["src"], corpus[split]["tgt"]) for split in SPLITS}
    links = corpus_links(texts, data_root(data.root), data.name)
    assert links is not None, "eflomal is not available: no reference links"
    src, tgt = texts["validation"]
    keep = [k for k in range(len(src)) if words(src[k]) and words(tgt[k])]  # align needs words
    paths = folder / "validation.src", folder / "validation.tgt", folder / "validation.gold"
    paths[0].write_text("".join(" ".join(words(src[k])) + "\n" for k in keep))
    paths[1].write_text("".join(" ".join(words(tgt[k])) + "\n" for k in keep))
    gold = links["validation"]
    paths[2].write_text("".join(
        " ".join([f"{i}-{j}" for i, j in sorted(gold[k].sure)]
                 + [f"{i}p{j}" for i, j in sorted(gold[k].possible - gold[k].sure)]) + "\n"
        for k in keep))
    print(f"{len(keep)} of {len(src)} validation pairs (those with words on both sides)")
    return paths


def main(ckpt: Path, out: Path | None, reverse: Path | None) -> None:
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        src, tgt, gold = write_split(ckpt, folder)
        align(ckpt, src, tgt, out=folder / "validation.links", gold=gold, reverse_ckpt=reverse,
              device="cpu")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None,
         Path(sys.argv[3]) if len(sys.argv) > 3 else None)
