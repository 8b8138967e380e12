"""Data-parallel training with 2 CPU processes (torchrun, gloo) against one process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.checkpoint import load_checkpoint
from seq2seq.training.loop import train
from tests.tiny import tiny_config

pytestmark = pytest.mark.slow  # starts torchrun process groups: the second tier

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).parent / "torchrun"
COMMON = ["trainer.max_steps=4", "trainer.log_every=1", "trainer.eval_every=1000",
          "trainer.final_test=false", "trainer.save_every=2"]


def torchrun(cfg: DictConfig, mode: str, tmp_path: Path) -> dict[int, dict]:
    """Run tests/ddp_worker.py in 2 processes; its RESULT line of each rank."""
    if shutil.which(str(TORCHRUN)) is None:
        pytest.skip("torchrun is not installed beside this Python")
    cfg_file = tmp_path / f"{mode}.yaml"
    cfg_file.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    out = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(ROOT / "tests/ddp_worker.py"),
         str(cfg_file), mode],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [json.loads(line[len("RESULT "):]) for line in out.stdout.splitlines()
            if line.startswith("RESULT ")]
    results = {row["rank"]: row for row in rows}
    assert sorted(results) == [0, 1]
    return results


def grad_norms(run: Path) -> list[float]:
    events = EventAccumulator(str(run / "tensorboard")).Reload()
    return [event.value for event in events.Scalars("train/grad_norm")]


def test_two_processes_match_one_process_on_the_same_global_batch(tmp_path: Path) -> None:
    """Without dropout, 2 processes compute exactly the gradient of one process that sees both
    ranks' batches as micro-batches of each update: same gradient norms (before Adam, which
    would hide a wrong global normalisation), losses and weights."""
    cfg = tiny_config(tmp_path / "ddp", *COMMON, "model.dropout=0.0",
                      data_root=tmp_path / "data")
    results = torchrun(cfg, "train", tmp_path)
    assert set(results[0]["first_batch"]).isdisjoint(results[1]["first_batch"])
    assert results[0]["params"] == pytest.approx(results[1]["params"], abs=0)  # identical
    run = tmp_path / "ddp" / "run"
    assert len(list((run / "tensorboard").glob("events.*"))) == 1  # only rank 0 writes
    assert (run / "checkpoints" / "last.pt").is_file()

    # One process, the two ranks' batches as two micro-batches of each update.
    single = tiny_config(tmp_path / "one", *COMMON, "model.dropout=0.0", "trainer.accum_steps=2",
                         data_root=tmp_path / "data")
    train(single)
    one_run = tmp_path / "one/run"
    assert grad_norms(run) == pytest.approx(grad_norms(one_run), rel=1e-5)
    assert len(grad_norms(run)) == 4
    ddp_losses = results[0]["losses"]
    one_losses = load_checkpoint(one_run / "checkpoints/last.pt")["progress"]["losses"]
    assert [s for s, _ in ddp_losses] == [s for s, _ in one_losses] == [1, 2, 3, 4]
    assert [v for _, v in ddp_losses] == pytest.approx([v for _, v in one_losses], abs=1e-4)
    one = load_checkpoint(one_run / "checkpoints/last.pt")["model"]
    two = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
    for name in one:
        torch.testing.assert_close(one[name], two[name], rtol=0, atol=1e-5, msg=name)


def test_a_time_budget_and_its_linear_rate_follow_rank_0s_clock(tmp_path: Path) -> None:
    """Under a time budget both processes stop at the same update and every update's rate,
    (1 - the share of the time spent) under the linear schedule, is the same on both: rank
    0's clock decides, so the replicas' weights stay identical."""
    cfg = tiny_config(tmp_path / "ddp", "trainer.max_steps=null", "trainer.max_time=3",
                      "trainer.schedule=linear", "trainer.warmup_steps=0", "trainer.lr=1e-2",
                      "trainer.log_every=1", "trainer.eval_every=100000",
                      "trainer.final_test=false", "trainer.save_every=100000",
                      data_root=tmp_path / "data")
    results = torchrun(cfg, "train", tmp_path)
    assert results[0]["steps"] == results[1]["steps"] > 2
    assert results[0]["params"] == pytest.approx(results[1]["params"], abs=0)
    rates = [event.value for event in
             EventAccumulator(str(tmp_path / "ddp/run/tensorboard")).Reload().Scalars("train/lr")]
    assert len(rates) == results[0]["steps"] and rates[-1] < rates[0] / 2


def test_each_rank_draws_its_own_dropout_and_resumes_its_own_random_state(
    tmp_path: Path,
) -> None:
    cfg = tiny_config(tmp_path, *COMMON, "model.dropout=0.1", "trainer.ema_decay=null",
                      data_root=tmp_path / "data")
    trained = torchrun(cfg, "train", tmp_path)
    assert trained[0]["params"] == pytest.approx(trained[1]["params"], abs=0)  # same weights
    assert trained[0]["dropout_output"] != trained[1]["dropout_output"]  # other masks
    saved = load_checkpoint(tmp_path / "run/checkpoints/last.pt")["rng"]
    assert len(saved) == 2 and not torch.equal(saved[0]["torch"], saved[1]["torch"])

    resumed = torchrun(OmegaConf.merge(cfg, {"trainer": {"resume": True}}), "resume", tmp_path)
    for rank in (0, 1):
        assert resumed[rank]["rng"] == trained[rank]["rng"], rank
