"""The loss curve of the tiny default runs (tests/tiny.py: Bahdanau and the Transformer, 12
updates, fp32, one thread) as JSON on the last line, with the seq2seq package that ran it: run
it at two commits (PYTHONPATH=<checkout>) to check an option off by default changes nothing.

    PYTHONPATH=. python scripts/measurements/loss_curve.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import seq2seq
from seq2seq.training.loop import train
from tests.tiny import tiny_config


def main() -> None:
    out: dict = {"code": seq2seq.__file__}
    for model in ("bahdanau", "transformer"):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = tiny_config(Path(tmp), "trainer.max_steps=12", "trainer.eval_every=1000",
                              "trainer.final_test=false", "trainer.log_every=1", model=model)
            out[model] = train(cfg)["losses"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
