"""Recipes compared at equal training tokens: each candidate trains side by side (one thread
each) for the same number of training tokens (updates x batch_tokens), validating at the same
token counts; then the validation loss and BLEU of every candidate at each count, in a table and
a plot. Decisions are read on validation; nothing is tested.

    python scripts/measurements/recipe_curves.py OUT_DIR RECIPE TOKENS EVALS \
        [NAME=OVERRIDES...] [--jobs 2] [--reuse SUMMARY.json:NAME...]
    e.g. python scripts/measurements/recipe_curves.py results/debian_en_ko_recipe \
        debian_en_ko_transformer 1638400 4 today= b4096="trainer.batch_tokens=4096 \
        trainer.warmup_steps=100"

RECIPE: an experiment (`experiment=RECIPE`); TOKENS: each candidate's training tokens; EVALS:
validations along the way (the same token counts for every candidate). NAME=OVERRIDES: a
candidate, its overrides space-separated (none: the recipe as it is). `--reuse` takes a candidate
measured in an earlier round (its summary.json) into this round's table, where it was trained at
the same code, tokens and validations (the budget is tokens, so its figures do not depend on
what ran beside it); with no NAME=OVERRIDES it only rewrites the table of OUT_DIR/summary.json
with the reused rows. Writes OUT_DIR/summary.md, summary.json and curves.png; the runs go to
OUT_DIR/runs (not committed).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from seq2seq.config import register_configs
from seq2seq.visualization import figure_to_png

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def batch_tokens(recipe: str, overrides: list[str]) -> int:
    """The candidate's tokens an update, from its composed config."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={recipe}", *overrides,
                                           "run_dir=/tmp/unused"])
    return int(cfg.trainer.batch_tokens) * int(cfg.trainer.accum_steps)


def train(out: Path, recipe: str, name: str, overrides: list[str], tokens: int,
          evals: int, per_update: int) -> dict[str, Any]:
    steps = tokens // per_update
    every = max(steps // evals, 1)
    run = out / "runs" / name
    command = [sys.executable, "-m", "seq2seq.train", f"experiment={recipe}", *overrides,
               "trainer.threads=1", "trainer.max_time=null", f"trainer.max_steps={steps}",
               f"trainer.eval_every={every}", f"trainer.save_every={every}",
               "trainer.final_test=false", "trainer.progress=false", f"hydra.run.dir={run}"]
    run.mkdir(parents=True, exist_ok=True)
    with open(run.parent / f"{name}.log", "w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
    metrics = json.loads((run / "metrics.json").read_text())
    return {"name": name, "overrides": overrides, "tokens_per_update": per_update,
            "guided": metrics.get("alignment_kl") is not None,  # its KL curve, when guided
            "updates": steps, "history": [
                {"tokens": row["step"] * per_update, "step": row["step"],
                 "valid_loss": row["valid_loss"], "valid_bleu": row["valid_bleu"],
                 "valid_aer": row.get("valid_aer"), "seconds": row.get("time")}
                for row in metrics["history"]]}


def reused(spec: str, tokens: int, evals: int) -> dict[str, Any]:
    """The candidate NAME of an earlier round's summary (`PATH:NAME`), checked to have been
    measured at this round's tokens and validations."""
    path, _, name = spec.rpartition(":")
    runs = {run["name"]: run for run in json.loads(Path(path).read_text())}
    if name not in runs:
        sys.exit(f"--reuse {spec}: {path} has no candidate {name} (it has {', '.join(runs)})")
    run = runs[name]
    if run["tokens_per_update"] * run["updates"] != tokens or len(run["history"]) != evals:
        sys.exit(f"--reuse {spec}: measured at {run['tokens_per_update'] * run['updates']:,} "
                 f"tokens and {len(run['history'])} validations, not {tokens:,} and {evals}")
    return {**run, "from": path}


def summary(found: list[dict[str, Any]], recipe: str, tokens: int) -> list[str]:
    aer = any(run.get("guided") for run in found)  # guidance is decided with agreement beside
    lines = [f"# {recipe}: candidates at equal training tokens ({tokens:,} each)", "",
             "Validation loss (nats a target piece) / greedy BLEU"
             + (" / AER against eflomal's links (a guided candidate's: its agreement with "
                "its teacher)" if aer else "")
             + " at each count of training tokens; one thread a candidate, side by side.", "",
             "| candidate | overrides | tokens/update | " + " | ".join(
                 f"{row['tokens']:,}" for row in found[0]["history"]) + " |",
             "|" + "---|" * (3 + len(found[0]["history"]))]
    for run in found:
        cells = [f"{row['valid_loss']:.3f} / {row['valid_bleu']:.2f}"
                 + (f" / {row['valid_aer']:.3f}" if aer and row.get("valid_aer") is not None
                    else "") for row in run["history"]]
        name = run["name"] + (f" (from {run['from']})" if "from" in run else "")
        lines.append(f"| {name} | `{' '.join(run['overrides']) or '(the recipe)'}` | "
                     f"{run['tokens_per_update']:,} | " + " | ".join(cells) + " |")
    return lines


def plot(found: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (loss, bleu) = plt.subplots(1, 2, figsize=(10, 4))
    for run in found:
        x = [row["tokens"] / 1e6 for row in run["history"]]
        loss.plot(x, [row["valid_loss"] for row in run["history"]], marker="o", label=run["name"])
        bleu.plot(x, [row["valid_bleu"] for row in run["history"]], marker="o", label=run["name"])
    for axis, what in ((loss, "validation loss"), (bleu, "validation BLEU (greedy)")):
        axis.set_xlabel("training tokens (millions)")
        axis.set_ylabel(what)
        axis.grid(alpha=0.3)
    loss.legend()
    figure_to_png(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("recipe")
    parser.add_argument("tokens", type=int)
    parser.add_argument("evals", type=int)
    parser.add_argument("candidates", nargs="*", help="NAME=OVERRIDES")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--reuse", nargs="*", default=[], metavar="SUMMARY.json:NAME")
    args = parser.parse_args()
    earlier = [reused(spec, args.tokens, args.evals) for spec in args.reuse]
    candidates = [(c.split("=", 1)[0], shlex.split(c.split("=", 1)[1] if "=" in c else ""))
                  for c in args.candidates]
    args.out.mkdir(parents=True, exist_ok=True)
    if candidates:
        sizes = [batch_tokens(args.recipe, overrides) for _, overrides in candidates]  # Hydra
        with ThreadPoolExecutor(args.jobs) as pool:
            found = list(pool.map(lambda c: train(args.out, args.recipe, c[0][0], c[0][1],
                                                  args.tokens, args.evals, c[1]),
                                  zip(candidates, sizes, strict=True)))
    else:  # the table again, from this round's summary
        found = [run for run in json.loads((args.out / "summary.json").read_text())
                 if "from" not in run]
    found = earlier + found
    (args.out / "summary.json").write_text(json.dumps(found, indent=1))
    lines = summary(found, args.recipe, args.tokens)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    plot(found, args.out / "curves.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
