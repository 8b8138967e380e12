"""One training update: forward and backward over its micro-batches, one optimizer step."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from seq2seq.data.batching import Batch
from seq2seq.runtime import Runtime, all_reduce_sum
from seq2seq.tokenization import PAD_ID
from seq2seq.training.ema import EMA
from seq2seq.training.guided import Guidance, alignment_loss
from seq2seq.training.loss import linear_token_losses


class Update:
    """Computes one update of `model` when called with its micro-batches.

    Args:
        model: the trained model (its parameters are clipped and stepped).
        step_model: what the forward pass calls: `model`, compiled and/or wrapped in DDP.
        optimizer: fused AdamW (`build_optimizer`).
        rt: this process's runtime (device, precision, processes).
        learning_rate: the rate of update number n (1-based) with a share s of the budget
            spent before it (`Budget.spent`).
        label_smoothing: epsilon of the smoothed loss.
        clip_norm: the gradient norm is clipped to this; 0: not clipped.
        scaler: fp16 loss scaling, or None.
        ema: the weight average to move after each update, or None.
        guidance: guided alignment's weight, reading and references, or None (off).
    """

    def __init__(
        self,
        model: nn.Module,
        step_model: nn.Module,
        optimizer: torch.optim.Optimizer,
        rt: Runtime,
        learning_rate: Callable[[int, float], float],
        *,
        label_smoothing: float = 0.0,
        clip_norm: float = 0.0,
        scaler: torch.amp.GradScaler | None = None,
        ema: EMA | None = None,
        guidance: Guidance | None = None,
    ) -> None:
        self.model, self.step_model, self.optimizer, self.rt = model, step_model, optimizer, rt
        self.learning_rate = learning_rate
        self.label_smoothing, self.clip_norm = label_smoothing, clip_norm
        self.scaler, self.ema = scaler, ema
        self.guidance = guidance
        # guided alignment's summed KL of the last update (a device tensor; 0 when off)
        self.alignment_kl: Tensor = torch.zeros(())
        self.generator: nn.Linear = model.generator  # type: ignore[assignment]  # the output layer

    def __call__(
        self, micro: list[Batch], number: int, spent: float = 0.0
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Forward/backward over the micro-batches and update number `number` (1-based), with
        a share `spent` of the training budget used before it.

        The loss is normalised by the target tokens of the whole update across micro-batches
        and processes, so N processes compute exactly the gradient of one process that sees
        all their batches. An update whose gradient is NaN/inf is dropped on the device by the
        fused AdamW kernel (`found_inf`), so nothing here waits for the GPU.

        Returns device tensors: (summed NLL, gradient norm, target tokens, skipped: 1.0 when
        the update was dropped); the NLL and tokens of a dropped update count as 0.
        """
        rt = self.rt
        local_tokens = sum(b.tgt_positions.numel() for b in micro)  # known on the host
        if rt.distributed:  # counted on the device, summed over processes
            counts = torch.stack([(b.tgt_out != PAD_ID).sum() for b in micro]).sum().float()
            total: Tensor | float = all_reduce_sum(counts, rt)
        else:
            total = float(local_tokens)
        scale = rt.world_size / total  # DDP averages gradients over processes
        nll_sum = torch.zeros((), device=rt.device)
        kl_sum = torch.zeros((), device=rt.device)
        guided = self.guidance
        reading: dict[str, object] = {}  # the attention's log; the Transformer's layer and head
        if guided is not None:
            reading = {"log_attn": True}
            if guided.layer is not None:
                reading |= {"attn_layer": guided.layer, "attn_head": guided.head}
        for i, batch in enumerate(micro):
            last = i == len(micro) - 1
            sync = contextlib.nullcontext()
            if rt.distributed and not last:
                sync = self.step_model.no_sync()  # type: ignore[operator]
            with sync:
                real = batch.tgt_positions  # (N,): no logits are computed for padding
                with rt.autocast():
                    features, attn = self.step_model(
                        batch.src, batch.src_mask, batch.tgt_in,
                        need_attn=guided is not None and guided.layer is None,
                        output_positions=real, project=False, **reading,
                    )  # (N, O): the output layer and the loss are one (linear_token_losses)
                target = batch.tgt_out.flatten().index_select(0, real)  # (N,)
                loss, nll = linear_token_losses(features, self.generator.weight,
                                                self.generator.bias, target, PAD_ID,
                                                self.label_smoothing)
                if guided is not None:
                    assert attn is not None
                    reference = batch.reference  # collated with the batch: no host sync here
                    if reference is None:
                        raise ValueError("a guided update needs each batch's reference "
                                         "attention, collated with it (Batches.collate)")
                    kl = alignment_loss(attn, reference.to(attn.device, non_blocking=True),
                                        batch.groups)
                    loss = loss + guided.weight * kl
                    kl_sum += kl.detach()
                loss = loss * scale
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()
            nll_sum += nll.detach()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.clip_norm if self.clip_norm > 0 else math.inf
        )
        skipped = (~torch.isfinite(grad_norm)).float()
        lr = self.learning_rate(number, spent)
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
            self.ema.update(number)
        keep = 1.0 - skipped
        self.alignment_kl = torch.nan_to_num(kl_sum) * keep  # as the NLL: a NaN spoils no log
        return torch.nan_to_num(nll_sum) * keep, grad_norm, keep * local_tokens, skipped
