"""`train(cfg) -> metrics`: the training loop, readable as the algorithm.

batch -> loss -> step; now and then: log, evaluate (BLEU, chrF, focus, probe heatmaps),
checkpoint. Budgets: max_steps, max_epochs, max_time, early stopping on validation BLEU.
A run folder holds checkpoints/{last,best}.pt, tensorboard/, metrics.json, test.hyp,
config.yaml and tokenizer/.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import shutil
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from seq2seq.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from seq2seq.corpus import (
    EncodedSplit,
    PreparedData,
    SegmentationSampler,
    encode_split,
    prepare_data,
)
from seq2seq.data.batching import Batch, collate, padding_fraction, token_batches
from seq2seq.decoding import decode_settings
from seq2seq.errors import UserError
from seq2seq.evaluation.decode_and_score import decode_and_score, decode_ids, eval_mode
from seq2seq.models import build_model
from seq2seq.models.base import count_parameters
from seq2seq.runtime import (
    Runtime,
    all_reduce_sum,
    dropout_seed,
    gather_to_main,
    seed_everything,
    setup_runtime,
    teardown,
)
from seq2seq.tokenization import EOS_ID, PAD_ID, Tokenizer
from seq2seq.training.ema import EMA
from seq2seq.training.loss import token_losses
from seq2seq.training.optim import Plateau, build_optimizer, learning_rate
from seq2seq.visualization import attention_heatmap, head_grid


@dataclass
class Progress:
    """Everything that changes as training goes on; saved in every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    position: int = 0  # batches of this epoch (on this rank) already consumed
    elapsed: float = 0.0  # seconds of training before this process started
    best_bleu: float = -1.0
    evals_since_best: int = 0
    bad_steps: int = 0  # updates dropped in a row (NaN/inf), as of the last log
    skipped_updates: int = 0
    history: list[dict[str, float]] = field(default_factory=list)  # one row per evaluation
    losses: list[list[float]] = field(default_factory=list)  # [step, loss] at log intervals


@dataclass(frozen=True)
class RunOutcome:
    """How `Trainer.run` ended: stopped_by is budget, early stopping or a signal's name."""

    stopped_by: str
    step: int
    train_time: float  # seconds, evaluations included
    interrupted: bool  # by a signal: last.pt was saved to resume from, nothing was tested


class StopSignal:
    """Turns SIGINT/SIGTERM into a flag the loop checks after each step."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
        with contextlib.suppress(ValueError):  # not the main thread: signals stay as they are
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def checkpoint_payload(
    model: nn.Module,
    ema: EMA | None,
    optimizer: torch.optim.Optimizer,
    plateau: Plateau,
    scaler: torch.amp.GradScaler | None,
    progress: Progress,
    cfg: DictConfig,
    tokenizer: Tokenizer,
    rng: list[dict[str, Any]],
) -> dict[str, Any]:
    """What a checkpoint holds. "model" is what evaluate/translate load: the averaged weights
    when trainer.ema_decay is set, and then "train_model" holds the trained ones for resuming.
    "rng" holds the random state of every process, in rank order."""
    return {
        "model": (ema.model if ema is not None else model).state_dict(),
        "train_model": model.state_dict() if ema is not None else None,
        "optimizer": optimizer.state_dict(),
        "plateau": plateau.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "progress": progress.__dict__,
        "rng": rng,
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "tokenizer": tokenizer.identity,
        "num_parameters": count_parameters(model),
    }


def find_resume_checkpoint(cfg: DictConfig, run_dir: Path) -> Path | None:
    """trainer.resume: false, a path, or true (this run folder, else the newest run of this
    data and model under runs_root)."""
    resume = cfg.trainer.resume
    if resume is False or resume is None:
        return None
    if resume is not True:
        return Path(str(resume))
    own = run_dir / "checkpoints" / "last.pt"
    if own.is_file():
        return own
    candidates = sorted(
        Path(cfg.runs_root).glob(f"{cfg.data.name}/{cfg.model.name}/*/checkpoints/last.pt"),
        key=lambda p: p.stat().st_mtime,
    )
    candidates = [p for p in candidates if p.parent.parent != run_dir]
    if not candidates:
        raise UserError(
            f"trainer.resume=true: no last.pt in {run_dir} nor under "
            f"{cfg.runs_root}/{cfg.data.name}/{cfg.model.name}/; pass a path instead"
        )
    return candidates[-1]


def check_tokenizer(ckpt: dict[str, Any], tokenizer: Tokenizer, path: Path) -> None:
    if ckpt.get("tokenizer") != tokenizer.identity:
        raise UserError(
            f"{path}: the checkpoint was trained with another tokenizer "
            f"({ckpt.get('tokenizer')}) than this run's ({tokenizer.identity})"
        )


class Trainer:
    """Holds what one training run needs; `run()` is the loop."""

    def __init__(self, cfg: DictConfig, rt: Runtime, data: PreparedData, run_dir: Path) -> None:
        self.cfg, self.rt, self.data, self.run_dir = cfg, rt, data, run_dir
        t = cfg.trainer
        tok = data.tokenizer
        self.model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size).to(rt.device)
        self.num_parameters = count_parameters(self.model)
        self.ema = EMA(self.model, t.ema_decay) if t.ema_decay is not None else None
        seed_everything(dropout_seed(t.seed, rt.rank))  # the model is built: ranks draw apart
        self.optimizer = build_optimizer(
            self.model, t.lr, tuple(t.betas), t.weight_decay
        )
        self.plateau = Plateau(t.plateau_factor, t.plateau_patience, t.min_lr / t.lr)
        self.scaler = rt.grad_scaler()
        self.progress = Progress()
        self.train_split = data.splits["train"]
        self._sampler: SegmentationSampler | None = None  # trainer.subword_alpha
        self._sampled: tuple[int, EncodedSplit] | None = None  # (epoch, its segmentation)
        self.step_model: nn.Module = self.model  # what the step calls: maybe compiled, maybe DDP
        if t.compile:
            self.step_model = torch.compile(self.model, dynamic=True)
        if rt.distributed:
            ids = [rt.device.index] if rt.device.type == "cuda" else None
            self.step_model = DistributedDataParallel(self.step_model, device_ids=ids)
        self.writer = SummaryWriter(str(run_dir / "tensorboard")) if rt.is_main else None
        self.ckpt_dir = run_dir / "checkpoints"

    # ---- data -------------------------------------------------------------------------------
    def epoch_split(self, epoch: int) -> EncodedSplit:
        """The training pairs as segmented for `epoch`: the prepared split, or with
        trainer.subword_alpha a segmentation sampled from (seed, epoch), the same on every
        process and again after a resume."""
        t = self.cfg.trainer
        if t.subword_alpha is None:
            return self.train_split
        if self._sampler is None:
            tok = self.cfg.tokenizer
            self._sampler = SegmentationSampler(
                self.data.tokenizer, self.train_split, t.subword_alpha, t.subword_nbest,
                tok.max_src_len, tok.max_tgt_len,
            )
        if self._sampled is None or self._sampled[0] != epoch:
            self._sampled = (epoch, self._sampler.sample(t.seed, epoch))
        return self._sampled[1]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        t = self.cfg.trainer
        split = self.epoch_split(epoch)
        return token_batches(
            split.src_lens,
            split.tgt_lens,
            t.batch_tokens,
            shuffle=True,
            seed=t.seed,
            epoch=epoch,
            rank=self.rt.rank,
            world_size=self.rt.world_size,
        )

    def collate(self, split: EncodedSplit, indices: list[int]) -> Batch:
        """A batch of `split` rows on the CPU (in a loader worker when num_workers > 0)."""
        return collate(
            [split.src_ids[i] for i in indices],
            [split.tgt_ids[i] for i in indices],
            indices,
            pad_to_multiple=self.cfg.trainer.pad_to_multiple,
        )

    def to_device(self, batch: Batch) -> Batch:
        return batch.to(self.rt.device, non_blocking=self.rt.device.type == "cuda")

    def batch_stream(self, epoch: int, start: int) -> Iterator[Batch]:
        """This process's training batches of `epoch` from position `start`, collated ahead
        by `trainer.num_workers` processes into pinned memory when training on a GPU."""
        batches = self.epoch_batches(epoch)[start:]
        workers = self.cfg.trainer.num_workers
        return iter(DataLoader(
            batches,  # type: ignore[arg-type]
            batch_size=None,
            collate_fn=functools.partial(self.collate, self.epoch_split(epoch)),
            num_workers=workers,
            pin_memory=self.rt.device.type == "cuda",
            prefetch_factor=4 if workers > 0 else None,
            # its own generator: a new iterator must not draw from the global RNG, or a
            # resumed run (which starts one mid-epoch) would drift from an uninterrupted one
            generator=torch.Generator().manual_seed(epoch),
        ))

    def next_micro_batches(self, stream: Iterator[Batch]) -> tuple[list[Batch], Iterator[Batch]]:
        """The accum_steps batches of the next update, moving to the next epoch when needed."""
        p = self.progress
        micro: list[Batch] = []
        while len(micro) < self.cfg.trainer.accum_steps:
            batch = next(stream, None)
            if batch is None:
                p.epoch, p.position = p.epoch + 1, 0
                stream = self.batch_stream(p.epoch, 0)
                continue
            micro.append(self.to_device(batch))
            p.position += 1
        return micro, stream

    # ---- one update -------------------------------------------------------------------------
    def train_step(self, micro: list[Batch]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Forward/backward over the micro-batches and one optimizer update.

        The loss is normalised by the target tokens of the whole update across micro-batches
        and processes, so N processes compute exactly the gradient of one process that sees
        all their batches. An update whose gradient is NaN/inf is dropped on the device by the
        fused AdamW kernel (`found_inf`), so nothing here waits for the GPU.

        Returns device tensors: (summed NLL, gradient norm, target tokens, skipped: 1.0 when
        the update was dropped); the NLL and tokens of a dropped update count as 0.
        """
        t = self.cfg.trainer
        local_tokens = sum(b.tgt_positions.numel() for b in micro)  # known on the host
        if self.rt.distributed:  # counted on the device, summed over processes
            counts = torch.stack([(b.tgt_out != PAD_ID).sum() for b in micro]).sum().float()
            total: Tensor | float = all_reduce_sum(counts, self.rt)
        else:
            total = float(local_tokens)
        scale = self.rt.world_size / total  # DDP averages gradients over processes
        nll_sum = torch.zeros((), device=self.rt.device)
        for i, batch in enumerate(micro):
            last = i == len(micro) - 1
            sync = contextlib.nullcontext()
            if self.rt.distributed and not last:
                sync = self.step_model.no_sync()  # type: ignore[operator]
            with sync:
                real = batch.tgt_positions  # (N,): no logits are computed for padding
                with self.rt.autocast():
                    logits, _ = self.step_model(
                        batch.src, batch.src_mask, batch.tgt_in, need_attn=False,
                        output_positions=real,
                    )  # (N, V)
                target = batch.tgt_out.flatten().index_select(0, real)  # (N,)
                loss, nll = token_losses(logits, target, PAD_ID, t.label_smoothing)
                loss = loss * scale
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()
            nll_sum += nll.detach()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), t.clip_norm if t.clip_norm > 0 else math.inf
        )
        skipped = (~torch.isfinite(grad_norm)).float()
        lr = learning_rate(
            self.progress.step + 1, t.schedule, t.lr, t.warmup_steps, self.plateau.scale
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # drops an inf/NaN update itself
            self.scaler.update()
        else:
            self.optimizer.found_inf = skipped  # type: ignore[attr-defined]
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.progress.step + 1)
        keep = 1.0 - skipped
        return torch.nan_to_num(nll_sum) * keep, grad_norm, keep * local_tokens, skipped

    # ---- evaluation -------------------------------------------------------------------------
    @property
    def eval_model(self) -> nn.Module:
        """The weights that are evaluated: the average (trainer.ema_decay) or the trained ones."""
        return self.ema.model if self.ema is not None else self.model

    @torch.inference_mode()
    def validation_loss(self) -> float:
        split, model = self.data.splits["validation"], self.eval_model
        total, tokens = 0.0, 0
        batches = token_batches(
            split.src_lens, split.tgt_lens, self.cfg.trainer.batch_tokens,
            shuffle=False, seed=0, epoch=0,
        )
        with eval_mode(model):
            for indices in batches:
                batch = self.to_device(self.collate(split, indices))
                with self.rt.autocast():
                    logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, need_attn=False)
                _, nll = token_losses(logits, batch.tgt_out, PAD_ID)
                total += nll.item()
                tokens += batch.num_tgt_tokens
        return total / max(tokens, 1)

    def evaluate(self, elapsed: float) -> dict[str, float]:
        """Validation loss, BLEU, chrF, focus; probe heatmaps and samples to TensorBoard."""
        t, step = self.cfg.trainer, self.progress.step
        loss = self.validation_loss()
        settings = decode_settings(self.cfg.decoding, self.cfg.decoding.valid_beam_size)
        result = decode_and_score(
            self.eval_model, self.data.tokenizer, self.data.splits["validation"], settings,
            self.rt.device, max_sentences=t.eval_max_sentences,
            bleu_tokenize=self.cfg.data.bleu_tokenize,
        )
        row = {
            "step": step,
            "time": round(elapsed, 1),
            "valid_loss": loss,
            "valid_ppl": math.exp(min(loss, 50.0)),
            "valid_bleu": result.scores.bleu,
            "valid_chrf": result.scores.chrf,
        }
        if result.focus:
            row["valid_focus_accuracy"] = result.focus["accuracy"]
            row["valid_focus_weight"] = result.focus["mean_weight"]
        if self.writer is not None:
            for key, value in row.items():
                if key.startswith("valid_") and value is not None:
                    self.writer.add_scalar(key.replace("valid_", "valid/"), value, step)
            samples = "\n".join(
                f"| {s} | {r} | {h} |"
                for s, r, h in list(
                    zip(result.sources, result.references, result.hypotheses, strict=True)
                )[:5]
            )
            self.writer.add_text("samples", "| source | reference | hypothesis |\n|---|---|---|\n"
                                 + samples, step)
            self.log_probe(step)
        return row

    @torch.inference_mode()
    def log_probe(self, step: int) -> None:
        """Translate the probe sentences; their attention heatmaps go to TensorBoard."""
        probe = list(self.cfg.data.probe)
        if not probe or self.writer is None:
            return
        with eval_mode(self.eval_model):
            self._log_probe(probe, step)

    def _log_probe(self, probe: list[str], step: int) -> None:
        tok = self.data.tokenizer
        split = encode_split(tok, probe, [""] * len(probe), 10_000, 10_000)
        model = self.eval_model
        settings = decode_settings(self.cfg.decoding, 1)
        hyps = decode_ids(model, split.src_ids, settings, self.rt.device)
        eos = tok.tgt_pieces([EOS_ID])[0]
        cross_attention = getattr(model, "cross_attention", None)
        for i, (src_ids, nbest) in enumerate(zip(split.src_ids, hyps, strict=True)):
            hyp = nbest[0]
            text = tok.decode_tgt(hyp.tokens)
            self.writer.add_text(f"probe/{i}", f"{probe[i]} → {text}", step)
            if hyp.attention is None:
                continue
            src_labels = tok.src_pieces(src_ids) + [eos]
            tgt_labels = tok.tgt_pieces(hyp.tokens) + [eos]
            fig = attention_heatmap(hyp.attention.float().cpu(), src_labels, tgt_labels,
                                    title=f"step {step}: {text}")
            self.writer.add_figure(f"attention/probe_{i}", fig, step)
            if cross_attention is not None:
                batch = collate([src_ids], [hyp.tokens], [0]).to(self.rt.device)
                heads = cross_attention(batch.src, batch.src_mask, batch.tgt_in)
                fig = head_grid(heads[-1, 0].float().cpu(), src_labels, tgt_labels,
                                title=f"step {step}: last layer, per head")
                self.writer.add_figure(f"attention_heads/probe_{i}", fig, step)

    # ---- checkpoints ------------------------------------------------------------------------
    def save(self, name: str, elapsed: float, every_rank: bool = True) -> None:
        """Rank 0 writes checkpoints/`name`. At a point every process reaches (`every_rank`),
        the random state of each is gathered into it; best.pt, written during rank 0's
        evaluation, holds rank 0's only."""
        rng = gather_to_main(rng_state(), self.rt) if every_rank else [rng_state()]
        if not self.rt.is_main:
            return
        self.progress.elapsed = elapsed
        save_checkpoint(
            self.ckpt_dir / name,
            checkpoint_payload(self.model, self.ema, self.optimizer, self.plateau, self.scaler,
                               self.progress, self.cfg, self.data.tokenizer, rng),
        )

    def restore(self, path: Path) -> None:
        """Continue from a checkpoint. Loaded on the CPU (the random generators take CPU
        tensors; load_state_dict moves weights and optimizer state to their device). Resuming
        into another run folder carries the old run's best.pt over, since its best BLEU is the
        bar this run must beat to write a new one."""
        ckpt = load_checkpoint(path, map_location="cpu")
        check_tokenizer(ckpt, self.data.tokenizer, path)
        try:
            if self.ema is not None:
                self.ema.model.load_state_dict(ckpt["model"])
            trained = ckpt.get("train_model")
            self.model.load_state_dict(trained if trained is not None else ckpt["model"])
        except RuntimeError as err:
            raise UserError(f"{path}: the weights do not fit this model config "
                            f"({str(err).splitlines()[0][:200]})") from None
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.plateau.load_state_dict(ckpt["plateau"])
        if self.scaler is not None and ckpt["scaler"] is not None:
            self.scaler.load_state_dict(ckpt["scaler"])
        self.progress = Progress(**ckpt["progress"])
        states = ckpt["rng"] if isinstance(ckpt["rng"], list) else [ckpt["rng"]]
        if len(states) == self.rt.world_size:
            set_rng_state(states[self.rt.rank])
        else:
            warnings.warn(f"{path} holds the random state of {len(states)} process(es), this run "
                          f"has {self.rt.world_size}: every process is reseeded", stacklevel=1)
            seed_everything(dropout_seed(self.cfg.trainer.seed, self.rt.rank) + self.progress.step)
        old_best, best = Path(path).parent / "best.pt", self.ckpt_dir / "best.pt"
        if self.rt.is_main and old_best.is_file() and old_best.resolve() != best.resolve():
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(old_best, best)
        if self.rt.is_main:
            print(f"resumed from {path} at step {self.progress.step}, epoch {self.progress.epoch}")

    # ---- the loop ---------------------------------------------------------------------------
    def budget_left(self, elapsed: float) -> bool:
        t, p = self.cfg.trainer, self.progress
        if t.max_steps is not None and p.step >= t.max_steps:
            return False
        if t.max_epochs is not None and p.epoch >= t.max_epochs:
            return False
        return t.max_time is None or elapsed < t.max_time

    def agree_to_stop(self, early_stop: bool, signal_name: str | None) -> str | None:
        """Why every process stops after this update, or None: a signal that any process
        received, or early stopping, which rank 0 decides; every rank takes rank 0's plateau
        scale. All processes stop at the same update, so they reach the last save together."""
        if self.rt.distributed:
            flags = torch.tensor(
                [float(early_stop), float(signal_name is not None),
                 self.plateau.scale if self.rt.is_main else 0.0],
                device=self.rt.device,
            )
            dist.all_reduce(flags)  # only rank 0 contributes early_stop and the scale
            self.plateau.scale = float(flags[2])
            early_stop = bool(flags[0])
            if flags[1] > 0:
                signal_name = signal_name or "signal to another process"
        if signal_name is not None:
            return signal_name
        return "early stopping" if early_stop else None

    def run(self) -> RunOutcome:
        t, p = self.cfg.trainer, self.progress
        start = time.monotonic() - p.elapsed
        batches = self.epoch_batches(p.epoch)
        if not batches:
            raise UserError("the training split yields no batch for this process")
        stream = self.batch_stream(p.epoch, p.position)
        if self.rt.is_main:
            split = self.epoch_split(p.epoch)
            frac = padding_fraction(batches, split.src_lens, split.tgt_lens)
            print(f"train: {len(self.train_split)} pairs, {len(batches)} batches per epoch "
                  f"and process, padding {frac:.1%}")
        # a live bar on a terminal; elsewhere (make train > log 2>&1) one line per log_every
        live = self.rt.is_main and t.progress and sys.stderr.isatty()
        bar = tqdm(total=t.max_steps, initial=p.step, disable=not live, dynamic_ncols=True,
                   unit="step")
        self.model.train()
        zeros = functools.partial(torch.zeros, (), device=self.rt.device)
        window_nll, window_tokens, window_skipped, bad_run = zeros(), zeros(), zeros(), zeros()
        window_start, stopped_by = time.monotonic(), None
        with StopSignal() as stop_signal:
            while self.budget_left(time.monotonic() - start):
                micro, stream = self.next_micro_batches(stream)
                nll, grad_norm, tokens, skipped = self.train_step(micro)
                p.step += 1
                window_nll += nll
                window_tokens += tokens
                window_skipped += skipped
                bad_run = (bad_run + skipped) * skipped  # updates dropped in a row
                bar.update(1)
                if p.step % t.log_every == 0:
                    self.check_skipped(window_skipped, bad_run)
                    self.log_train(window_nll, window_tokens, window_start, grad_norm,
                                   bar if live else None, time.monotonic() - start)
                    for window in (window_nll, window_tokens, window_skipped):
                        window.zero_()
                    window_start = time.monotonic()
                early_stop = False
                if p.step % t.eval_every == 0:
                    early_stop = self.after_eval(time.monotonic() - start)
                    window_start = time.monotonic()  # evaluation time is not training speed
                if p.step % t.save_every == 0:
                    self.save("last.pt", time.monotonic() - start)
                stopped_by = self.agree_to_stop(early_stop, stop_signal.received)
                if stopped_by is not None:
                    break
        bar.close()
        elapsed = time.monotonic() - start
        interrupted = stopped_by not in (None, "early stopping")
        if interrupted:
            self.save("last.pt", elapsed)
            if self.rt.is_main:
                print(f"{stopped_by}: saved {self.ckpt_dir / 'last.pt'} at step {p.step}; "
                      f"continue with trainer.resume={self.ckpt_dir / 'last.pt'}")
            return RunOutcome(str(stopped_by), p.step, elapsed, interrupted=True)
        if self.rt.is_main and (not p.history or p.history[-1]["step"] != p.step):
            self.after_eval(elapsed)  # the final weights are always evaluated once
        self.save("last.pt", elapsed)
        return RunOutcome(stopped_by or "budget", p.step, elapsed, interrupted=False)

    def check_skipped(self, skipped: Tensor, bad_run: Tensor) -> None:
        """Read, at a logging interval, how many updates were dropped for NaN/inf."""
        t, p = self.cfg.trainer, self.progress
        n_skipped, p.bad_steps = int(skipped.item()), int(bad_run.item())
        if n_skipped == 0:
            return
        p.skipped_updates += n_skipped
        warnings.warn(f"step {p.step}: {n_skipped} of the last {t.log_every} updates were "
                      "skipped: NaN/inf loss or gradient", stacklevel=1)
        if p.bad_steps >= t.max_bad_steps:
            raise UserError(
                f"{p.bad_steps} updates in a row had a NaN/inf loss; stopping. "
                "Lower trainer.lr, raise trainer.warmup_steps or use precision=fp32"
            )

    def log_train(self, nll: Tensor, tokens: Tensor, since: float, grad_norm: Tensor,
                  bar: tqdm | None, elapsed: float) -> None:
        """Loss and speed of the last log_every updates: to TensorBoard, and to the console
        on the live bar or, with no bar, as one plain line (trainer.progress)."""
        totals = all_reduce_sum(torch.stack([nll, tokens]), self.rt)
        loss = (totals[0] / totals[1].clamp(min=1)).item()
        tok_per_s = totals[1].item() / max(time.monotonic() - since, 1e-9)
        lr = self.optimizer.param_groups[0]["lr"]
        self.progress.losses.append([self.progress.step, loss])
        figures = {"loss": f"{loss:.3f}", "tok_s": f"{tok_per_s:,.0f}", "lr": f"{lr:.2e}"}
        if self.cfg.trainer.max_time is not None:
            figures["left"] = f"{max(self.cfg.trainer.max_time - elapsed, 0):.0f}s"
        if bar is not None:
            bar.set_postfix(figures)
        elif self.rt.is_main and self.cfg.trainer.progress:
            print(f"step {self.progress.step}: " + " ".join(f"{k} {v}" for k, v in figures.items()),
                  flush=True)
        if self.writer is not None:
            step = self.progress.step
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/ppl", math.exp(min(loss, 50.0)), step)
            self.writer.add_scalar("train/lr", lr, step)
            self.writer.add_scalar("train/grad_norm", grad_norm.item(), step)
            self.writer.add_scalar("train/tokens_per_s", tok_per_s, step)

    def after_eval(self, elapsed: float) -> bool:
        """Evaluate on rank 0, keep the best checkpoint; True when early stopping says stop."""
        p, t = self.progress, self.cfg.trainer
        if not self.rt.is_main:
            return False
        row = self.evaluate(elapsed)
        p.history.append(row)
        improved = row["valid_bleu"] > p.best_bleu
        if improved:
            p.best_bleu, p.evals_since_best = row["valid_bleu"], 0
            self.save("best.pt", elapsed, every_rank=False)
        else:
            p.evals_since_best += 1
        if t.schedule == "plateau" and self.plateau.update(row["valid_bleu"]):
            tqdm.write(f"validation BLEU stalled: learning rate scale now {self.plateau.scale:g}")
        focus = row.get("valid_focus_accuracy")
        tqdm.write(
            f"step {p.step} ({elapsed:.0f}s): valid loss {row['valid_loss']:.3f} "
            f"ppl {row['valid_ppl']:.1f} BLEU {row['valid_bleu']:.2f} chrF {row['valid_chrf']:.1f}"
            + (f" focus {focus:.2f}" if focus is not None else "")
            + (" (best)" if improved else "")
        )
        return t.patience is not None and p.evals_since_best >= t.patience


def final_test(trainer: Trainer, cfg: DictConfig) -> dict[str, Any]:
    """Decode the test split with beam search and write test.hyp. The weights scored are
    best.pt's when it exists, else the final weights that are evaluated (EMA or trained);
    "checkpoint" names the file scored, or is None for the final in-memory weights."""
    best = trainer.ckpt_dir / "best.pt"
    model, scored = trainer.eval_model, None
    if best.is_file():
        trainer.model.load_state_dict(load_checkpoint(best)["model"])
        model, scored = trainer.model, str(best)
    settings = decode_settings(cfg.decoding, cfg.decoding.beam_size)
    start = time.monotonic()
    result = decode_and_score(model, trainer.data.tokenizer, trainer.data.splits["test"],
                            settings, trainer.rt.device, bleu_tokenize=cfg.data.bleu_tokenize)
    seconds = time.monotonic() - start
    (trainer.run_dir / "test.hyp").write_text("\n".join(result.hypotheses) + "\n",
                                              encoding="utf-8")
    summary = {**result.summary(), "test_set": cfg.data.test_set, "beam_size": settings.beam_size,
               "decode_seconds": round(seconds, 2), "checkpoint": scored}
    if trainer.writer is not None:
        trainer.writer.add_scalar("test/bleu", result.scores.bleu, trainer.progress.step)
        trainer.writer.add_scalar("test/chrf", result.scores.chrf, trainer.progress.step)
    return summary


def prepare_on_every_rank(cfg: DictConfig, rt: Runtime) -> PreparedData:
    """Rank 0 builds the corpus and tokenizer caches first; the others then read them."""
    if rt.distributed and not rt.is_main:
        dist.barrier()
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=rt.is_main)
    if rt.distributed and rt.is_main:
        dist.barrier()
    return data


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train the model `cfg` describes; returns (and writes to metrics.json) its metrics.

    The metrics have one shape however the run ended: "stopped_by" says how (budget, early
    stopping, or a signal, after which last.pt is saved and "test" is absent), and
    "best_valid_bleu" is what a Hydra sweeper optimises (None before any evaluation).
    """
    t = cfg.trainer
    rt = setup_runtime(t.device, t.precision, t.threads, t.seed)
    run_dir = Path(cfg.run_dir)
    try:
        if rt.is_main:
            print(f"run folder: {run_dir}")
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        data = prepare_on_every_rank(cfg, rt)
        if rt.is_main:
            data.tokenizer.save(run_dir / "tokenizer")
        trainer = Trainer(cfg, rt, data, run_dir)
        if rt.is_main:
            print(f"device {rt.device}, precision {rt.precision}, processes {rt.world_size}")
        resume = find_resume_checkpoint(cfg, run_dir)
        if resume is not None:
            trainer.restore(resume)
        outcome = trainer.run()
        p = trainer.progress
        metrics: dict[str, Any] = {
            "model": cfg.model.name,
            "data": cfg.data.name,
            "parameters": trainer.num_parameters,
            "steps": p.step,
            "epochs": p.epoch + p.position / max(len(trainer.epoch_batches(p.epoch)), 1),
            "train_time": round(outcome.train_time, 1),
            "stopped_by": outcome.stopped_by,
            "skipped_updates": p.skipped_updates,
            "best_valid_bleu": p.best_bleu if p.history else None,
            "history": p.history,
            "losses": p.losses,
        }
        if rt.is_main and t.final_test and not outcome.interrupted:
            metrics["test"] = final_test(trainer, cfg)
            test = metrics["test"]
            focus = test.get("focus", {}).get("accuracy")
            print(f"test ({cfg.data.test_set}, beam {test['beam_size']}): BLEU {test['bleu']:.2f} "
                  f"chrF {test['chrf']:.1f}" + (f" focus {focus:.2f}" if focus is not None else "")
                  + f"\n  {test['bleu_signature']}")
        if rt.is_main:
            (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
            if trainer.writer is not None:
                if not outcome.interrupted:
                    final = {"hparam/best_valid_bleu": p.best_bleu}
                    if "test" in metrics:
                        final["hparam/test_bleu"] = metrics["test"]["bleu"]
                    trainer.writer.add_hparams(hparams(cfg), final, run_name=".")
                trainer.writer.close()
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
