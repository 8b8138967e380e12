"""Validation loss per sentence, to compare runs whose vocabularies differ.

    python scripts/measurements/loss_per_sentence.py RUN [RUN ...] [--json OUT]

A run's validation loss is the mean NLL per target piece, so runs with different tokenizers
cannot be compared on it: a smaller vocabulary cuts a sentence into more, easier pieces. The
NLL of a whole sentence can: the loss times the pieces it was taken over (EOS included),
divided by the sentences. For each run folder this rebuilds the validation pairs training
scored (its config's data, tokenizer and trainer.eval_max_sentences, from the data cache) and
prints its validation history with that figure beside BLEU and chrF. docs/docs_corpus.md
quotes it; the test split is never read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omegaconf import OmegaConf

from seq2seq.corpus import prepare_data


def validation_tokens(cfg) -> tuple[int, int]:
    """(sentences, target pieces + EOS) of the validation pairs a run with `cfg` scores."""
    valid = prepare_data(cfg.data, cfg.tokenizer).splits["validation"]
    keep = valid.spread(cfg.trainer.eval_max_sentences)
    return len(keep), sum(len(valid.tgt_ids[i]) + 1 for i in keep)


def per_sentence(run: Path) -> dict[str, object]:
    cfg = OmegaConf.load(run / "config.yaml")
    sentences, tokens = validation_tokens(cfg)
    history = json.loads((run / "metrics.json").read_text())["history"]
    rows = [{"step": h["step"], "time": h["time"], "valid_loss": h["valid_loss"],
             "valid_loss_per_sentence": h["valid_loss"] * tokens / sentences,
             "valid_bleu": h["valid_bleu"], "valid_chrf": h["valid_chrf"]} for h in history]
    return {"run": str(run), "vocab_size": cfg.tokenizer.vocab_size, "sentences": sentences,
            "target_tokens": tokens, "history": rows}


def main(runs: list[Path], out: Path | None) -> None:
    results = [per_sentence(run) for run in runs]
    for r in results:
        print(f"{r['run']}: vocabulary {r['vocab_size']:,}, {r['sentences']} validation pairs, "
              f"{r['target_tokens']:,} target pieces with EOS")
        print("  step  time (s)  loss/piece  loss/sentence  BLEU  chrF")
        for h in r["history"]:
            print(f"  {h['step']:>5} {h['time']:>8.0f} {h['valid_loss']:>10.3f} "
                  f"{h['valid_loss_per_sentence']:>13.1f} {h['valid_bleu']:>5.2f} "
                  f"{h['valid_chrf']:>5.1f}")
    if out is not None:
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+",
                        help="run folders (config.yaml, metrics.json)")
    parser.add_argument("--json", type=Path, default=None, help="write the tables here")
    args = parser.parse_args()
    main(args.runs, args.json)
