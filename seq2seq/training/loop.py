"""`train(cfg) -> metrics`: the training loop, readable as the algorithm.

batch -> loss -> update; now and then: log, validate (BLEU, chrF, AER, probe heatmaps) and
keep the best weights, checkpoint. Budgets: max_steps, max_epochs, max_time, early stopping on
validation BLEU. A run folder holds checkpoints/{last,best}.pt and the newest trainer.keep_last
step-<N>.pt, tensorboard/, metrics.json, test.hyp, config.yaml and tokenizer/.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from seq2seq.checkpoint import Progress, find_resume_checkpoint
from seq2seq.data.batching import padding_fraction
from seq2seq.errors import UserError
from seq2seq.evaluation.metrics import bleu_signature, signature_tokenizer
from seq2seq.models import is_recurrent
from seq2seq.models.base import count_parameters
from seq2seq.runtime import peak_memory_mib, setup_runtime, teardown
from seq2seq.training.finetune import (
    coverage_line,
    load_start_weights,
    read_start,
    resumed_finetuning,
    with_start_tokenizer,
)
from seq2seq.training.setup import TrainingParts, build_parts, prepare_on_every_rank
from seq2seq.training.stopping import StopSignal, agree_to_stop


@dataclass(frozen=True)
class RunOutcome:
    """How `run` ended: stopped_by is the budget reached (max_steps, max_epochs, max_time),
    early stopping or a signal's name."""

    stopped_by: str
    step: int
    train_time: float  # seconds, evaluations included
    interrupted: bool  # by a signal: last.pt was saved to resume from, nothing was tested


def run(parts: TrainingParts, progress: Progress) -> RunOutcome:
    """Train from `progress` until a budget, early stopping or a signal ends it."""
    rt, batches, log, checkpointer = parts.rt, parts.batches, parts.log, parts.checkpointer
    start = time.monotonic() - progress.elapsed
    epoch = batches.epoch_batches(progress.epoch)
    if not epoch:
        raise UserError("the training split yields no batch for this process")
    if rt.is_main:
        split = batches.epoch_split(progress.epoch)
        frac = padding_fraction(epoch, split.src_lens, split.tgt_lens)
        print(f"train: {len(batches.train_split)} pairs, {len(epoch)} batches per epoch "
              f"and process, padding {frac:.1%}")
    updates = batches.updates(progress.epoch, progress.position)
    log.start(progress.step)
    parts.model.train()
    stopped_by = None
    elapsed = progress.elapsed  # every process's: rank 0's clock (agree_to_stop)
    with StopSignal() as stop_signal:
        while parts.budget.left(progress, elapsed):
            micro, progress.epoch, progress.position = next(updates)
            spent = parts.budget.spent(progress.step, elapsed)  # before this update
            nll, grad_norm, tokens, skipped = parts.update(micro, progress.step + 1, spent)
            progress.step += 1
            log.add(nll, tokens, skipped,
                    parts.update.alignment_kl if parts.update.guidance is not None else None)
            if log.due(progress.step):
                log.write(progress, grad_norm, parts.optimizer.param_groups[0]["lr"],
                          time.monotonic() - start)
            early_stop = False
            if progress.step % parts.eval_every == 0:
                with log.paused():  # validation time is not training speed
                    early_stop = validate_and_keep_best(parts, progress, time.monotonic() - start)
            if progress.step % parts.save_every == 0:
                checkpointer.save_last(progress, time.monotonic() - start)
            stopped_by, elapsed = agree_to_stop(rt, parts.plateau, early_stop,
                                                stop_signal.received, time.monotonic() - start)
            if stopped_by is not None:
                break
    log.close()
    elapsed = time.monotonic() - start
    if stopped_by not in (None, "early stopping"):
        checkpointer.save_last(progress, elapsed)
        last = checkpointer.folder / "last.pt"
        if rt.is_main:
            print(f"{stopped_by}: saved {last} at step {progress.step}; "
                  f"continue with trainer.resume={last}")
        return RunOutcome(str(stopped_by), progress.step, elapsed, interrupted=True)
    if rt.is_main and (not progress.history or progress.history[-1]["step"] != progress.step):
        validate_and_keep_best(parts, progress, elapsed)  # the final weights are always validated
    checkpointer.save_last(progress, elapsed)
    if stopped_by is None:
        stopped_by = parts.budget.reached(progress, elapsed) or "budget"
        if rt.is_main and (line := parts.budget.cut_short(progress, elapsed)):
            tqdm.write(line)
    return RunOutcome(stopped_by, progress.step, elapsed, interrupted=False)


def check_scorer(progress: Progress, tokenize: str | None) -> None:
    """A resumed run's BLEU must score as its best checkpoint's did: the same tokenizer in the
    signature (versions aside). Called on every process right after the restore, so a mismatch
    stops each one before its first update, in one line, rather than rank 0 alone later.

    Raises:
        UserError: the tokenizers differ.
    """
    if not progress.best_signature:
        return
    now, best = bleu_signature(tokenize), progress.best_signature
    if signature_tokenizer(now) != signature_tokenizer(best):
        raise UserError(f"validation BLEU would now be scored as {now}, the best checkpoint's "
                        f"as {best}: the tokenizers differ, so the two do not compare (Korean "
                        "falls back from ko-mecab to 13a without mecab-ko); install what scored "
                        "the best (pip install -e '.[ko]') or start a new run")


def validate_and_keep_best(parts: TrainingParts, progress: Progress, elapsed: float) -> bool:
    """Validate on rank 0 and keep the best weights; True when early stopping says stop."""
    if not parts.rt.is_main:
        return False
    row = parts.validator.validate(progress.step, elapsed)
    progress.history.append(row)
    signature = row["bleu_signature"]  # its tokenizer checked at the start (check_scorer)
    improved = row["valid_bleu"] > progress.best_bleu
    if improved:
        progress.best_bleu, progress.evals_since_best = row["valid_bleu"], 0
        progress.best_signature = signature
        parts.checkpointer.save_best(progress, elapsed)
    else:
        progress.evals_since_best += 1
    if parts.lower_lr_on_plateau and parts.plateau.update(row["valid_bleu"]):
        tqdm.write(f"validation BLEU stalled: learning rate scale now {parts.plateau.scale:g}")
    aer = row.get("valid_aer")
    tqdm.write(
        f"step {progress.step} ({elapsed:.0f}s): valid loss {row['valid_loss']:.3f} "
        f"ppl {row['valid_ppl']:.1f} BLEU {row['valid_bleu']:.2f} chrF {row['valid_chrf']:.1f}"
        + (f" {parts.aer_label} {aer:.2f} (diagonal {row['valid_aer_diagonal']:.2f})"
           if aer is not None else "")
        + (" (best)" if improved else "")
    )
    return parts.budget.patience_spent(progress)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train the model `cfg` describes; returns (and writes to metrics.json) its metrics.

    The metrics have one shape however the run ended: "stopped_by" says how (budget, early
    stopping, or a signal, after which last.pt is saved and "test" is absent), and
    "best_valid_bleu" is what a Hydra sweeper optimises (None before any evaluation).
    """
    t = cfg.trainer
    rt = setup_runtime(t.device, t.precision, t.threads, t.seed, is_recurrent(cfg.model))
    run_dir = Path(cfg.run_dir)
    try:
        start = read_start(cfg)  # trainer.init_from: fine-tuning (training/finetune.py)
        resume = find_resume_checkpoint(t.resume, run_dir, Path(cfg.runs_root), cfg.data.name,
                                        cfg.model.name)
        # a fine-tuning run, new or resumed, encodes with the tokenizer of a checkpoint
        kept = start if start is not None else resumed_finetuning(resume)
        if kept is not None:
            cfg = with_start_tokenizer(cfg, kept, verbose=rt.is_main)
        if rt.is_main:
            print(f"run folder: {run_dir}")
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        data = prepare_on_every_rank(cfg, rt, kept.tokenizer if kept is not None else None)
        if rt.is_main:
            data.tokenizer.save(run_dir / "tokenizer")
            if start is not None:
                print(coverage_line(data.tokenizer, data.splits["train"], start.path))
        parts = build_parts(cfg, rt, data, run_dir)
        if start is not None:
            load_start_weights(parts, start)
        if rt.is_main:
            print(f"device {rt.device}, precision {rt.precision}, processes {rt.world_size}")
        progress = parts.checkpointer.restore(resume) if resume is not None else Progress()
        check_scorer(progress, parts.validator.bleu_tokenize)  # every rank, before an update
        outcome = run(parts, progress)
        epoch_length = max(len(parts.batches.epoch_batches(progress.epoch)), 1)
        metrics: dict[str, Any] = {
            "model": cfg.model.name,
            "data": cfg.data.name,
            "parameters": count_parameters(parts.model),
            "steps": progress.step,
            "epochs": progress.epoch + progress.position / epoch_length,
            "train_time": round(outcome.train_time, 1),
            "stopped_by": outcome.stopped_by,
            "skipped_updates": progress.skipped_updates,
            "best_valid_bleu": progress.best_bleu if progress.history else None,
            "history": progress.history,
            "losses": progress.losses,
            # guided alignment's KL per target token, each logged interval of this process
            "alignment_kl": parts.log.alignment_curve if parts.update.guidance else None,
        }
        # this process's peak resident memory on the CPU, through training and validation,
        # then after the final test (a decode's peak is its own: see release_freed_memory)
        metrics["peak_memory_mib_training"] = round(peak_memory_mib())
        if rt.is_main and t.final_test and not outcome.interrupted:
            test = parts.validator.final_test(parts.model, parts.checkpointer.best,
                                              run_dir / "test.hyp", progress.step)
            metrics["test"] = test
            aer = (test["alignment"] or {}).get("aer")
            print(f"test ({test['test_set']}, beam {test['beam_size']}): BLEU {test['bleu']:.2f} "
                  f"chrF {test['chrf']:.1f}"
                  + (f" {parts.aer_label} {aer:.2f}" if aer is not None else "")
                  + f"\n  {test['bleu_signature']}")
        metrics["peak_memory_mib"] = round(peak_memory_mib())
        if rt.device.type == "cuda":
            metrics["peak_cuda_memory_mib"] = round(torch.cuda.max_memory_allocated(rt.device)
                                                    / 2**20)
        if rt.is_main:
            (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
            if parts.writer is not None and not outcome.interrupted:
                final = {"hparam/best_valid_bleu": progress.best_bleu}
                if "test" in metrics:
                    final["hparam/test_bleu"] = metrics["test"]["bleu"]
                parts.writer.add_hparams(hparams(cfg), final, run_name=".")
            parts.close()
            print(f"run folder: {run_dir}")
        return metrics
    finally:
        teardown(rt)


def hparams(cfg: DictConfig) -> dict[str, Any]:
    """Scalar settings of the model and trainer, flattened for TensorBoard's HParams tab."""
    flat: dict[str, Any] = {}
    for group in ("model", "trainer", "tokenizer"):
        for key, value in OmegaConf.to_container(  # type: ignore[union-attr]
            cfg[group], resolve=True, enum_to_str=True
        ).items():
            if isinstance(value, (int, float, str, bool)):
                flat[f"{group}.{key}"] = value
    flat["data"] = cfg.data.name
    return flat
