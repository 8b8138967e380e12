"""The GPU paths, run on every device there is: bf16 training with the real Trainer, fused
AdamW, the Transformer's fused attention against the explicit formula. Each test body runs on
the CPU always (bf16 autocast and fused AdamW exist there too) and on CUDA when present, so the
code cannot rot on a machine without a GPU; only the `cuda` cases skip there (conftest.py)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from seq2seq.corpus import prepare_data
from seq2seq.models.transformer import Transformer
from seq2seq.models.transformer_layers import MultiHeadAttention
from seq2seq.runtime import setup_runtime
from seq2seq.training.bf16 import BF16Compute
from seq2seq.training.setup import TrainingParts, build_parts
from tests.tiny import tiny_config

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
VARIANTS = ["vanilla", "bahdanau", "luong", "transformer"]
# (dtype, absolute and relative tolerance): fp32 must agree to rounding; bf16 keeps 8 bits.
PRECISIONS = [(torch.float32, 1e-4), (torch.bfloat16, 5e-2)]


def tiny_trainer(tmp_path: Path, model: str, device: str) -> TrainingParts:
    """The real training parts on the tiny corpus of tests/tiny.py, in bf16, without dropout."""
    cfg = tiny_config(tmp_path, f"trainer.device={device}", "trainer.precision=bf16",
                      "model.dropout=0.0", "trainer.lr=1e-2", "trainer.warmup_steps=0",
                      "trainer.schedule=constant", model=model)
    t = cfg.trainer
    rt = setup_runtime(t.device, t.precision, t.threads, t.seed)
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    return build_parts(cfg, rt, data, Path(cfg.run_dir))


def bf16_losses(trainer: TrainingParts, steps: int = 20) -> list[float]:
    """Per-token NLL of `steps` updates on one fixed batch of 16 sentences."""
    batches = trainer.batches
    batch = batches.to_device(batches.collate(batches.train_split, list(range(16))))
    with trainer.rt.autocast():
        logits, _ = trainer.model(batch.src, batch.src_mask, batch.tgt_in, need_attn=False)
    assert logits.dtype == torch.bfloat16  # autocast really runs the forward in bf16
    losses = []
    for number in range(1, steps + 1):
        nll, grad_norm, tokens, skipped = trainer.update([batch], number)
        assert skipped.item() == 0 and tokens.item() == batch.num_tgt_tokens  # not NaN/inf
        assert torch.isfinite(grad_norm)
        losses.append(nll.item() / tokens.item())
    return losses


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """TF32 off (setup_runtime turns it on for training), so fp32 means fp32."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def autocast_to(dtype: torch.dtype, device: str) -> contextlib.AbstractContextManager:
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", VARIANTS)
def test_bf16_training_is_finite_and_learns(tmp_path: Path, model: str, device: str) -> None:
    trainer = tiny_trainer(tmp_path, model, device)
    assert trainer.rt.device.type == device and trainer.rt.precision == "bf16"
    assert trainer.update.scaler is None  # bf16 needs no loss scaling
    casts = isinstance(trainer.update.step_model, BF16Compute)  # bf16 weights, fp32 master
    assert casts == (device == "cpu" and model == "transformer")
    losses = bf16_losses(trainer)
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.75 * losses[0], losses


@pytest.mark.parametrize("device", DEVICES)
def test_trainer_uses_fused_adamw_on_the_device(tmp_path: Path, device: str) -> None:
    trainer = tiny_trainer(tmp_path, "transformer", device)
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    assert trainer.optimizer.defaults["fused"] is True
    params = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    assert params and all(p.device.type == device for p in params)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "tol"), PRECISIONS, ids=["fp32", "bf16"])
def test_sdpa_and_explicit_attention_agree(dtype: torch.dtype, tol: float, device: str) -> None:
    """MultiHeadAttention.attend: F.scaled_dot_product_attention == softmax(QK^T/sqrt(k)) V,
    with padding masks and with a causal mask."""
    mha = MultiHeadAttention(d_model=64, num_heads=4, attn_dropout=0.0).to(device).eval()
    x = torch.randn(3, 7, 64, device=device)  # (B, T, D)
    memory = torch.randn(3, 9, 64, device=device)  # (B, S, D)
    lengths = torch.tensor([9, 5, 1], device=device)
    padding = (torch.arange(9, device=device) < lengths[:, None])[:, None, None, :]  # (B,1,1,S)
    causal = torch.ones(7, 7, dtype=torch.bool, device=device).tril()  # (T, T)
    with exact_fp32(), torch.no_grad(), autocast_to(dtype, device):
        for source, mask in ((memory, padding), (x, causal)):
            keys, values = mha.project_kv(source)
            fast, no_weights = mha.attend(x, keys, values, mask, need_weights=False)
            slow, weights = mha.attend(x, keys, values, mask, need_weights=True)
            assert no_weights is None and weights is not None
            assert fast.dtype == slow.dtype == dtype
            torch.testing.assert_close(fast.float(), slow.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "tol"), PRECISIONS, ids=["fp32", "bf16"])
def test_transformer_logits_do_not_depend_on_the_attention_path(
    dtype: torch.dtype, tol: float, device: str
) -> None:
    """forward(need_attn=False) runs SDPA everywhere; need_attn=True computes the decoder's
    cross-attention explicitly: the logits agree."""
    model = Transformer(src_vocab_size=50, tgt_vocab_size=50, d_model=64, num_heads=4,
                        num_encoder_layers=2, num_decoder_layers=2, ff_dim=128).to(device).eval()
    src = torch.randint(4, 50, (3, 9), device=device)  # (B, S)
    src[1, 6:] = 0
    tgt_in = torch.randint(4, 50, (3, 7), device=device)  # (B, T)
    with exact_fp32(), torch.no_grad(), autocast_to(dtype, device):
        fast, no_attn = model(src, src != 0, tgt_in, need_attn=False)
        slow, attn = model(src, src != 0, tgt_in, need_attn=True)
    assert no_attn is None and attn is not None
    assert float(attn[1, :, 6:].abs().max()) == 0.0  # padding gets exactly zero weight
    torch.testing.assert_close(fast.float(), slow.float(), atol=tol * 4, rtol=tol)
