"""The loss and the learning-rate schedules, against their definitions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seq2seq.training.loss import token_losses
from seq2seq.training.optim import Plateau, learning_rate
from seq2seq.training.stopping import Budget


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
    # leaf logits keep their values: a second backward gives the same gradient again
    logits.grad = None
    loss, _ = token_losses(logits, target, pad_id=0, label_smoothing=eps)
    loss.backward(retain_graph=True)
    loss.backward()
    torch.testing.assert_close(logits.grad, 2 * ours / weight)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["fp64", "bf16"])
def test_loss_over_many_row_blocks_of_an_output_layer(eps: float, dtype: torch.dtype) -> None:
    """Logits of an output layer (an intermediate, as in training) larger than one block:
    the sums and the gradients of the layer are autograd's through torch's cross_entropy; the
    backward overwrites the logits with their gradient, so a second one is refused."""
    from seq2seq.training import loss as loss_module

    torch.manual_seed(0)
    vocab = 3001
    rows = 3 * (loss_module.BLOCK_ELEMENTS // vocab) + 7  # three full blocks and a part
    hidden = torch.randn(rows, 16, dtype=dtype, requires_grad=True)
    weight = torch.randn(16, vocab, dtype=dtype, requires_grad=True)
    target = torch.randint(1, vocab, (rows,))
    target[::5] = 0
    logits = hidden @ weight
    loss, nll = token_losses(logits, target, pad_id=0, label_smoothing=eps)
    loss.backward(retain_graph=True)
    ours = hidden.grad, weight.grad
    hidden.grad = weight.grad = None
    wide = (hidden.double() @ weight.double()) if dtype == torch.bfloat16 else hidden @ weight
    args = dict(input=wide, target=target, ignore_index=0, reduction="sum")
    reference = F.cross_entropy(**args, label_smoothing=eps)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float64 else dict(rtol=2e-2, atol=0.5)
    torch.testing.assert_close(loss.double(), reference, **tol)
    torch.testing.assert_close(nll.double(), F.cross_entropy(**args), **tol)
    reference.backward()
    for mine, exact in zip(ours, (hidden.grad, weight.grad), strict=True):
        torch.testing.assert_close(mine.double(), exact.double(), **tol)
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


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["fp64", "bf16"])
def test_output_layer_and_loss_in_one_equal_autograd_of_cross_entropy(
    eps: float, bias: bool, dtype: torch.dtype
) -> None:
    """linear_token_losses over three blocks of rows and a part: its sums and the gradients
    of the features, the weight and the bias are those of torch's cross_entropy over
    features @ weight.T + bias; bf16 features take fp32 weights (the master copy) and return
    their gradients in fp32; the NLL has no gradient of its own."""
    from seq2seq.training import loss as loss_module

    torch.manual_seed(0)
    vocab, width = 3001, 16
    rows = 3 * (loss_module.LINEAR_BLOCK_ELEMENTS // vocab) + 7
    master = torch.float64 if dtype == torch.float64 else torch.float32
    features = torch.randn(rows, width, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, width, dtype=master).mul_(0.3).requires_grad_()
    b = torch.randn(vocab, dtype=master, requires_grad=True) if bias else None
    target = torch.randint(1, vocab, (rows,))
    target[::5] = 0
    scale = 0.37  # the loop scales the loss by 1 / tokens
    loss, nll = loss_module.linear_token_losses(features, weight, b, target, 0, eps)
    assert loss.dtype == master and not nll.requires_grad
    (loss * scale).backward()
    ours = [features.grad, weight.grad] + ([b.grad] if bias else [])
    assert [g.dtype for g in ours] == [dtype, master] + ([master] if bias else [])
    leaves = [t.detach().double().requires_grad_() for t in (features, weight)]
    leaves += [b.detach().double().requires_grad_()] if bias else []
    logits = leaves[0] @ leaves[1].t() + (leaves[2] if bias else 0.0)
    args = dict(input=logits, target=target, ignore_index=0, reduction="sum")
    reference = F.cross_entropy(**args, label_smoothing=eps)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float64 else dict(rtol=2e-2, atol=1.0)
    torch.testing.assert_close(loss.double(), reference, **tol)
    torch.testing.assert_close(nll.double(), F.cross_entropy(**args), **tol)
    (reference * scale).backward()
    for mine, leaf in zip(ours, leaves, strict=True):
        exact = leaf.grad
        if dtype == torch.bfloat16:  # bf16 products: compare relative to the gradient's size
            assert (mine.double() - exact).norm() < 2e-2 * exact.norm()
        else:
            torch.testing.assert_close(mine, exact, rtol=1e-6, atol=1e-6)
    assert features.grad[::5].abs().max() == 0.0  # padding rows: no gradient
    with torch.no_grad():  # no gradient wanted: the same sums
        again, _ = loss_module.linear_token_losses(features, weight, b, target, 0, eps)
    torch.testing.assert_close(again, loss.detach())


def test_inverse_sqrt_warms_up_then_decays() -> None:
    lr = [learning_rate(s, "inverse_sqrt", 1e-3, warmup_steps=100) for s in (1, 50, 100, 400)]
    assert lr[0] == pytest.approx(1e-5)
    assert lr[1] == pytest.approx(5e-4)
    assert lr[2] == pytest.approx(1e-3)
    assert lr[3] == pytest.approx(1e-3 * math.sqrt(100 / 400))


def test_linear_warms_up_then_falls_to_zero_where_the_budget_ends() -> None:
    lr = [learning_rate(step, "linear", 1e-3, warmup_steps=100, spent=spent)
          for step, spent in ((50, 0.05), (100, 0.1), (500, 0.5), (999, 0.999), (1000, 1.0))]
    assert lr == pytest.approx([5e-4 * 0.95, 9e-4, 5e-4, 1e-6, 0.0])


def test_wsd_holds_the_peak_then_falls_to_zero_over_the_last_share() -> None:
    lr = [learning_rate(step, "wsd", 1e-3, warmup_steps=100, spent=spent, cooldown=0.2)
          for step, spent in ((50, 0.05), (100, 0.1), (700, 0.7), (800, 0.8), (900, 0.9),
                              (1000, 1.0))]
    assert lr == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3, 5e-4, 0.0])
    assert learning_rate(900, "wsd", 1e-3, spent=0.9, cooldown=0.0) == 1e-3  # no cooldown


def test_the_budget_spent_is_the_larger_share_of_steps_and_time() -> None:
    budget = Budget(max_steps=1000, max_time=3600)
    assert budget.spent(100, 1800) == 0.5  # time is the binding budget
    assert budget.spent(900, 1800) == 0.9  # steps are
    assert budget.spent(1000, 7200) == 1.0  # never more than all of it
    assert Budget(max_epochs=3).spent(10, 10.0) == 0.0  # neither: nothing to decay over


def test_plateau_halves_after_patience_evaluations_without_a_new_best() -> None:
    plateau = Plateau(factor=0.5, patience=2)
    assert [plateau.update(b) for b in (1.0, 2.0, 1.5, 1.9, 2.5, 2.4, 2.4)] == [
        False, False, False, True, False, False, True]
    assert plateau.scale == 0.25
    assert learning_rate(10, "plateau", 1e-3, scale=plateau.scale) == pytest.approx(2.5e-4)
    restored = Plateau()
    restored.load_state_dict(plateau.state_dict())
    assert restored == plateau
