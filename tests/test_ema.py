"""The weight average against its definition, and what a training run does with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from seq2seq.checkpoint import load_checkpoint
from seq2seq.evaluate import evaluate
from seq2seq.training.ema import EMA
from seq2seq.training.loop import train
from tests.tiny import tiny_config


def test_ema_follows_the_definition_with_warmup() -> None:
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    ema = EMA(model, decay=0.5)
    assert ema.decay_at(1) == pytest.approx(2 / 11)  # warm-up: min(0.5, (1 + n) / (10 + n))
    assert ema.decay_at(100) == 0.5
    expected = torch.zeros(1, 2)
    for update, value in enumerate([1.0, 2.0, 3.0], start=1):
        with torch.no_grad():
            model.weight.fill_(value)
        ema.update(update)
        d = ema.decay_at(update)
        expected = d * expected + (1 - d) * value
        torch.testing.assert_close(ema.model.weight, expected)
    assert not ema.model.weight.requires_grad and not ema.model.training
    with pytest.raises(ValueError, match="between 0 and 1"):
        EMA(model, decay=1.0)


def test_a_run_with_ema_evaluates_and_saves_the_average(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "trainer.ema_decay=0.9")
    metrics = train(cfg)
    ckpt = load_checkpoint(tmp_path / "run/checkpoints/last.pt")
    averaged, trained = ckpt["model"], ckpt["train_model"]
    assert averaged.keys() == trained.keys()
    assert any(not torch.equal(averaged[k], trained[k]) for k in averaged)
    # the final test decoded best.pt's "model" (the average); evaluate loads the same weights
    best = tmp_path / "run/checkpoints/best.pt"
    assert metrics["test"]["checkpoint"] == str(best)
    again = evaluate(best, split="test", beam_size=metrics["test"]["beam_size"], device="cpu",
                     output=tmp_path / "again.hyp")
    assert again["bleu"] == metrics["test"]["bleu"]
    assert (tmp_path / "again.hyp").read_text() == (tmp_path / "run/test.hyp").read_text()
