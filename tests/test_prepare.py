"""`python -m seq2seq.prepare` builds or reuses the corpus and tokenizer and prints statistics."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import corpus_overrides

ROOT = Path(__file__).resolve().parents[1]


def run_prepare(*overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seq2seq.prepare", *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # 6 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_prepare_prints_statistics_and_reuses_its_caches(tmp_path: Path) -> None:
    overrides = [*corpus_overrides(tmp_path / "data"), "hydra.run.dir=" + str(tmp_path / "h")]
    first = run_prepare(*overrides)
    assert first.returncode == 0, first.stderr
    assert "340 pairs: train 300, validation 20, test 20" in first.stdout
    assert "training sentencepiece" in first.stdout
    assert "mean pieces per training sentence" in first.stdout
    assert "padding" in first.stdout
    second = run_prepare(*overrides)
    assert second.returncode == 0, second.stderr
    assert "reusing tokenizer" in second.stdout


def test_prepare_names_a_missing_file(tmp_path: Path) -> None:
    overrides = corpus_overrides(tmp_path / "data")
    missing = tmp_path / "nope.de"
    overrides = [o if not o.startswith("data.src_files.train=") else
                 f"data.src_files.train={missing}" for o in overrides]
    out = run_prepare(*overrides, "hydra.run.dir=" + str(tmp_path / "h"))
    assert out.returncode == 2
    assert str(missing) in out.stderr and "Traceback" not in out.stderr
