"""What training reports between validations: the loss and speed of every `every` updates,
and the updates dropped for a NaN/inf loss.

The loss, tokens and dropped updates add up on the device and are read once per interval, so
logging costs the GPU one synchronisation per interval, not one per update.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from seq2seq.checkpoint import Progress
from seq2seq.errors import UserError
from seq2seq.runtime import Runtime, all_reduce_sum


class TrainLog:
    """The training log of one run: a live bar on a terminal (elsewhere, as under
    `make train > log 2>&1`, one plain line per interval), and TensorBoard's train/ scalars.

    Args:
        rt: this process's runtime; rank 0 prints.
        writer: TensorBoard, or None (processes other than rank 0).
        every: updates per interval.
        max_bad_steps: dropped updates in a row that stop the run.
        max_steps: the step budget, the length of the bar; None: open-ended.
        max_time: the time budget in seconds, shown as the time left when there is no step
            budget (then it is a safety net); None: none.
        console: print progress at all (trainer.progress).
        clock: seconds from a fixed origin, for the speed; `time.monotonic` unless a test
            sets the time.
    """

    def __init__(
        self,
        rt: Runtime,
        writer: SummaryWriter | None,
        *,
        every: int,
        max_bad_steps: int,
        max_steps: int | None = None,
        max_time: float | None = None,
        console: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rt, self.writer, self.every = rt, writer, every
        self.max_bad_steps, self.max_steps, self.max_time = max_bad_steps, max_steps, max_time
        self.console = console and rt.is_main
        self.live = self.console and sys.stderr.isatty()
        zero = torch.zeros((), device=rt.device)
        self.nll, self.tokens, self.skipped, self.bad_run = (zero.clone() for _ in range(4))
        self.alignment_kl: Tensor | None = None  # guided alignment's summed KL, when on
        self.alignment_curve: list[list[float]] = []  # [step, KL per target token] per interval
        self.clock = clock
        self.since = clock()
        self.paused_for = 0.0  # seconds of the interval that were not training
        self.bar: tqdm | None = None

    def start(self, step: int) -> None:
        """Open the bar at `step` and start timing the first interval."""
        self.bar = tqdm(total=self.max_steps, initial=step, disable=not self.live,
                        dynamic_ncols=True, unit="step")
        self.restart_clock()

    def add(self, nll: Tensor, tokens: Tensor, skipped: Tensor,
            alignment_kl: Tensor | None = None) -> None:
        """Count one update (device tensors, as `Update` returns them; `alignment_kl`: guided
        alignment's, logged per target token as train/alignment_kl)."""
        if alignment_kl is not None:
            before = self.alignment_kl
            self.alignment_kl = alignment_kl.clone() if before is None else before + alignment_kl
        self.nll += nll
        self.tokens += tokens
        self.skipped += skipped
        self.bad_run = (self.bad_run + skipped) * skipped  # updates dropped in a row
        if self.bar is not None:
            self.bar.update(1)

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def restart_clock(self) -> None:
        """Time the interval from now."""
        self.since, self.paused_for = self.clock(), 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The time inside (a validation) is left out of the interval's training speed."""
        start = self.clock()
        try:
            yield
        finally:
            self.paused_for += self.clock() - start

    def write(self, progress: Progress, grad_norm: Tensor, lr: float, elapsed: float) -> None:
        """Report the interval that ends at `progress.step` and start the next one."""
        self.check_skipped(progress)
        kl = self.alignment_kl if self.alignment_kl is not None else torch.zeros_like(self.nll)
        totals = all_reduce_sum(torch.stack([self.nll, self.tokens, kl]), self.rt)
        loss = (totals[0] / totals[1].clamp(min=1)).item()
        seconds = self.clock() - self.since - self.paused_for
        tok_per_s = totals[1].item() / max(seconds, 1e-9)
        step = progress.step
        progress.losses.append([step, loss])
        figures = {"loss": f"{loss:.3f}", "tok_s": f"{tok_per_s:,.0f}", "lr": f"{lr:.2e}"}
        alignment_kl = None
        if self.alignment_kl is not None:
            alignment_kl = (totals[2] / totals[1].clamp(min=1)).item()
            figures["align_kl"] = f"{alignment_kl:.3f}"
            self.alignment_curve.append([progress.step, alignment_kl])
            self.alignment_kl.zero_()
        if self.max_time is not None and self.max_steps is None:  # else time is a safety net
            figures["left"] = f"{max(self.max_time - elapsed, 0):.0f}s"
        if self.live and self.bar is not None:
            self.bar.set_postfix(figures)
        elif self.console:
            of = "" if self.max_steps is None else f"/{self.max_steps}"
            print(f"step {step}{of}: " + " ".join(f"{k} {v}" for k, v in figures.items()),
                  flush=True)
        if self.writer is not None:
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/ppl", math.exp(min(loss, 50.0)), step)
            self.writer.add_scalar("train/lr", lr, step)
            self.writer.add_scalar("train/grad_norm", grad_norm.item(), step)
            self.writer.add_scalar("train/tokens_per_s", tok_per_s, step)
            if alignment_kl is not None:
                self.writer.add_scalar("train/alignment_kl", alignment_kl, step)
        for window in (self.nll, self.tokens, self.skipped):
            window.zero_()
        self.restart_clock()

    def check_skipped(self, progress: Progress) -> None:
        """Read how many updates of the interval were dropped for NaN/inf.

        Raises:
            UserError: `max_bad_steps` updates in a row were dropped.
        """
        n_skipped, progress.bad_steps = int(self.skipped.item()), int(self.bad_run.item())
        if n_skipped == 0:
            return
        progress.skipped_updates += n_skipped
        warnings.warn(f"step {progress.step}: {n_skipped} of the last {self.every} updates were "
                      "skipped: NaN/inf loss or gradient", stacklevel=1)
        if progress.bad_steps >= self.max_bad_steps:
            raise UserError(
                f"{progress.bad_steps} updates in a row had a NaN/inf loss; stopping. "
                "Lower trainer.lr, raise trainer.warmup_steps or use precision=fp32"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
