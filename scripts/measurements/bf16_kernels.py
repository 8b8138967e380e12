"""Why bf16 on a CPU takes other paths (seq2seq/models/layers.py `bf16_on_cpu`): forward and
backward of torch's fused attention against matmul-softmax-matmul, and of F.dropout against a
mask from fp32 uniforms, in fp32 and bf16, one thread, medians of 7 (ms).

    python scripts/measurements/bf16_kernels.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from seq2seq.models.attention import masked_softmax  # noqa: E402
from seq2seq.models.layers import dropout  # noqa: E402


def median_ms(step: Callable[[], None], repeats: int = 7) -> float:
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def forward_backward(x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
    def step() -> None:
        x.grad = None
        f(x).float().sum().backward()
    return step


def main() -> None:
    torch.set_num_threads(1)
    mask = torch.ones(64, 1, 1, 32, dtype=torch.bool)
    mask[:8, ..., 24:] = False  # some padding, as in a batch

    def fused(q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    def explicit(q: torch.Tensor) -> torch.Tensor:
        return masked_softmax(q @ q.transpose(-2, -1) / 8.0, mask) @ q

    print("| op (forward and backward) | fp32 ms | bf16 ms |")
    print("|---|---|---|")
    cases = [("fused attention, B 64 H 4 T 32 K 64", (64, 4, 32, 64), fused),
             ("explicit attention, same", (64, 4, 32, 64), explicit),
             ("F.dropout 0.2, 2048 x 1024", (2048, 1024), lambda x: F.dropout(x, 0.2, True)),
             ("layers.dropout 0.2, same", (2048, 1024), lambda x: dropout(x, 0.2, True))]
    for label, shape, f in cases:
        cells = []
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(shape, dtype=dtype, requires_grad=True)
            cells.append(f"{median_ms(forward_backward(x, f)):.1f}")
        print(f"| {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
