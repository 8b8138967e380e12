"""scripts/generalisation_gap.py: a run's loss on training pairs against validation pairs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.training.loop import train
from tests.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_gap_scores_the_best_checkpoint_as_validation_did(tmp_path: Path) -> None:
    train(tiny_config(tmp_path, "trainer.max_steps=10", "trainer.eval_every=5",
                      "trainer.final_test=false", "trainer.eval_max_sentences=7"))
    run = tmp_path / "run"
    out = tmp_path / "gap.json"
    done = subprocess.run([sys.executable, "scripts/generalisation_gap.py", str(run),
                           "--train-pairs", "9", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    (result,) = json.loads(out.read_text())
    history = {h["step"]: h for h in json.loads((run / "metrics.json").read_text())["history"]}
    assert result["step"] in history  # the best checkpoint is one training validated
    # the validation pairs and loss are the ones training scored at that step
    assert result["validation_pairs"] == 7
    assert result["valid_loss"] == pytest.approx(history[result["step"]]["valid_loss"], rel=1e-4)
    assert result["train_pairs"] == 9
    assert 0 < result["train_loss"] < 20
    assert result["gap"] == pytest.approx(result["valid_loss"] - result["train_loss"])
    assert f"{result['valid_loss']:.3f} (7)" in done.stdout
