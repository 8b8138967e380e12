"""scripts/measurements/recipe_curves.py: a round's table with candidates of an earlier round
(`--reuse`), checked to be measured at the same budget, and agreement beside a guided one;
scripts/measurements/paired_candidates.py: candidates against a baseline with intervals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.training.loop import train
from tests.tiny import QUICK_TRAINER, tiny_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "measurements" / "recipe_curves.py"


def candidate(name: str, losses: list[float], guided: bool = False,
              per_update: int = 2048) -> dict:
    return {"name": name, "overrides": [f"trainer.x={name}"], "tokens_per_update": per_update,
            "updates": 4 * 2048 // per_update, "guided": guided,
            "history": [{"tokens": (i + 1) * 2048, "step": i + 1, "valid_loss": loss,
                         "valid_bleu": 10.0 * (i + 1), "valid_aer": 0.5 - 0.1 * i,
                         "seconds": 1.0} for i, loss in enumerate(losses)]}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)


def test_a_reused_candidate_joins_the_table_and_a_mismatched_one_is_refused(
    tmp_path: Path
) -> None:
    earlier, this = tmp_path / "round1", tmp_path / "round2"
    earlier.mkdir()
    this.mkdir()
    (earlier / "summary.json").write_text(json.dumps([
        candidate("today", [5.0, 4.0, 3.5, 3.0]), candidate("short", [5.0, 4.0])]))
    (this / "summary.json").write_text(json.dumps([
        candidate("untied", [4.5, 3.5, 3.0, 2.5]), candidate("word", [4.6, 3.6, 3.1, 2.6],
                                                             guided=True)]))
    done = run(str(this), "some_recipe", "8192", "4", "--reuse",
               f"{earlier / 'summary.json'}:today")
    assert done.returncode == 0, done.stderr
    table = (this / "summary.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert [row.split(" | ")[0] for row in rows] == [
        f"| today (from {earlier / 'summary.json'})", "| untied", "| word"]
    assert "AER against eflomal's links" in table  # a guided candidate: agreement beside
    assert rows[0].endswith("| 3.000 / 40.00 / 0.200 |")
    assert (this / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # written again, the reused row is taken once, not twice
    again = run(str(this), "some_recipe", "8192", "4", "--reuse",
                f"{earlier / 'summary.json'}:today")
    assert again.returncode == 0, again.stderr
    assert (this / "summary.md").read_text() == table
    for spec, message in ((f"{earlier / 'summary.json'}:short",
                           "measured at 8,192 tokens and 2 validations, not 8,192 and 4"),
                          (f"{earlier / 'summary.json'}:nobody",
                           "has no candidate nobody (it has today, short)")):
        refused = run(str(this), "some_recipe", "8192", "4", "--reuse", spec)
        assert refused.returncode != 0
        assert refused.stderr.strip().splitlines() == [f"--reuse {spec}: " + (
            f"{earlier / 'summary.json'} " if "nobody" in spec else "") + message]


@pytest.mark.slow
def test_paired_candidates_give_each_gap_to_the_baseline_with_its_interval(tmp_path: Path
                                                                            ) -> None:
    """scripts/measurements/paired_candidates.py: a checkpoint against itself differs by
    exactly 0 with the interval [0, 0]; a candidate of other weights gets an interval that
    holds its gap; the JSON is valid; a candidate without a checkpoint is one line."""
    cfg = tiny_config(tmp_path / "a", *QUICK_TRAINER, model="transformer")
    train(cfg)
    ckpt = Path(cfg.run_dir) / "checkpoints/best.pt"
    other = tiny_config(tmp_path / "b", *QUICK_TRAINER, "trainer.max_steps=5",
                        model="transformer", data_root=Path(cfg.data.root))
    train(other)
    out = tmp_path / "paired.json"
    script = ROOT / "scripts" / "measurements" / "paired_candidates.py"
    result = subprocess.run([sys.executable, str(script), str(out), f"base={ckpt}",
                             f"same={ckpt}", f"short={Path(other.run_dir)}/checkpoints/best.pt",
                             "--split", "test"], cwd=ROOT, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    report = json.loads(out.read_text(), parse_constant=refuse)
    assert report["split"] == "test" and report["baseline"] == "base"
    rows = {row["name"]: row for row in report["candidates"]}
    assert rows["base"]["minus_base"] is None
    assert rows["same"]["minus_base"] == {"difference": 0.0, "low": 0.0, "high": 0.0}
    short = rows["short"]["minus_base"]
    assert short["low"] <= short["difference"] <= short["high"]
    assert abs(short["difference"] - (rows["short"]["bleu"] - rows["base"]["bleu"])) < 1e-6
    missing = subprocess.run([sys.executable, str(script), str(out), f"base={ckpt}", "bad"],
                             cwd=ROOT, capture_output=True, text=True, check=False)
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines()[-1].endswith("each NAME=CKPT")
