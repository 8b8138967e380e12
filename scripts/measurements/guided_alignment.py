"""Guided alignment's effect, both ways: each model trained with and without it (or at several
weights), side by side on the same corpus, recipe and budget (one thread each), then validation
and test BLEU and AER against eflomal's links.

    python scripts/measurements/guided_alignment.py OUT_DIR RECIPE WEIGHTS MODEL:SECONDS... \
        [-- OVERRIDES...]
    e.g. python scripts/measurements/guided_alignment.py results/guided_docs_de_en docs_de_en \
        0,0.1 transformer:1800 bahdanau:1200

WEIGHTS: trainer.alignment_weight values, comma-separated (0: without). Each MODEL trains once per
weight, two at a time (`experiment=RECIPE_MODEL`, trainer.max_time=SECONDS, trainer.threads=1);
the models follow one another.
Writes OUT_DIR/summary.{json,md} (the runs under OUT_DIR/runs, not committed). Decisions are
read on the validation columns; the test columns are reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from seq2seq.compare import train_in_a_process, variant_overrides

COLUMNS = ("model", "weight", "steps", "valid_bleu", "valid_aer", "valid_aer_shift_att",
           "test_bleu", "test_chrf", "test_aer", "test_aer_shift_att", "test_aer_diagonal",
           "alignment_kl")


def at_best(history: list[dict[str, Any]], key: str) -> float | None:
    """`key` at the validation that scored the best BLEU (the checkpoint tested)."""
    scored = [row for row in history if row.get("valid_bleu") is not None]
    return max(scored, key=lambda row: row["valid_bleu"]).get(key) if scored else None


def row_of(model: str, weight: float, metrics: dict[str, Any]) -> dict[str, Any]:
    test = metrics["test"]
    alignment = test.get("alignment") or {}
    curve = metrics.get("alignment_kl") or []
    return {
        "model": model, "weight": weight, "steps": metrics["steps"],
        "valid_bleu": metrics["best_valid_bleu"],
        "valid_aer": at_best(metrics["history"], "valid_aer"),
        "valid_aer_shift_att": at_best(metrics["history"], "valid_aer_shift_att"),
        "test_bleu": test["bleu"], "test_chrf": test["chrf"], "test_aer": alignment.get("aer"),
        "test_aer_shift_att": (alignment.get("shift_att") or {}).get("aer"),
        "test_aer_diagonal": alignment.get("baselines", {}).get("diagonal", {}).get("aer"),
        "alignment_kl": curve[-1][1] if curve else None,  # per target token, last interval
    }


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if value >= 1 else f"{value:.3f}"
    return "–" if value is None else str(value)


def main(argv: list[str]) -> None:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    out, recipe, plans = Path(argv[0]), argv[1], argv[3:]
    weights = [float(w) for w in argv[2].split(",")]
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    started = f"{datetime.now():%Y-%m-%d %H:%M}"
    rows = []
    for plan in plans:
        model, seconds = plan.split(":")

        def run(weight: float, model: str = model, seconds: str = seconds) -> dict[str, Any]:
            run_dir = (out / "runs" / f"{model}_w{weight:g}").resolve()
            overrides = ["trainer.threads=1", *extra, f"trainer.alignment_weight={weight}"]
            metrics = train_in_a_process(
                model, variant_overrides(model, float(seconds), overrides, run_dir, recipe),
                run_dir)
            return row_of(model, weight, metrics)

        with ThreadPoolExecutor(max_workers=2) as pool:
            rows += list(pool.map(run, weights))
        (out / "summary.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    command = " ".join(["python", "scripts/measurements/guided_alignment.py", *sys.argv[1:]])
    lines = [f"# Guided alignment (weights {argv[2]}) on {recipe}", "",
             f"{started}, commit {commit}, `{command}`; each model's runs two at a time, one "
             "thread each. AER against eflomal's links (the possible and sure links of every "
             "run's metric), teacher-forced on the references; BLEU and chrF beam 5. "
             "valid_*: at the best validation BLEU (the checkpoint tested).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(row[c]) for c in COLUMNS) + " |" for row in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
