"""One checkpoint format and one loader, shared by resume, evaluate and translate.

A checkpoint holds only tensors and plain containers, so it loads with
`torch.load(weights_only=True)`: a file crafted to run code when unpickled is refused.
Writes are atomic: a temporary file in the same folder, flushed, then renamed over the target.

What training writes (`Checkpointer.save`) to `<run>/checkpoints/`: last.pt (resume reads it),
best.pt (the best validation BLEU) and, beside each last.pt, a copy `step-<N>.pt` of which the
newest trainer.keep_last stay (`python -m seq2seq.average` averages them). Each holds:
- "model": the weights evaluate and translate load: the average when training keeps one
  (trainer.ema_decay), else the trained weights; "train_model": the trained weights when they
  differ from "model" (else None), which a resumed run continues from;
- "optimizer", "plateau", "scaler": their state dicts (scaler None without fp16 loss scaling);
- "progress": `Progress` as a dict; "rng": the random state of every process, in rank order;
- "config": the run's resolved config; "tokenizer": its tokenizer's identity;
- "num_parameters" and "format_version".
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import tempfile
import warnings
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from seq2seq.errors import UserError
from seq2seq.models.base import count_parameters
from seq2seq.runtime import Runtime, dropout_seed, gather_to_main, seed_everything
from seq2seq.tokenization import Tokenizer

FORMAT_VERSION = 1
PERIODIC_PREFIX = "step-"  # step-<N>.pt: the periodic checkpoints trainer.keep_last keeps


@dataclass
class Progress:
    """Everything that changes as training goes on; saved in every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    position: int = 0  # batches of this epoch (on this rank) already consumed
    elapsed: float = 0.0  # seconds of training before this process started
    best_bleu: float = -1.0
    best_signature: str = ""  # sacrebleu's signature of best_bleu: scores compare only within one
    evals_since_best: int = 0
    bad_steps: int = 0  # updates dropped in a row (NaN/inf), as of the last log
    skipped_updates: int = 0
    history: list[dict[str, float]] = field(default_factory=list)  # one row per evaluation
    losses: list[list[float]] = field(default_factory=list)  # [step, loss] at log intervals


class Stateful(Protocol):
    """What a checkpoint saves and restores: an optimizer, a scaler, a plateau schedule."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` to `path` atomically: a crash leaves the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format_version": FORMAT_VERSION, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path | str, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; any problem becomes a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: checkpoint file not found")
    if not zipfile.is_zipfile(path):
        raise UserError(f"{path}: not a readable checkpoint (not a torch archive; truncated?)")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [ln.strip() for ln in str(err).splitlines()] or [type(err).__name__]
        culprit = next((ln for ln in lines if "Unsupported global" in ln), lines[0])
        raise UserError(
            f"{path}: refused to load: the file holds objects other than tensors and plain "
            f"data, which could run code ({culprit[:160]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        raise UserError(
            f"{path}: not a readable checkpoint ({type(err).__name__}: {reason})"
        ) from None
    if not isinstance(payload, dict) or "model" not in payload:
        raise UserError(f"{path}: not a seq2seq checkpoint (no model weights inside)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{path}: checkpoint format {payload.get('format_version')} is not the supported "
            f"format {FORMAT_VERSION}"
        )
    return payload


def check_tokenizer(
    payload: dict[str, Any], tokenizer: Tokenizer, path: Path, tokenizer_dir: Path
) -> None:
    """Refuse a tokenizer other than the one checkpoint `path` was trained with.

    Raises:
        UserError: naming `tokenizer_dir`, the checkpoint and the identity fields that differ.
    """
    saved = payload.get("tokenizer") or {}
    if tokenizer.identity == saved:
        return
    differ = sorted(
        key
        for key in set(tokenizer.identity) | set(saved)
        if tokenizer.identity.get(key) != saved.get(key)
    )
    raise UserError(
        f"{tokenizer_dir}: not the tokenizer checkpoint {path} was trained with "
        f"(differs in {', '.join(differ)})"
    )


def periodic_checkpoints(folder: Path) -> list[Path]:
    """The periodic checkpoints `step-<N>.pt` in `folder`, oldest (smallest N) first."""
    found = []
    for path in Path(folder).glob(f"{PERIODIC_PREFIX}*.pt"):
        step = path.stem[len(PERIODIC_PREFIX):]
        if step.isdigit():
            found.append((int(step), path))
    return [path for _, path in sorted(found)]


def rng_state() -> dict[str, Any]:
    """Every random generator this process uses, as plain data (CPU tensors)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`. The generators take CPU byte tensors only, so tensors that were
    loaded onto another device (a checkpoint read with map_location=cuda) come back first."""
    torch.set_rng_state(_cpu_bytes(state["torch"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_cpu_bytes(s) for s in state["cuda"]])


def _cpu_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(device="cpu", dtype=torch.uint8)


def find_resume_checkpoint(
    resume: bool | str | None, run_dir: Path, runs_root: Path, data: str, model: str
) -> Path | None:
    """The checkpoint trainer.resume names: false or None, none; a path, that file; true, this
    run folder's last.pt, else the newest last.pt of a run of this data and model under
    `runs_root` (`<runs_root>/<data>/<model>/<run>/checkpoints/last.pt`).

    Raises:
        UserError: resume is true and there is no such checkpoint.
    """
    if resume is False or resume is None:
        return None
    if resume is not True:
        return Path(str(resume))
    own = run_dir / "checkpoints" / "last.pt"
    if own.is_file():
        return own
    candidates = sorted(
        Path(runs_root).glob(f"{data}/{model}/*/checkpoints/last.pt"),
        key=lambda p: p.stat().st_mtime,
    )
    candidates = [p for p in candidates if p.parent.parent != run_dir]
    if not candidates:
        raise UserError(
            f"trainer.resume=true: no last.pt in {run_dir} nor under "
            f"{runs_root}/{data}/{model}/; pass a path instead"
        )
    return candidates[-1]


class Checkpointer:
    """Writes a training run's checkpoints and resumes from one.

    Args:
        folder: `<run>/checkpoints`; the run's tokenizer is in `<run>/tokenizer`.
        rt: this process's runtime; rank 0 writes, every process restores.
        model: the trained model (not a DDP or compiled wrapper).
        averaged: the weight average evaluated instead of `model`, or None.
        optimizer, plateau, scaler: saved and restored with their state dicts.
        config: the run's resolved config, as plain containers.
        tokenizer: the run's tokenizer; a checkpoint of another one is refused.
        seed: trainer.seed, to reseed processes whose random state a checkpoint lacks.
        keep_last: periodic checkpoints (`step-<N>.pt`) kept beside last.pt; 0: none.
    """

    def __init__(
        self,
        folder: Path,
        rt: Runtime,
        model: nn.Module,
        averaged: nn.Module | None,
        optimizer: Stateful,
        plateau: Stateful,
        scaler: Stateful | None,
        config: dict[str, Any],
        tokenizer: Tokenizer,
        seed: int,
        keep_last: int,
    ) -> None:
        self.folder, self.rt = folder, rt
        self.model, self.averaged = model, averaged
        self.optimizer, self.plateau, self.scaler = optimizer, plateau, scaler
        self.config, self.tokenizer, self.seed = config, tokenizer, seed
        self.keep_last = keep_last

    @property
    def best(self) -> Path:
        return self.folder / "best.pt"

    def payload(self, progress: Progress, rng: list[dict[str, Any]]) -> dict[str, Any]:
        """What a checkpoint holds (see the module docstring)."""
        return {
            "model": (self.averaged if self.averaged is not None else self.model).state_dict(),
            "train_model": self.model.state_dict() if self.averaged is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "plateau": self.plateau.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "progress": asdict(progress),
            "rng": rng,
            "config": self.config,
            "tokenizer": self.tokenizer.identity,
            "num_parameters": count_parameters(self.model),
        }

    def save_best(self, progress: Progress, elapsed: float) -> None:
        """best.pt, written during rank 0's evaluation: it holds rank 0's random state only."""
        progress.elapsed = elapsed
        save_checkpoint(self.best, self.payload(progress, [rng_state()]))

    def save_last(self, progress: Progress, elapsed: float) -> None:
        """last.pt, at a point every process reaches (the random state of each is gathered
        into it), and the same payload as `step-<N>.pt`, of which the newest `keep_last` stay
        (written first, so a crash between the two never leaves fewer)."""
        rng = gather_to_main(rng_state(), self.rt)
        if not self.rt.is_main:
            return
        progress.elapsed = elapsed
        payload = self.payload(progress, rng)
        if self.keep_last > 0:
            save_checkpoint(self.folder / f"{PERIODIC_PREFIX}{progress.step}.pt", payload)
            for old in periodic_checkpoints(self.folder)[: -self.keep_last]:
                old.unlink()
        save_checkpoint(self.folder / "last.pt", payload)

    def restore(self, path: Path) -> Progress:
        """Load weights, optimizer, plateau, scaler and this process's random state from a
        checkpoint; returns the progress to continue from.

        Loaded on the CPU: the random generators take CPU tensors, and load_state_dict moves
        weights and optimizer state to their device. Resuming into another run folder carries
        the old run's best.pt over, since its best BLEU is the bar this run must beat to write
        a new one.

        Raises:
            UserError: an unreadable checkpoint, an average (no optimizer state), another
                tokenizer, weights of another model.
        """
        ckpt = load_checkpoint(path, map_location="cpu")
        if "optimizer" not in ckpt:
            raise UserError(f"{path}: an averaged checkpoint (seq2seq.average) is for evaluate "
                            "and translate; resume from a last.pt or step-<N>.pt")
        check_tokenizer(ckpt, self.tokenizer, path, self.folder.parent / "tokenizer")
        try:
            if self.averaged is not None:
                self.averaged.load_state_dict(ckpt["model"])
            trained = ckpt.get("train_model")
            self.model.load_state_dict(trained if trained is not None else ckpt["model"])
        except RuntimeError as err:
            raise UserError(f"{path}: the weights do not fit this model config "
                            f"({str(err).splitlines()[0][:200]})") from None
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.plateau.load_state_dict(ckpt["plateau"])
        if self.scaler is not None and ckpt["scaler"] is not None:
            self.scaler.load_state_dict(ckpt["scaler"])
        progress = Progress(**ckpt["progress"])
        states = ckpt["rng"] if isinstance(ckpt["rng"], list) else [ckpt["rng"]]
        if len(states) == self.rt.world_size:
            set_rng_state(states[self.rt.rank])
        else:
            warnings.warn(f"{path} holds the random state of {len(states)} process(es), this run "
                          f"has {self.rt.world_size}: every process is reseeded", stacklevel=1)
            seed_everything(dropout_seed(self.seed, self.rt.rank) + progress.step)
        old_best = Path(path).parent / "best.pt"
        if self.rt.is_main and old_best.is_file() and old_best.resolve() != self.best.resolve():
            self.folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(old_best, self.best)
        if self.rt.is_main:
            print(f"resumed from {path} at step {progress.step}, epoch {progress.epoch}")
        return progress
