"""Periodic checkpoints (trainer.keep_last) and their average (seq2seq.average), read by
evaluate and translate."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2seq.average import average_checkpoints, average_run
from seq2seq.checkpoint import load_checkpoint, save_checkpoint
from seq2seq.errors import UserError
from seq2seq.evaluate import evaluate
from seq2seq.inference import load_for_inference
from seq2seq.training.loop import train
from seq2seq.translate import translate
from tests.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run with a weight average, 50 updates, a checkpoint every 10, the last 3 kept."""
    tmp = tmp_path_factory.mktemp("average")
    train(tiny_config(tmp, "trainer.max_steps=50", "trainer.save_every=10",
                      "trainer.keep_last=3", "trainer.eval_every=25", "trainer.final_test=false",
                      "trainer.ema_decay=0.9"))
    return tmp / "run"


def test_only_the_last_periodic_checkpoints_remain(run: Path, tmp_path: Path) -> None:
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["best.pt", "last.pt", "step-30.pt", "step-40.pt", "step-50.pt"]
    for step in (30, 40, 50):
        assert load_checkpoint(run / f"checkpoints/step-{step}.pt")["progress"]["step"] == step
    last, newest = (load_checkpoint(run / f"checkpoints/{n}.pt") for n in ("last", "step-50"))
    for name, tensor in last["model"].items():
        assert torch.equal(tensor, newest["model"][name]), name
    train(tiny_config(tmp_path, "trainer.keep_last=0", "trainer.final_test=false",
                      data_root=run.parent / "data"))
    assert sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir()) == [
        "best.pt", "last.pt"]


@pytest.mark.parametrize(("weights", "key"), [("evaluated", "model"), ("trained", "train_model")])
def test_the_average_of_two_checkpoints_is_the_mean_of_their_weights(
    run: Path, tmp_path: Path, weights: str, key: str
) -> None:
    out = average_run(run, last=2, weights=weights, output=tmp_path / "avg.pt")
    averaged = load_checkpoint(out)
    a, b = (load_checkpoint(run / f"checkpoints/step-{s}.pt")[key] for s in (40, 50))
    assert averaged["model"].keys() == a.keys()
    differ = 0
    for name, tensor in averaged["model"].items():
        torch.testing.assert_close(tensor, (a[name] + b[name]) / 2, rtol=0, atol=1e-7, msg=name)
        differ += not torch.equal(a[name], b[name])
    assert differ > 0  # the two checkpoints are not the same weights
    assert averaged["averaged"] == {"checkpoints": ["step-40.pt", "step-50.pt"],
                                    "steps": [40, 50], "weights": weights}
    assert averaged["progress"]["step"] == 50 and "optimizer" not in averaged


def test_evaluate_and_translate_read_the_averaged_checkpoint(run: Path) -> None:
    cli = subprocess.run([sys.executable, "-m", "seq2seq.average", f"run={run}", "last=3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    path = run / "checkpoints/average-last3.pt"
    assert f"into {path}" in cli.stdout
    steps = [load_checkpoint(run / f"checkpoints/step-{s}.pt")["model"] for s in (30, 40, 50)]
    loaded = load_for_inference(path, "cpu")
    for name, tensor in loaded.model.state_dict().items():
        torch.testing.assert_close(tensor, sum(s[name] for s in steps) / 3, rtol=0, atol=1e-6)
    assert loaded.step == 50
    metrics = evaluate(path, split="validation", beam_size=1, device="cpu")
    assert metrics["split"] == "validation" and 0 <= metrics["bleu"] <= 100
    assert Path(metrics["hypotheses"]).is_file()
    stdout = io.BytesIO()
    lines = translate(path, beam_size=1, device="cpu", stdout=stdout,
                      stdin=io.BytesIO(b"Jane ging in den Laden.\nTom sah den Park.\n"))
    assert lines == 2 and len(stdout.getvalue().decode().splitlines()) == 2


def test_an_averaged_checkpoint_is_not_a_resume_point(run: Path, tmp_path: Path) -> None:
    path = average_run(run, last=2, output=tmp_path / "avg/checkpoints/avg.pt")
    cfg = tiny_config(tmp_path, f"trainer.resume={path}", data_root=run.parent / "data")
    with pytest.raises(UserError, match="averaged checkpoint"):
        train(cfg)


@pytest.mark.parametrize(
    ("field", "change", "message"),
    [("config", lambda c: c["model"].update(hidden_size=64), "another model config than .* "
      r"\(differs in model.hidden_size\)"),
     ("tokenizer", lambda t: t.update(src_model_sha256="0" * 64),
      r"another tokenizer than .* \(differs in src_model_sha256\)")],
)
def test_a_checkpoint_of_another_model_or_tokenizer_is_refused_in_one_line(
    run: Path, tmp_path: Path, field: str, change, message: str
) -> None:
    folder = tmp_path / "checkpoints"
    shutil.copytree(run / "checkpoints", folder)
    payload = load_checkpoint(folder / "step-40.pt")
    change(payload[field])
    save_checkpoint(folder / "step-40.pt", payload)
    with pytest.raises(UserError, match=message) as err:
        average_checkpoints([folder / "step-40.pt", folder / "step-50.pt"])
    assert "\n" not in str(err.value) and "step-40.pt" in str(err.value)
    cli = subprocess.run([sys.executable, "-m", "seq2seq.average", f"run={tmp_path}", "last=3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1 and cli.stderr.startswith("error: ")


def test_too_few_periodic_checkpoints_are_refused(run: Path) -> None:
    with pytest.raises(UserError, match=r"3 periodic checkpoints .* fewer than last=4"):
        average_run(run, last=4)


@pytest.mark.slow  # 3 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_the_averaging_script_scores_what_training_validated(run: Path, tmp_path: Path) -> None:
    """scripts/measurements/average_against_ema.py: its first row, the newest checkpoint's EMA,
    repeats the run's own last validation; every candidate it names is scored."""
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "scripts/measurements/average_against_ema.py", str(run), "--last", "2",
         "3", "9", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, check=True)
    rows = json.loads(out.read_text())["rows"]
    assert [row["weights"] for row in rows] == [
        "EMA, newest", "trained, newest", "trained, mean of last 2", "EMA, mean of last 2",
        "trained, mean of last 3", "EMA, mean of last 3"]
    assert rows[2]["checkpoints"] == ["step-40.pt", "step-50.pt"]
    last = json.loads((run / "metrics.json").read_text())["history"][-1]
    assert last["step"] == 50
    for key in ("valid_loss", "valid_bleu", "valid_chrf"):
        assert rows[0][key] == pytest.approx(last[key]), key
    assert rows[1]["valid_loss"] != pytest.approx(rows[0]["valid_loss"])  # other weights
    assert rows[3]["valid_loss"] != pytest.approx(rows[2]["valid_loss"])  # EMA, not trained
    assert "| EMA, newest | step-50 |" in done.stdout
    assert "--last 9: skipped, the run has 3 periodic checkpoints" in done.stdout
