"""Run by torchrun in tests/test_ddp.py with the real training loop; one RESULT line per rank.

    ddp_worker.py CONFIG train    train, then report the parameters, the random state the
                                  last checkpoint saved, and a dropout fingerprint
    ddp_worker.py CONFIG resume   restore trainer.resume and report the restored random state
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from seq2seq.checkpoint import Progress, find_resume_checkpoint
from seq2seq.runtime import setup_runtime, teardown
from seq2seq.training.loop import run
from seq2seq.training.setup import build_parts, prepare_on_every_rank


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().float().numpy().tobytes()).hexdigest()[:16]


cfg, mode = OmegaConf.load(sys.argv[1]), sys.argv[2]
rt = setup_runtime(cfg.trainer.device, cfg.trainer.precision, cfg.trainer.threads,
                   cfg.trainer.seed)
parts = build_parts(cfg, rt, prepare_on_every_rank(cfg, rt), Path(cfg.run_dir))
result: dict = {"rank": rt.rank}
if mode == "train":
    result["first_batch"] = parts.batches.epoch_batches(0)[0]
    progress = Progress()
    run(parts, progress)
    result["rng"] = digest(torch.get_rng_state())  # as saved in last.pt at the end of run()
    flat = torch.cat([p.detach().flatten() for p in parts.model.parameters()])
    result["params"] = flat[:: max(1, flat.numel() // 512)].tolist()
    result["losses"] = progress.losses
    result["steps"] = progress.step
    # the same weights and the same batch on every rank: outputs differ only by dropout
    batch = parts.batches.collate(parts.batches.train_split, list(range(8)))
    parts.model.train()
    with torch.no_grad():
        logits, _ = parts.model(batch.src, batch.src_mask, batch.tgt_in, need_attn=False)
    result["dropout_output"] = digest(logits)
else:
    resume = find_resume_checkpoint(cfg.trainer.resume, Path(cfg.run_dir), Path(cfg.runs_root),
                                    cfg.data.name, cfg.model.name)
    parts.checkpointer.restore(resume)
    result["rng"] = digest(torch.get_rng_state())
# One rank after the other: the lines are over 4 KiB, and longer writes of two processes to
# one pipe can interleave.
for rank in range(rt.world_size):
    if rank == rt.rank:
        print("RESULT " + json.dumps(result), flush=True)
    dist.barrier()
teardown(rt)
