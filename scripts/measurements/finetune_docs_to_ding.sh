#!/usr/bin/env bash
# Fine-tuning measured (docs/ablations.md): the Ding corpus trained on top of a documentation
# corpus checkpoint (trainer.init_from) against Ding from scratch, both with make train's recipe
# and budget (1,500 updates), side by side on one thread each; Ding from scratch once more with
# the fine-tuned model's size (a 16k vocabulary of its own: 6.46M parameters, as the docs
# checkpoint's, against the recipe's 3.39M); then what the fine-tuning cost the documentation
# corpus: both checkpoints scored on its validation pairs with no update.
#
# Usage: scripts/measurements/finetune_docs_to_ding.sh [OUT]   (default runs/finetune; about
# 40 minutes for the docs checkpoint alone on two cores, then 25 for the rest; a run that has
# finished is not run again). Prints the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PY:-.venv/bin/python}"
out="${1:-runs/finetune}"
docs_steps="${DOCS_STEPS:-1200}"
common=(trainer.threads=1 trainer.seed=1)
mkdir -p "$out"

docs="$out/docs_bahdanau/checkpoints/best.pt"
finished() {  # NAME: the run in $out/NAME ended at its step budget (not by a signal or time)
    "$py" -c 'import json, sys; m = json.load(open(sys.argv[1])); sys.exit(m["stopped_by"] != "max_steps")' \
        "$out/$1/metrics.json" 2> /dev/null
}
run() {  # NAME OVERRIDE...: one training run into $out/NAME, skipped when it has finished
    local name="$1"
    shift
    finished "$name" || "$py" -m seq2seq.train "${common[@]}" "$@" \
        "hydra.run.dir=$out/$name" > "$out/$name.log" 2>&1
}
# the documentation recipe, cut to a step budget
run docs_bahdanau experiment=docs_de_en_bahdanau "trainer.max_steps=$docs_steps" \
    trainer.max_time=null
# make train's recipe twice, side by side: from scratch (Ding's own tokenizer) and from the docs
# checkpoint (its weights and its tokenizer; a fresh optimizer, schedule and step count)
run ding_scratch &
scratch=$!
run ding_from_docs "trainer.init_from=$docs" &
from_docs=$!
wait "$scratch"
wait "$from_docs"
run ding_scratch_16k tokenizer.vocab_size=16000
# forgetting: the documentation validation pairs (the recipe's 500 spread ones), no update
for name in docs_bahdanau ding_from_docs; do
    run "docs_valid_of_$name" experiment=docs_de_en_bahdanau trainer.max_steps=0 \
        trainer.final_test=false "trainer.init_from=$out/$name/checkpoints/best.pt"
done
"$py" - "$out" <<'PYTHON'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])


def metrics(name: str) -> dict:
    return json.loads((out / name / "metrics.json").read_text())


ding = {}
for name in ("ding_scratch", "ding_scratch_16k", "ding_from_docs"):
    m = metrics(name)
    best = max(m["history"], key=lambda row: row["valid_bleu"])
    ding[name] = {"steps": m["steps"], "parameters": m["parameters"],
                  "valid_bleu_by_step": {row["step"]: row["valid_bleu"] for row in m["history"]},
                  "best_valid_bleu": best["valid_bleu"], "best_valid_loss": best["valid_loss"],
                  "best_valid_aer": best.get("valid_aer"), "diagonal_aer": best.get("valid_aer_diagonal"),
                  "test_bleu": m["test"]["bleu"], "test_chrf": m["test"]["chrf"]}
docs = {name: metrics(f"docs_valid_of_{name}")["history"][0]
        for name in ("docs_bahdanau", "ding_from_docs")}
summary = {"ding": ding, "docs_validation": {name: {"bleu": row["valid_bleu"],
                                                    "loss": row["valid_loss"]}
                                             for name, row in docs.items()}}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print("| Ding run | parameters | validation BLEU by step | best | test BLEU / chrF "
      "| AER at best (diagonal) |")
print("|---|---|---|---|---|---|")
for name, row in ding.items():
    steps = ", ".join(f"{s}: {b:.2f}" for s, b in row["valid_bleu_by_step"].items())
    print(f"| {name} | {row['parameters'] / 1e6:.2f}M | {steps} | {row['best_valid_bleu']:.2f} | "
          f"{row['test_bleu']:.2f} / {row['test_chrf']:.1f} | {row['best_valid_aer'] or float('nan'):.2f} "
          f"({row['diagonal_aer'] or float('nan'):.2f}) |")
for name, row in summary["docs_validation"].items():
    print(f"docs validation of {name}: BLEU {row['bleu']:.2f}, loss {row['loss']:.3f}")
PYTHON
