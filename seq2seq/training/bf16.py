"""bf16 training on a CPU: the step computed with a bf16 copy of the weights.

`torch.autocast("cpu", torch.bfloat16)` casts each weight and activation where an op asks for
bf16 and keeps the rest of the graph in fp32: at the docs sizes on one thread of an AMX Xeon the
casts and the fp32 element-wise work eat the matrix units' gain (the Transformer 0.90x of fp32,
docs/benchmark.md). `BF16Compute` instead casts every floating parameter and buffer once per
forward pass and runs the whole model in bf16, so activations stay bf16 from block to block.
The cast is differentiable: the gradients reach the fp32 parameters (the master weights the
optimizer and its state keep), summed in fp32 across micro-batches. The output layer and the
loss (`linear_token_losses`) take the bf16 features and the fp32 output weight: bf16 products,
fp32 sums and an fp32 gradient for the weight.

The recurrent models keep autocast: `nn.GRU`/`nn.LSTM` run from a flat list of their weights
that swapping the module's parameters does not reach, and autocast is already faster than fp32
for them (docs/benchmark.md, 0f6782e: Luong 1.47x, vanilla 1.42x, Bahdanau 1.10x).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def computes_in_bf16(model: nn.Module, precision: str, device: torch.device) -> bool:
    """Whether training `model` wraps it in `BF16Compute`: bf16 on a CPU, no recurrent module."""
    recurrent = any(isinstance(m, nn.RNNBase) for m in model.modules())
    return precision == "bf16" and device.type == "cpu" and not recurrent


class BF16Compute(nn.Module):
    """Calls `model` with bf16 copies of its floating parameters and buffers.

    Its parameters are `model`'s own (fp32), so an optimizer, DDP or `torch.compile` over this
    module see the master weights; autocast is off inside, the model's ops run in bf16 as cast.
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.model, self.dtype = model, dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        device = next(self.model.parameters()).device
        with cast_tensors(self.model, self.dtype), torch.autocast(device.type, enabled=False):
            return self.model(*args, **kwargs)


@contextlib.contextmanager
def cast_tensors(model: nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """Inside, every floating parameter and buffer of `model` is a `dtype` copy of itself
    (differentiable: gradients flow to the originals); a tensor that several modules share
    (tied embeddings, a module registered twice) gets one copy. Restored on exit.

    torch.func.functional_call does not do here: with one embedding module registered as both
    `src_emb` and `tgt_emb` (torch 2.13) it leaves the copy in place.
    """
    copies: dict[int, torch.Tensor] = {}
    swapped: list[tuple[dict[str, Any], str, torch.Tensor]] = []
    try:
        for module in model.modules():  # each module once, however often it is registered
            for table in (module._parameters, module._buffers):
                for name, tensor in table.items():
                    if tensor is None or not tensor.is_floating_point():
                        continue
                    if id(tensor) not in copies:
                        copies[id(tensor)] = tensor.to(dtype)
                    swapped.append((table, name, tensor))
                    table[name] = copies[id(tensor)]
        yield
    finally:
        for table, name, tensor in reversed(swapped):
            table[name] = tensor
