"""Data-parallel training with 2 CPU processes (torchrun, gloo) against one process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from seq2seq.training.checkpoint import load_checkpoint
from seq2seq.training.loop import train
from tests.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["trainer.max_steps=4", "trainer.log_every=1", "trainer.eval_every=1000",
          "trainer.final_test=false", "model.dropout=0.0", "trainer.save_every=2"]


def test_two_processes_match_one_process_on_the_same_global_batch(tmp_path: Path) -> None:
    if shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("torchrun is not installed beside this Python")
    cfg = tiny_config(tmp_path / "ddp", *COMMON, data_root=tmp_path / "data")
    cfg_file = tmp_path / "ddp.yaml"
    cfg_file.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    torchrun = str(Path(sys.executable).parent / "torchrun")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node=2", str(ROOT / "tests/ddp_worker.py"),
         str(cfg_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            row = json.loads(line[len("RESULT "):])
            results[row["rank"]] = row
    assert sorted(results) == [0, 1]
    assert set(results[0]["first_batch"]).isdisjoint(results[1]["first_batch"])
    assert results[0]["params"] == pytest.approx(results[1]["params"], abs=0)  # identical
    run = tmp_path / "ddp" / "run"
    assert len(list((run / "tensorboard").glob("events.*"))) == 1  # only rank 0 writes
    assert (run / "checkpoints" / "last.pt").is_file()

    # One process, the two ranks' batches as two micro-batches of each update.
    single = tiny_config(tmp_path / "one", *COMMON, "trainer.accum_steps=2",
                         data_root=tmp_path / "data")
    train(single)
    ddp_losses = results[0]["losses"]
    one_losses = load_checkpoint(tmp_path / "one/run/checkpoints/last.pt")["progress"]["losses"]
    assert [s for s, _ in ddp_losses] == [s for s, _ in one_losses] == [1, 2, 3, 4]
    assert [v for _, v in ddp_losses] == pytest.approx([v for _, v in one_losses], abs=1e-4)
    one = load_checkpoint(tmp_path / "one/run/checkpoints/last.pt")["model"]
    two = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
    for name in one:
        torch.testing.assert_close(one[name], two[name], rtol=0, atol=1e-5, msg=name)
