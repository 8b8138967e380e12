"""bf16 training on a CPU without autocast's per-op casts (seq2seq/training/bf16.py), and the
two ops that take another path in bf16 there: attention computed explicitly and dropout from
an fp32 mask. Each body runs on the CPU, and on CUDA where there is one (conftest.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from seq2seq.models.bahdanau import Bahdanau
from seq2seq.models.layers import Dropout, dropout
from seq2seq.models.transformer import Transformer
from seq2seq.models.transformer_layers import MultiHeadAttention
from seq2seq.training.bf16 import BF16Compute, computes_in_bf16
from seq2seq.training.loss import token_losses

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def tiny_transformer(device: str) -> Transformer:
    torch.manual_seed(0)
    return Transformer(src_vocab_size=40, tgt_vocab_size=40, d_model=32, num_heads=4,
                       num_encoder_layers=2, num_decoder_layers=2, ff_dim=64, dropout=0.0,
                       attn_dropout=0.0).to(device)


def batch(device: str, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (3, 9), generator=g)
    src[1, 6:] = 0
    tgt = torch.randint(4, 40, (3, 8), generator=g)
    return tuple(t.to(device) for t in (src, src != 0, tgt[:, :-1], tgt[:, 1:]))


def loss_of(model: torch.nn.Module, device: str, seed: int) -> torch.Tensor:
    src, mask, tgt_in, tgt_out = batch(device, seed)
    logits, _ = model(src, mask, tgt_in, need_attn=False)
    return token_losses(logits, tgt_out, 0)[0]


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_compute_runs_in_bf16_and_its_gradients_reach_the_fp32_weights(device: str) -> None:
    model = tiny_transformer(device)
    reference = copy.deepcopy(model).to(torch.bfloat16)  # the same model, all in bf16
    wrapped = BF16Compute(model)
    assert list(wrapped.parameters()) == list(model.parameters())  # the optimizer's weights
    src, mask, tgt_in, _ = batch(device, 0)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):  # off inside the wrapper
        logits, _ = wrapped(src, mask, tgt_in, need_attn=False)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits, reference(src, mask, tgt_in, need_attn=False)[0])

    loss_of(wrapped, device, 0).backward()
    loss_of(reference, device, 0).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad, q.grad.float(), msg=name)
    # the tied embedding and output layer stay one weight with one gradient
    assert model.generator.weight is model.tgt_emb.weight


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_compute_sums_micro_batch_gradients_in_fp32(device: str) -> None:
    model = tiny_transformer(device)
    wrapped = BF16Compute(model)
    grads = []
    for seed in (0, 1):
        loss_of(wrapped, device, seed).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad()
    loss_of(wrapped, device, 0).backward()
    loss_of(wrapped, device, 1).backward()  # accumulates into the fp32 .grad
    for p, g0, g1 in zip(model.parameters(), *grads, strict=True):
        torch.testing.assert_close(p.grad, g0 + g1, rtol=1e-6, atol=1e-7)


def test_only_the_transformer_on_a_cpu_in_bf16_computes_in_bf16() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    transformer = tiny_transformer("cpu")
    rnn = Bahdanau(src_vocab_size=40, tgt_vocab_size=40, emb_dim=16, hidden_size=16, attn_dim=16)
    assert computes_in_bf16(transformer, "bf16", cpu)
    assert not computes_in_bf16(transformer, "fp32", cpu)
    assert not computes_in_bf16(transformer, "bf16", cuda)  # autocast there
    assert not computes_in_bf16(rnn, "bf16", cpu)  # nn.GRU keeps its own flat weights


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_attention_and_its_gradient_agree_with_the_fused_kernel(
    device: str, causal: bool
) -> None:
    """In bf16 on a CPU `attend` computes the weights explicitly; the outputs and gradients
    are those of F.scaled_dot_product_attention (in fp32 on the same bf16 inputs)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=64, num_heads=4, attn_dropout=0.0).to(device)
    mha = mha.to(torch.bfloat16)
    x = torch.randn(3, 7, 64, device=device, dtype=torch.bfloat16)
    memory = x if causal else torch.randn(3, 9, 64, device=device, dtype=torch.bfloat16)
    lengths = torch.tensor([9, 5, 1], device=device)
    mask = None if causal else (torch.arange(9, device=device) < lengths[:, None])[:, None, None]
    keys, values = mha.project_kv(memory)
    keys, values = (t.detach().requires_grad_() for t in (keys, values))
    out, weights = mha.attend(x, keys, values, mask, need_weights=False, causal=causal)
    assert weights is None and out.dtype == torch.bfloat16
    out.float().square().sum().backward()

    k32, v32 = (t.detach().float().requires_grad_() for t in (keys, values))
    q32 = mha._split(mha.w_q(x)).detach().float()
    ref = F.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask, is_causal=causal)
    ref = mha.w_o.float()(ref.transpose(1, 2).reshape(3, 7, 64))
    ref.square().sum().backward()
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)
    for fast, exact in ((keys, k32), (values, v32)):
        torch.testing.assert_close(fast.grad.float(), exact.grad, atol=0.1, rtol=5e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_dropout_drops_p_and_scales_the_rest_and_its_gradient(
    device: str, dtype: torch.dtype
) -> None:
    x = torch.rand(400, 500, device=device, dtype=dtype).add_(0.5).requires_grad_()
    y = dropout(x, 0.2, training=True)
    assert y.dtype == dtype
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 0.2) < 0.005  # 200,000 draws
    torch.testing.assert_close(y[kept], (x[kept].float() / 0.8).to(dtype))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (kept.float() / 0.8).to(dtype))
    assert dropout(x, 0.2, training=False) is x
    assert torch.equal(dropout(x, 0.0, training=True), x)
    assert not dropout(x, 1.0, training=True).any()
    module = Dropout(0.2).eval()
    assert module(x) is x and module.state_dict() == {}
