"""Behaviour fingerprint of the four variants, to check that a refactor changes nothing.

    python scripts/fingerprint.py OUT_DIR [--steps 200]     train each variant, write its record
    python scripts/fingerprint.py --compare DIR_A DIR_B     compare two records

Each variant trains `--steps` seeded updates on the default corpus (one thread, loss logged at
every update, no time budget), then decodes the test split with beam search. The record is
OUT_DIR/<variant>.json (the losses, validation rows and test BLEU) and OUT_DIR/<variant>.hyp.
Run it on the commit before a change and after it: the losses must agree to 1e-6 and the
hypotheses must be identical.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

VARIANTS = ("vanilla", "bahdanau", "luong", "transformer")


def record(out: Path, steps: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for variant in VARIANTS:
        run = out / f"run_{variant}"
        subprocess.run(
            [sys.executable, "-m", "seq2seq.train", f"model={variant}", "trainer.threads=1",
             "trainer.max_time=null", f"trainer.max_steps={steps}", "trainer.log_every=1",
             f"trainer.eval_every={steps // 2}", f"trainer.save_every={steps}",
             "trainer.progress=false", "trainer.device=cpu", f"run_dir={run}",
             f"hydra.run.dir={run}"],
            check=True,
        )
        metrics = json.loads((run / "metrics.json").read_text())
        keep = {k: metrics[k] for k in ("steps", "losses", "history")}
        keep["test_bleu"] = metrics["test"]["bleu"]
        (out / f"{variant}.json").write_text(json.dumps(keep, indent=1))
        (out / f"{variant}.hyp").write_bytes((run / "test.hyp").read_bytes())


def compare(a: Path, b: Path) -> bool:
    same = True
    for variant in VARIANTS:
        ra, rb = (json.loads((d / f"{variant}.json").read_text()) for d in (a, b))
        steps_a, steps_b = [s for s, _ in ra["losses"]], [s for s, _ in rb["losses"]]
        diff = max(abs(x - y) for (_, x), (_, y) in zip(ra["losses"], rb["losses"], strict=True))
        hyps = (a / f"{variant}.hyp").read_bytes() == (b / f"{variant}.hyp").read_bytes()
        ok = steps_a == steps_b and diff <= 1e-6 and hyps
        same &= ok
        print(f"{variant:12s} {len(steps_a)} losses, max |difference| {diff:.2e}, "
              f"test hypotheses {'identical' if hyps else 'DIFFER'}, "
              f"BLEU {ra['test_bleu']:.2f} / {rb['test_bleu']:.2f}  {'ok' if ok else 'CHANGED'}")
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"))
    args = parser.parse_args()
    if args.compare:
        sys.exit(0 if compare(*args.compare) else 1)
    if args.out is None:
        parser.error("give OUT_DIR or --compare DIR_A DIR_B")
    record(args.out, args.steps)


if __name__ == "__main__":
    main()
