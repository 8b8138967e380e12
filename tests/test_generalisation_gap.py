"""scripts/measurements/generalisation_gap.py: a run's loss on training pairs against validation
pairs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from seq2seq.corpus import prepare_data
from seq2seq.data.batching import collate
from seq2seq.inference import load_for_inference
from seq2seq.runtime import Runtime
from seq2seq.training.loop import train
from seq2seq.training.validation import split_loss
from tests.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 5 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_the_gap_scores_the_best_checkpoint_as_validation_did(tmp_path: Path) -> None:
    train(tiny_config(tmp_path, "trainer.max_steps=10", "trainer.eval_every=5",
                      "trainer.final_test=false", "trainer.eval_max_sentences=7"))
    run = tmp_path / "run"
    out = tmp_path / "gap.json"
    done = subprocess.run([sys.executable, "scripts/measurements/generalisation_gap.py", str(run),
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
    # per sentence (vocabularies that differ compare on it): the loss per piece times the
    # pieces it was taken over (EOS included, as the batches count them) over the sentences
    cfg = OmegaConf.load(run / "config.yaml")
    splits = prepare_data(cfg.data, cfg.tokenizer).splits
    loaded = load_for_inference(run / "checkpoints" / "best.pt", "cpu")
    rt = Runtime(torch.device("cpu"), "fp32")
    for name, split, n, key in (("train", splits["train"], 9, "train"),
                                ("validation", splits["validation"], 7, "valid")):
        keep = split.spread(n)
        pieces = collate([split.src_ids[i] for i in keep], [split.tgt_ids[i] for i in keep],
                         keep).num_tgt_tokens
        assert result[f"{name}_pieces"] == pieces
        per_sentence = result[f"{key}_loss_per_sentence"]
        assert per_sentence == pytest.approx(result[f"{key}_loss"] * pieces / n, rel=1e-6)
        # and it is each sentence's summed NLL, averaged over the sentences
        sums = [split_loss(loaded.model, one, rt, 4096) * (len(one.tgt_ids[0]) + 1)
                for one in (split.subset([i]) for i in keep)]
        assert per_sentence == pytest.approx(sum(sums) / n, rel=1e-4)
    assert result["gap_per_sentence"] == pytest.approx(
        result["valid_loss_per_sentence"] - result["train_loss_per_sentence"])
    assert f"{result['gap_per_sentence']:.2f}" in done.stdout
