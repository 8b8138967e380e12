"""Fine-tuning (trainer.init_from): a new run on new data from a checkpoint's weights and
tokenizer, with a fresh optimizer, schedule, step count and best score; one-line refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.checkpoint import load_checkpoint
from seq2seq.errors import UserError
from seq2seq.inference import load_for_inference
from seq2seq.training.loop import train
from seq2seq.training.optim import learning_rate
from tests.tiny import LEARNT_TRANSFORMER, pairs, tiny_config

# run B and the run from scratch it is measured against: 20 updates, warmup over 10
SHORT = ["trainer.max_steps=20", "trainer.eval_every=10", "trainer.lr=1e-2",
         "trainer.warmup_steps=10", "trainer.log_every=1", "model.dropout=0.2"]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Transformer trained on the tiny corpus (src→tgt): its run folder."""
    root = tmp_path_factory.mktemp("a")
    train(tiny_config(root, *LEARNT_TRANSFORMER, "trainer.final_test=false",
                      model="transformer", data_root=root / "data"))
    return root / "run"


def other_corpus(directory: Path) -> list[str]:
    """Overrides pointing data=files at another draw of the tiny corpus (other seeds), where
    Tom is Jürgen: a name, and a letter (ü), that run A's corpus never had."""
    directory.mkdir(parents=True, exist_ok=True)
    overrides = []
    for split, n, seed in (("train", 300, 10), ("validation", 20, 11), ("test", 20, 12)):
        rows = [(s.replace("Tom", "Jürgen"), t.replace("Tom", "Jürgen")) for s, t in pairs(n, seed)]
        for side, col in (("src", 0), ("tgt", 1)):
            path = directory / f"{split}.{side}"
            path.write_text("".join(row[col] + "\n" for row in rows), encoding="utf-8")
            overrides.append(f"data.{side}_files.{split}={path}")
    return overrides


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_finetuning_starts_from_the_weights_with_a_fresh_run(
    run_a: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B (init_from A's best.pt, on another corpus of the same languages) starts where A's
    weights are, with A's tokenizer, at step 0, warming up afresh, writing its own best.pt."""
    new_data = other_corpus(tmp_path / "corpus")
    best_a = run_a / "checkpoints/best.pt"
    b = train(tiny_config(tmp_path / "b", *SHORT, *new_data, f"trainer.init_from={best_a}",
                          "tokenizer.vocab_size=300", model="transformer",
                          data_root=tmp_path / "data"))
    out = capsys.readouterr().out
    scratch = train(tiny_config(tmp_path / "scratch", *SHORT, *new_data, model="transformer",
                                data_root=tmp_path / "data"))
    run_b = tmp_path / "b/run"

    # A's weights: B's first validation loss is far below a run from scratch at the same step
    first_b, first_scratch = b["history"][0], scratch["history"][0]
    assert first_b["step"] == first_scratch["step"] == 10
    assert first_b["valid_loss"] < 0.5 * first_scratch["valid_loss"], (first_b, first_scratch)
    # A's tokenizer, byte for byte, and the settings that trained it in B's config
    assert files(run_b / "tokenizer") == files(run_a / "tokenizer")
    saved = load_checkpoint(run_b / "checkpoints/best.pt")
    assert saved["tokenizer"] == load_checkpoint(best_a)["tokenizer"]
    assert saved["config"]["tokenizer"]["vocab_size"] == 400
    assert "tokenizer.vocab_size=300 -> 400" in out
    coverage = re.search(r"tokenizer of \S+best\.pt on the training split: unknown pieces "
                         r"0\.00% source, 0\.00% target; byte-fallback pieces ([\d.]+)% source, "
                         r"([\d.]+)% target", out)
    assert coverage is not None, out
    assert float(coverage[1]) > 0 and float(coverage[2]) > 0  # ü, spelt in bytes
    # step 0, the schedule afresh: update 1 runs at the first warmup rate, not at A's step 151
    assert b["steps"] == 20 and [row["step"] for row in b["history"]] == [10, 20]
    rates = EventAccumulator(str(run_b / "tensorboard")).Reload().Scalars("train/lr")
    assert rates[0].step == 1
    assert rates[0].value == pytest.approx(learning_rate(1, "inverse_sqrt", 1e-2, 10))
    # the best score afresh: B's first validation writes B's best.pt
    assert re.search(r"^step 10 \(.*\(best\)$", out, re.MULTILINE), out
    assert saved["progress"]["step"] in (10, 20)
    assert saved["progress"]["best_bleu"] == b["best_valid_bleu"] == max(
        row["valid_bleu"] for row in b["history"])
    # B's checkpoint is self-contained for evaluate and translate
    loaded = load_for_inference(run_b / "checkpoints/best.pt", "cpu")
    assert loaded.config.model.dropout == 0.2 and loaded.step == saved["progress"]["step"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["data.src_lang=de", "data.tgt_lang=en"],
     r"a checkpoint of src→tgt, data=files is de→en"),
    (["model.ff_dim=128"],
     r"model\.ff_dim=128 here, 64 in the checkpoint; \S+ is \[128, 32\] here, \[64, 32\] in "
     r"the checkpoint\)"),
    (["model.pre_norm=false"],
     r"model\.pre_norm=False here, True in the checkpoint; decoder_norm\.bias is only in the "),
    (["model.num_heads=4"], r"model\.num_heads=4 here, 2 in the checkpoint\); fine-tuning keeps"
     r" its model: only model\.dropout, model\.attn_dropout, model\.init, model\.max_len may"),
    (["trainer.resume=true"], r"resume continues a run, init_from starts a new one"),
    ([], r"nope\.pt: checkpoint file not found"),
])
def test_finetuning_refusals_are_one_line(
    run_a: Path, tmp_path: Path, overrides: list[str], message: str
) -> None:
    ckpt = run_a / "checkpoints" / ("best.pt" if overrides else "nope.pt")
    cfg = tiny_config(tmp_path, *overrides, f"trainer.init_from={ckpt}", model="transformer",
                      data_root=tmp_path / "data")
    with pytest.raises(UserError, match=message) as err:
        train(cfg)
    assert "\n" not in str(err.value)


def test_a_finetuning_run_resumes_with_the_tokenizer_it_started_with(
    run_a: Path, tmp_path: Path
) -> None:
    """Resuming a fine-tuning run (without init_from, as the SIGTERM line says) encodes with
    its run's tokenizer, the checkpoint's, not one trained on the new corpus."""
    new_data = other_corpus(tmp_path / "corpus")
    common = [*SHORT, *new_data, "trainer.final_test=false"]
    train(tiny_config(tmp_path, *common, "trainer.max_steps=10",
                      f"trainer.init_from={run_a / 'checkpoints/best.pt'}",
                      model="transformer", data_root=tmp_path / "data"))
    last = tmp_path / "run/checkpoints/last.pt"
    resumed = train(tiny_config(tmp_path, *common, f"trainer.resume={last}",
                                model="transformer", data_root=tmp_path / "data"))
    assert resumed["steps"] == 20 and [row["step"] for row in resumed["history"]] == [10, 20]
    assert files(tmp_path / "run/tokenizer") == files(run_a / "tokenizer")


def test_no_update_scores_what_the_checkpoint_scored(run_a: Path, tmp_path: Path) -> None:
    """init_from with no update, on A's own corpus: step 0's validation is A's best evaluation,
    to the last digit: the weights are the checkpoint's evaluated ones (A's weight average)."""
    a = json.loads((run_a / "metrics.json").read_text())
    zero = train(tiny_config(tmp_path, "trainer.max_steps=0", "trainer.final_test=false",
                             f"trainer.init_from={run_a / 'checkpoints/best.pt'}",
                             model="transformer", data_root=tmp_path / "data"))
    best_a = max(a["history"], key=lambda row: row["valid_bleu"])
    assert [row["step"] for row in zero["history"]] == [0]
    assert zero["history"][0]["valid_loss"] == pytest.approx(best_a["valid_loss"], abs=1e-6)
    assert zero["history"][0]["valid_bleu"] == best_a["valid_bleu"]
