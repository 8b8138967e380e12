"""The loss of a trained run on training pairs against validation pairs: how much it overfits.

    python scripts/measurements/generalisation_gap.py RUN [RUN ...] [--train-pairs 2000] \
        [--json OUT]

For each run folder this scores the best checkpoint (the weights training evaluates, the EMA
where the run keeps one) teacher-forced, in eval mode and fp32 on the CPU, on `--train-pairs`
training pairs spread evenly over the train split and on the validation pairs training scored
(its config's trainer.eval_max_sentences), and prints the NLL per target piece of each and
their difference, then the same per sentence: the NLL summed over a sentence's pieces (EOS
included), averaged over the sentences, which compares runs whose vocabularies differ (a
smaller one cuts a sentence into more, easier pieces;
scripts/measurements/loss_per_sentence.py). A run that has seen its training pairs many times
scores them far better than held-out ones; part of any gap is the held-out families being
unlike the training ones, which a run that has seen each pair at most once also shows.
docs/docs_corpus.md quotes it; the test split is never read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from seq2seq.corpus import EncodedSplit, prepare_data
from seq2seq.inference import load_for_inference
from seq2seq.runtime import Runtime
from seq2seq.training.validation import split_loss


def target_pieces(split: EncodedSplit) -> int:
    """The target pieces a split's loss is taken over, EOS included."""
    return sum(len(ids) + 1 for ids in split.tgt_ids)


def gap(run: Path, train_pairs: int) -> dict[str, object]:
    """The run's best checkpoint's NLL per piece and per sentence on spread train pairs and on
    validation, and the pieces and pairs each was taken over."""
    loaded = load_for_inference(run / "checkpoints" / "best.pt", "cpu")
    cfg = loaded.config
    splits = prepare_data(cfg.data, cfg.tokenizer).splits
    train = splits["train"].subset(splits["train"].spread(train_pairs))
    valid = splits["validation"].subset(
        splits["validation"].spread(cfg.trainer.eval_max_sentences))
    rt = Runtime(torch.device("cpu"), "fp32")
    losses = {name: split_loss(loaded.model, split, rt, cfg.trainer.batch_tokens)
              for name, split in (("train", train), ("validation", valid))}
    pieces = {"train": target_pieces(train), "validation": target_pieces(valid)}
    sentence = {"train": losses["train"] * pieces["train"] / len(train),
                "validation": losses["validation"] * pieces["validation"] / len(valid)}
    return {"run": str(run), "step": loaded.step, "train_pairs": len(train),
            "validation_pairs": len(valid), "train_pieces": pieces["train"],
            "validation_pieces": pieces["validation"], "train_loss": losses["train"],
            "valid_loss": losses["validation"],
            "gap": losses["validation"] - losses["train"],
            "train_loss_per_sentence": sentence["train"],
            "valid_loss_per_sentence": sentence["validation"],
            "gap_per_sentence": sentence["validation"] - sentence["train"]}


def main(runs: list[Path], train_pairs: int, out: Path | None) -> None:
    results = [gap(run, train_pairs) for run in runs]
    print("run  step  train loss  valid loss  gap (nats per piece)")
    for r in results:
        print(f"{r['run']}  {r['step']}  {r['train_loss']:.3f} ({r['train_pairs']} pairs)  "
              f"{r['valid_loss']:.3f} ({r['validation_pairs']})  {r['gap']:.3f}")
    print("run  train loss  valid loss  gap (nats per sentence, pieces with EOS)")
    for r in results:
        print(f"{r['run']}  {r['train_loss_per_sentence']:.2f} ({r['train_pieces']} pieces)  "
              f"{r['valid_loss_per_sentence']:.2f} ({r['validation_pieces']})  "
              f"{r['gap_per_sentence']:.2f}")
    if out is not None:
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders (checkpoints/best.pt)")
    parser.add_argument("--train-pairs", type=int, default=2000,
                        help="training pairs scored, spread evenly over the split")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    main(args.runs, args.train_pairs, args.json)
