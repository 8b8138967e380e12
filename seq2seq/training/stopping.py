"""When training stops: the budgets (steps, epochs, time), early stopping on validation BLEU,
and SIGINT/SIGTERM, agreed on by every process so that all stop at the same update."""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from seq2seq.checkpoint import Progress
from seq2seq.runtime import Runtime
from seq2seq.training.optim import Plateau


@dataclass(frozen=True)
class Budget:
    """The first limit reached ends training; None is no limit.

    Attributes:
        max_steps: optimizer updates.
        max_epochs: passes over the training split.
        max_time: seconds of training, validations included.
        patience: validations in a row without a new best BLEU (early stopping).
    """

    max_steps: int | None = None
    max_epochs: int | None = None
    max_time: float | None = None
    patience: int | None = None

    def left(self, progress: Progress, elapsed: float) -> bool:
        """Whether another update is within the step, epoch and time budgets."""
        return self.reached(progress, elapsed) is None

    def reached(self, progress: Progress, elapsed: float) -> str | None:
        """The budget that ends training now ("max_steps", "max_epochs", "max_time"), or None."""
        if self.max_steps is not None and progress.step >= self.max_steps:
            return "max_steps"
        if self.max_epochs is not None and progress.epoch >= self.max_epochs:
            return "max_epochs"
        if self.max_time is not None and elapsed >= self.max_time:
            return "max_time"
        return None

    def cut_short(self, progress: Progress, elapsed: float) -> str | None:
        """A line saying the time limit, a safety net, ended the run before its step or epoch
        budget; None when it did not."""
        if self.reached(progress, elapsed) != "max_time" or (
                self.max_steps is None and self.max_epochs is None):
            return None
        counted = (f"update {progress.step} of trainer.max_steps={self.max_steps}"
                   if self.max_steps is not None
                   else f"epoch {progress.epoch} of trainer.max_epochs={self.max_epochs}")
        return (f"cut short: the time limit (trainer.max_time={self.max_time:g} s) ended the "
                f"run at {counted}; this machine was slower than the budget assumes")

    def spent(self, step: int, elapsed: float) -> float:
        """The share of the step and time budgets used after `step` updates and `elapsed`
        seconds (the larger of the two), in [0, 1]; 0 without either."""
        shares = [0.0]
        if self.max_steps:
            shares.append(step / self.max_steps)
        if self.max_time:
            shares.append(elapsed / self.max_time)
        return min(max(shares), 1.0)

    def patience_spent(self, progress: Progress) -> bool:
        """Whether early stopping says stop after the latest validation."""
        return self.patience is not None and progress.evals_since_best >= self.patience


class StopSignal:
    """Turns SIGINT/SIGTERM into a flag the loop checks after each update."""

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


def agree_to_stop(
    rt: Runtime, plateau: Plateau, early_stop: bool, signal_name: str | None, elapsed: float
) -> tuple[str | None, float]:
    """Why every process stops after this update, or None: a signal that any process
    received, or early stopping, which rank 0 decides; and the elapsed seconds every process
    goes on with: rank 0's, as is its plateau scale. All processes see the same time budget
    and learning rate, and stop at the same update, so they reach the last save together."""
    if rt.distributed:
        flags = torch.tensor(
            [float(early_stop), float(signal_name is not None),
             plateau.scale if rt.is_main else 0.0, elapsed if rt.is_main else 0.0],
            device=rt.device, dtype=torch.float64,
        )
        dist.all_reduce(flags)  # only rank 0 contributes early_stop, the scale and the time
        plateau.scale, elapsed = float(flags[2]), float(flags[3])
        early_stop = bool(flags[0])
        if flags[1] > 0:
            signal_name = signal_name or "signal to another process"
    if signal_name is not None:
        return signal_name, elapsed
    return ("early stopping" if early_stop else None), elapsed
