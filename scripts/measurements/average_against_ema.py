"""Checkpoint averaging against the EMA, on a finished run's own validation.

    python scripts/measurements/average_against_ema.py RUN [--last 2 3 5] [--json OUT]

Scores the weights a run could end with, each by the validation training does (the loss per
piece, BLEU and chrF with the run's validation search, greedy by default, and the AER, on the
run's trainer.eval_max_sentences pairs, one thread, the run's precision): the EMA of its
newest periodic checkpoint (what training validates last), that checkpoint's trained weights,
and for each k the mean of its newest k periodic checkpoints (`seq2seq.average`), of the
trained weights (fairseq's and JoeyNMT's habit) and of the EMA snapshots. A run without an EMA
(trainer.ema_decay null) has the trained rows only. docs/docs_corpus.md quotes it; the test
split is never scored.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seq2seq.average import average_checkpoints
from seq2seq.checkpoint import check_tokenizer, load_checkpoint, periodic_checkpoints
from seq2seq.corpus import prepare_data
from seq2seq.inference import schema_config
from seq2seq.models import build_model, is_recurrent
from seq2seq.runtime import setup_runtime
from seq2seq.training.setup import build_validator

COLUMNS = ("valid_loss", "valid_bleu", "valid_chrf", "valid_aer")


def main(run: Path, lasts: list[int], out: Path | None) -> None:
    paths = periodic_checkpoints(run / "checkpoints")
    if not paths:
        raise SystemExit(f"{run}/checkpoints: no step-<N>.pt to average")
    newest = paths[-1]
    payload = load_checkpoint(newest)
    cfg = schema_config(payload, newest)
    t = cfg.trainer
    rt = setup_runtime("cpu", t.precision, 1, t.seed, is_recurrent(cfg.model))
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    tok = data.tokenizer
    check_tokenizer(payload, tok, newest, run / "tokenizer")  # the cache is the run's
    ema = payload.get("train_model") is not None
    del payload
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)
    validator = build_validator(cfg, model, data, rt, None)
    candidates = [("EMA, newest", [newest], "evaluated")] if ema else []
    candidates.append(("trained, newest", [newest], "trained"))
    for k in lasts:
        if not 1 < k <= len(paths):
            print(f"--last {k}: skipped, the run has {len(paths)} periodic checkpoints")
            continue
        candidates.append((f"trained, mean of last {k}", paths[-k:], "trained"))
        if ema:
            candidates.append((f"EMA, mean of last {k}", paths[-k:], "evaluated"))
    rows = []
    print(f"{run}: {', '.join(p.name for p in paths)}; {rt.precision}, one thread")
    print("| weights | checkpoints | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for name, chosen, weights in candidates:
        payload = average_checkpoints(chosen, weights)
        model.load_state_dict(payload["model"])
        row = validator.validate(payload["progress"].get("step", 0), 0.0)
        rows.append({"weights": name, "checkpoints": [p.name for p in chosen],
                     **{key: row.get(key) for key in COLUMNS}})
        figures = " | ".join(f"{row.get(key):.3f}" if row.get(key) is not None else "-"
                             for key in COLUMNS)
        print(f"| {name} | {', '.join(p.stem for p in chosen)} | {figures} |", flush=True)
    if out is not None:
        out.write_text(json.dumps({"run": str(run), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished run folder")
    parser.add_argument("--last", type=int, nargs="+", default=[2, 3, 5],
                        help="how many of the newest periodic checkpoints to average")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()
    main(args.run, args.last, args.json)
