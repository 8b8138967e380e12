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
