"""scripts/measurements/loss_per_sentence.py: a run's validation loss per sentence, for
vocabularies that differ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seq2seq.corpus import prepare_data
from seq2seq.data.batching import collate
from seq2seq.training.loop import train
from tests.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 3 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_the_loss_per_sentence_is_the_loss_over_the_pieces_validation_scored(
    tmp_path: Path,
) -> None:
    train(tiny_config(tmp_path, "trainer.max_steps=10", "trainer.eval_every=5",
                      "trainer.final_test=false", "trainer.eval_max_sentences=7"))
    run = tmp_path / "run"
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, "scripts/measurements/loss_per_sentence.py", str(run),
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    (result,) = json.loads(out.read_text())
    # the pieces the loss was taken over, counted as the validation batches count them
    cfg = OmegaConf.load(run / "config.yaml")
    valid = prepare_data(cfg.data, cfg.tokenizer).splits["validation"]
    keep = valid.spread(7)
    batch = collate([valid.src_ids[i] for i in keep], [valid.tgt_ids[i] for i in keep], keep)
    assert result["sentences"] == 7 < len(valid)
    assert result["target_tokens"] == batch.num_tgt_tokens  # EOS included
    history = json.loads((run / "metrics.json").read_text())["history"]
    assert [h["step"] for h in result["history"]] == [h["step"] for h in history] == [5, 10]
    for row, h in zip(result["history"], history, strict=True):
        assert row["valid_loss_per_sentence"] == pytest.approx(
            h["valid_loss"] * batch.num_tgt_tokens / 7)
        assert row["valid_bleu"] == h["valid_bleu"]
    assert f"{batch.num_tgt_tokens:,} target pieces with EOS" in done.stdout
