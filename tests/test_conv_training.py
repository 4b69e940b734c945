"""Training through compiled modules: one step (forward, backward, optimizer) matches eager, and
the backward graph compiles rather than running in eager PyTorch."""

import copy

import pytest
import torch
import torch.nn as nn

import compiler_core as cc

# aten.convolution_backward returns None for each gradient its output_mask turns off (no bias, or an
# input that needs no gradient): the extern call must accept those (it once refused them, and the
# whole backward graph ran in eager).


def _eager_step(model, x):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(x)
    out.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    return out, grads


def _compare_one_step(model, x):
    """One SGD step in eager and one compiled, from the same weights; returns the compiled session."""
    eager_model, ours_model = model, copy.deepcopy(model)
    x_eager, x_ours = (x.detach().clone().requires_grad_(x.requires_grad) for _ in range(2))
    expected, expected_grads = _eager_step(eager_model, x_eager)
    compiled = cc.compile(ours_model)
    opt = torch.optim.SGD(ours_model.parameters(), lr=0.1)
    actual = compiled(x_ours)
    actual.square().mean().backward()
    torch.testing.assert_close(actual, expected)
    assert set(expected_grads) == {n for n, p in ours_model.named_parameters() if p.grad is not None}
    for name, p in ours_model.named_parameters():
        torch.testing.assert_close(p.grad, expected_grads[name], msg=f"gradient of {name}")
    if x.requires_grad:
        assert x_ours.grad is not None
        torch.testing.assert_close(x_ours.grad, x_eager.grad)
    opt.step()
    for (name, a), b in zip(ours_model.state_dict().items(), eager_model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=f"{name} after the step")  # weights and BN running stats
    return compiled.session


def test_conv_batchnorm_relu_training_step_compiles_its_backward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, stride=2), nn.ReLU())
    s = _compare_one_step(model, torch.randn(2, 3, 10, 10))
    assert s.stats["fallback_graphs"] == 0, s.messages
    assert s.graphs[0].backward is not None and not s.graphs[0].backward.fell_back


@pytest.mark.parametrize("bias,input_grad", [
    pytest.param(False, True, id="no_bias"),  # output_mask (True, True, False)
    pytest.param(True, False, id="input_needs_no_grad"),  # (False, True, True)
    pytest.param(False, False, id="weight_grad_only"),  # (False, True, False)
    pytest.param(True, True, id="all_gradients"),  # (True, True, True): every result is a tensor
])
def test_conv_backward_with_output_mask(bias, input_grad):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=bias), nn.Tanh())
    s = _compare_one_step(model, torch.randn(2, 3, 7, 7).requires_grad_(input_grad))
    assert s.stats["fallback_graphs"] == 0, s.messages
