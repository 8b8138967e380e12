"""What the attention-alignment metric costs a `make train` run: eflomal once per corpus, then
teacher-forced scoring at every validation (2 threads, as `make train`).

    python scripts/measurements/alignment_cost.py runs/compare/<date>

Reads the bahdanau and transformer checkpoints of a `make compare` folder; prints the seconds
eflomal takes on the corpus (into a temporary cache) and the median of three scorings of the
validation split, beside the greedy decoding of the same split.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from seq2seq.alignment import reference_links
from seq2seq.corpus import SPLITS, encode_split
from seq2seq.data import load_corpus
from seq2seq.decoding import DecodeSettings
from seq2seq.evaluation.aer import score_alignment
from seq2seq.evaluation.decode_and_score import decode_ids, eval_mode
from seq2seq.inference import load_for_inference


def main(runs: Path) -> None:
    torch.set_num_threads(2)
    corpus = load_corpus(load_for_inference(runs / "bahdanau/checkpoints/best.pt", "cpu")
                         .config.data)
    texts = {split: (corpus[split]["src"], corpus[split]["tgt"]) for split in SPLITS}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        links = reference_links(texts, Path(tmp), verbose=False)
        pairs = sum(len(src) for src, _ in texts.values())
        print(f"eflomal on {pairs:,} pairs: {time.monotonic() - start:.1f} s (once per corpus)")
    assert links is not None, "eflomal is not available"
    for variant in ("bahdanau", "transformer"):
        loaded = load_for_inference(runs / variant / "checkpoints/best.pt", "cpu")
        valid = encode_split(loaded.tokenizer, corpus["validation"]["src"],
                             corpus["validation"]["tgt"], 256, 256)
        seconds = []
        for _ in range(3):
            start = time.monotonic()
            with eval_mode(loaded.model):
                score_alignment(loaded.model, loaded.tokenizer, valid.src_text, valid.tgt_text,
                                valid.src_ids, valid.tgt_ids, links["validation"], loaded.device)
            seconds.append(time.monotonic() - start)
        start = time.monotonic()
        decode_ids(loaded.model, valid.src_ids, DecodeSettings(beam_size=1), loaded.device)
        greedy = time.monotonic() - start
        print(f"{variant}: scoring the {len(valid)} validation pairs: median "
              f"{sorted(seconds)[1]:.2f} s of {[round(s, 2) for s in seconds]}; greedy decoding "
              f"of the same split {greedy:.2f} s")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
