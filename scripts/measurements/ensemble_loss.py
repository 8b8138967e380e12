"""The teacher-forced validation loss of checkpoints and of their ensembles.

    python scripts/measurements/ensemble_loss.py A.pt B.pt A.pt,B.pt ...

Each argument is a checkpoint, or comma-separated checkpoints decoding as one ensemble
(`seq2seq.inference.load_models`). Prints, for each, the validation split's mean negative
log-probability per target piece (EOS included, no label smoothing), in nats, on one thread:
for a single checkpoint the `valid loss` its training logged, for an ensemble that of the log
of its members' mean probability. docs/ablations.md ("Ensembles, measured on validation")
quotes it; the test split is never scored.
"""

from __future__ import annotations

import argparse

import torch

from seq2seq.corpus import encode_split
from seq2seq.data import load_corpus
from seq2seq.data.batching import collate
from seq2seq.inference import load_models


@torch.inference_mode()
def validation_loss(spec: str, batch_size: int = 64) -> float:
    """The mean loss per target piece of a checkpoint, or `A.pt,B.pt` an ensemble."""
    paths = spec.split(",")
    loaded = load_models(paths, "cpu")
    cfg = loaded.config
    corpus = load_corpus(cfg.data)["validation"]
    split = encode_split(loaded.tokenizer, corpus["src"], corpus["tgt"],
                         cfg.tokenizer.max_src_len, cfg.tokenizer.max_tgt_len)
    total, pieces = 0.0, 0
    for start in range(0, len(split.src_ids), batch_size):
        rows = list(range(start, min(start + batch_size, len(split.src_ids))))
        batch = collate([split.src_ids[i] for i in rows], [split.tgt_ids[i] for i in rows], rows)
        out, _ = loaded.model(batch.src, batch.src_mask, batch.tgt_in, need_attn=False)
        log_probs = torch.log_softmax(out.float(), dim=-1)  # (B, T, V)
        nll = -log_probs.gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
        real = batch.tgt_out != loaded.model.pad_id
        total += float(nll[real].sum())
        pieces += int(real.sum())
    return total / pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="a checkpoint, or A.pt,B.pt: an ensemble")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for spec in args.specs:
        print(f"{validation_loss(spec):.4f}  {spec}", flush=True)


if __name__ == "__main__":
    main()
