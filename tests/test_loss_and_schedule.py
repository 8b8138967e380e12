"""The loss and the learning-rate schedules, against their definitions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seq2seq.training.loss import token_losses
from seq2seq.training.optim import Plateau, learning_rate


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_equals_torch_cross_entropy_and_ignores_padding(eps: float) -> None:
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    loss, nll = token_losses(logits, target, pad_id=0, label_smoothing=eps)
    flat = dict(input=logits.flatten(0, 1), target=target.flatten(), ignore_index=0,
                reduction="sum")
    torch.testing.assert_close(loss, F.cross_entropy(**flat, label_smoothing=eps))
    torch.testing.assert_close(nll, F.cross_entropy(**flat))
    # the real tokens alone, as the loop passes them, give the same sums
    real = target != 0
    loss_real, _ = token_losses(logits[real], target[real], pad_id=0, label_smoothing=eps)
    torch.testing.assert_close(loss_real, loss)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_gradient_equals_autograd_of_torch_cross_entropy(eps: float) -> None:
    logits = torch.randn(7, 13, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 13, (7,))
    target[2] = 0  # a padding row: no loss, no gradient
    weight = 0.37  # the loop scales the loss by 1 / tokens
    (token_losses(logits, target, pad_id=0, label_smoothing=eps)[0] * weight).backward()
    ours = logits.grad
    logits.grad = None
    reference = F.cross_entropy(logits, target, ignore_index=0, reduction="sum",
                                label_smoothing=eps)
    (reference * weight).backward()
    torch.testing.assert_close(ours, logits.grad)
    assert ours[2].abs().max() == 0.0
    # the backward reuses its saved tensor in place: a second one is refused, not wrong
    loss, _ = token_losses(logits, target, pad_id=0, label_smoothing=eps)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="only once"):
        loss.backward()


def test_loss_of_bf16_logits_is_computed_in_fp32_with_a_bf16_gradient() -> None:
    logits = torch.randn(5, 9).to(torch.bfloat16).requires_grad_()
    target = torch.randint(1, 9, (5,))
    loss, _ = token_losses(logits, target, pad_id=0, label_smoothing=0.1)
    assert loss.dtype == torch.float32
    loss.backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16
    reference = F.cross_entropy(logits.detach().float(), target, reduction="sum",
                                label_smoothing=0.1)
    torch.testing.assert_close(loss, reference)


def test_inverse_sqrt_warms_up_then_decays() -> None:
    lr = [learning_rate(s, "inverse_sqrt", 1e-3, warmup_steps=100) for s in (1, 50, 100, 400)]
    assert lr[0] == pytest.approx(1e-5)
    assert lr[1] == pytest.approx(5e-4)
    assert lr[2] == pytest.approx(1e-3)
    assert lr[3] == pytest.approx(1e-3 * math.sqrt(100 / 400))


def test_plateau_halves_after_patience_evaluations_without_a_new_best() -> None:
    plateau = Plateau(factor=0.5, patience=2)
    assert [plateau.update(b) for b in (1.0, 2.0, 1.5, 1.9, 2.5, 2.4, 2.4)] == [
        False, False, False, True, False, False, True]
    assert plateau.scale == 0.25
    assert learning_rate(10, "plateau", 1e-3, scale=plateau.scale) == pytest.approx(2.5e-4)
    restored = Plateau()
    restored.load_state_dict(plateau.state_dict())
    assert restored == plateau
