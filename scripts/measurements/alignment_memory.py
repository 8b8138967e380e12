"""Peak memory of the alignment scoring a run's final phase does, alone.

    python scripts/measurements/alignment_memory.py runs/.../checkpoints/best.pt

Loads the checkpoint on the CPU (one thread, glibc's freed memory kept as fp32 training keeps
it), then teacher-forces the test and the validation split of its corpus against their
reference word alignments, as the final test and the Transformer's choice of head and layer
do, and prints after each: seconds, resident memory, the process's peak and the AER.
docs/benchmark.md ("Memory of a bf16 run") quotes it.
"""

from __future__ import annotations

import sys
import time

import torch

from seq2seq.alignment import corpus_links
from seq2seq.corpus import SPLITS, encode_split
from seq2seq.data import data_root, load_corpus
from seq2seq.evaluation.aer import score_alignment
from seq2seq.evaluation.decode_and_score import eval_mode
from seq2seq.inference import load_for_inference
from seq2seq.runtime import keep_freed_memory, peak_memory_mib


def resident_mib() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


def main(ckpt: str) -> None:
    torch.set_num_threads(1)
    keep_freed_memory()
    loaded = load_for_inference(ckpt, torch.device("cpu"))
    cfg = loaded.config
    corpus = load_corpus(cfg.data)
    texts = {name: (corpus[name]["src"], corpus[name]["tgt"]) for name in SPLITS}
    links = corpus_links(texts, data_root(cfg.data.root), cfg.data.name)
    if links is None:
        sys.exit("no reference word alignments (is eflomal installed?)")
    print(f"loaded: {resident_mib()} MiB, peak {peak_memory_mib():.0f} MiB")
    for split in ("test", "validation"):
        encoded = encode_split(loaded.tokenizer, *texts[split], cfg.tokenizer.max_src_len,
                               cfg.tokenizer.max_tgt_len)
        start = time.monotonic()
        with eval_mode(loaded.model):
            found = score_alignment(loaded.model, loaded.tokenizer, encoded.src_text,
                                    encoded.tgt_text, encoded.src_ids, encoded.tgt_ids,
                                    links[split], loaded.device)
        aer = None if found is None else found.report()["aer"]
        print(f"{split}: {time.monotonic() - start:.1f} s, {resident_mib()} MiB, "
              f"peak {peak_memory_mib():.0f} MiB, AER {aer}")


if __name__ == "__main__":
    main(sys.argv[1])
