"""Run by torchrun in tests/test_ddp.py: trains with the real Trainer, prints a parameter
fingerprint per rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from seq2seq.training.loop import Trainer, prepare_on_every_rank
from seq2seq.training.runtime import setup_runtime, teardown

cfg = OmegaConf.load(sys.argv[1])
rt = setup_runtime(cfg.trainer.device, cfg.trainer.precision, cfg.trainer.threads,
                   cfg.trainer.seed)
trainer = Trainer(cfg, rt, prepare_on_every_rank(cfg, rt), Path(cfg.run_dir))
first_batch = trainer.epoch_batches(0)[0]
trainer.run()
flat = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
print("RESULT " + json.dumps({
    "rank": rt.rank,
    "first_batch": first_batch,
    "params": flat[:: max(1, flat.numel() // 512)].tolist(),
    "losses": trainer.progress.losses,
}), flush=True)
teardown(rt)
