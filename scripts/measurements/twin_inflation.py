"""How much held-out twins of training pairs lift a test score.

    python scripts/measurements/twin_inflation.py data/docs/<version>/corpus.json HYPOTHESES \
        [--direction de-en]

Reads a documentation corpus cache (`corpus.json`: train/validation/test rows of German,
English, document[, family]) and the test hypotheses of a model trained on it (one a line, in
test order), marks each test pair by the first twin rule it meets against train
(seq2seq.data.leakage: exact, normalised, near), and prints corpus BLEU on the pairs with a twin,
on the rest, and on the whole test split with and without the twins.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seq2seq.data.leakage import RULES, twin_rules
from seq2seq.evaluation.hypotheses import read_hypotheses
from seq2seq.evaluation.metrics import score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="a docs cache's corpus.json")
    parser.add_argument("hypotheses", type=Path, help="test hypotheses, one a line")
    parser.add_argument("--direction", choices=("de-en", "en-de"), default="de-en")
    args = parser.parse_args()
    rows = json.loads(args.corpus.read_text(encoding="utf-8"))
    train = [(row[0], row[1]) for row in rows["train"]]
    test = [(row[0], row[1]) for row in rows["test"]]
    hyps = read_hypotheses(args.hypotheses)
    if len(hyps) != len(test):
        raise SystemExit(f"{len(hyps)} hypotheses for {len(test)} test pairs")
    refs = [en if args.direction == "de-en" else de for de, en in test]
    rules = twin_rules(train, test)
    twins = [i for i, rule in enumerate(rules) if rule is not None]
    rest = [i for i, rule in enumerate(rules) if rule is None]
    print(f"test pairs: {len(test):,}; with a twin in train: "
          + ", ".join(f"{rule} {rules.count(rule):,}" for rule in RULES)
          + f" ({len(twins) / len(test):.1%})")
    for name, idx in (("whole test", range(len(test))), ("pairs with a twin", twins),
                      ("pairs without (the test split with the twins removed)", rest)):
        if idx:
            s = score([hyps[i] for i in idx], [refs[i] for i in idx])
            print(f"  {name}: {len(idx):,} pairs, BLEU {s.bleu:.2f}, chrF {s.chrf:.1f}")


if __name__ == "__main__":
    main()
