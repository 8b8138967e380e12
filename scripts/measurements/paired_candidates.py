"""Candidates of a recipe round against one baseline on the same split, with intervals: each
checkpoint decoded greedily (as validation does), and each candidate's corpus BLEU minus the
baseline's with its 95% paired bootstrap interval (over the split's families where the corpus
stores them, else sentences: `metrics.bleu_difference`). For deciding on validation whether a
gap between candidates is more than the draw of the sentences; nothing is tested.

    python scripts/measurements/paired_candidates.py OUT.json [--split validation] \
        BASE=CKPT NAME=CKPT...
    e.g. python scripts/measurements/paired_candidates.py \
        results/guided_decisions_docs_de_en/paired.json \
        piece=results/guided_decisions_docs_de_en/runs/piece/checkpoints/best.pt \
        word=results/guided_decisions_docs_de_en/runs/word/checkpoints/best.pt

The first NAME=CKPT is the baseline. Every checkpoint must come from the same corpus and build
(the same references). Writes OUT.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from seq2seq.corpus import encode_split
from seq2seq.data import load_corpus
from seq2seq.decoding import decode_settings
from seq2seq.evaluation.decode_and_score import decode_and_score
from seq2seq.evaluation.metrics import bleu_difference, bleu_tokenize_for
from seq2seq.inference import load_for_inference, resolve_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("candidates", nargs="+", metavar="NAME=CKPT")
    parser.add_argument("--split", default="validation")
    args = parser.parse_args()
    named = [spec.partition("=") for spec in args.candidates]
    if len(named) < 2 or any(not name or not path for name, _, path in named):
        sys.exit("give a baseline and at least one candidate, each NAME=CKPT")
    device = resolve_device("auto")
    found, corpus_name, texts = {}, None, None
    for name, _, path in named:
        loaded = load_for_inference(path, device)
        data = loaded.config.data
        if corpus_name not in (None, data.name):
            sys.exit(f"{name}={path}: trained on {data.name}, the baseline on {corpus_name}")
        corpus_name = data.name
        corpus = load_corpus(data)[args.split]
        split = encode_split(loaded.tokenizer, corpus["src"], corpus["tgt"],
                             loaded.config.tokenizer.max_src_len,
                             loaded.config.tokenizer.max_tgt_len)
        tokenize = bleu_tokenize_for(data.tgt_lang, data.bleu_tokenize)
        result = decode_and_score(loaded.model, loaded.tokenizer, split,
                                  decode_settings(loaded.config.decoding, 1), device,
                                  bleu_tokenize=tokenize)
        documents = corpus["document"] if "document" in corpus.column_names else None
        if texts is not None and texts[0] != split.tgt_text:
            sys.exit(f"{name}={path}: its {args.split} references are not the baseline's "
                     "(another build of the corpus)")
        texts = (split.tgt_text, tokenize, documents)
        found[name] = {"ckpt": path, "bleu": result.scores.bleu, "hypotheses": result.hypotheses}
        print(f"{name}: greedy BLEU {result.scores.bleu:.2f} on {args.split} ({len(split)} "
              f"sentences)", flush=True)
    references, tokenize, documents = texts
    base = named[0][0]
    rows = []
    for name, row in found.items():
        gap = (None if name == base else
               bleu_difference(row["hypotheses"], found[base]["hypotheses"], references,
                               tokenize, documents))
        rows.append({"name": name, "ckpt": row["ckpt"], "bleu": row["bleu"], "minus_base": gap})
    unit = "families" if documents is not None else "sentences"
    report = {"corpus": corpus_name, "split": args.split, "sentences": len(references),
              "baseline": base, "bootstrap_unit": unit, "candidates": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    print(f"\n{corpus_name} {args.split}, greedy; minus {base} with its 95% paired bootstrap "
          f"interval over {unit}")
    for row in rows:
        gap = row["minus_base"]
        print(f"{row['name']:>14}  {row['bleu']:6.2f}  " + (
            "(baseline)" if gap is None else
            f"{gap['difference']:+.2f} [{gap['low']:+.2f}, {gap['high']:+.2f}]"))


if __name__ == "__main__":
    main()
