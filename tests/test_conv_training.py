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


def _compare_one_step(model, x, backend=None, **tolerances):
    """One SGD step in eager and one compiled, from the same weights; returns the compiled session."""
    eager_model, ours_model = model, copy.deepcopy(model)
    x_eager, x_ours = (x.detach().clone().requires_grad_(x.requires_grad) for _ in range(2))
    expected, expected_grads = _eager_step(eager_model, x_eager)
    compiled = cc.compile(ours_model, **({"backend": backend} if backend else {}))
    opt = torch.optim.SGD(ours_model.parameters(), lr=0.1)
    actual = compiled(x_ours)
    actual.square().mean().backward()
    torch.testing.assert_close(actual, expected, **tolerances)
    assert set(expected_grads) == {n for n, p in ours_model.named_parameters() if p.grad is not None}
    for name, p in ours_model.named_parameters():
        torch.testing.assert_close(p.grad, expected_grads[name], msg=f"gradient of {name}", **tolerances)
    if x.requires_grad:
        assert x_ours.grad is not None
        torch.testing.assert_close(x_ours.grad, x_eager.grad, **tolerances)
    opt.step()
    for (name, a), b in zip(ours_model.state_dict().items(), eager_model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=f"{name} after the step", **tolerances)  # weights and BN running stats
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


# Batch norm's and max-pool's backward used to run in PyTorch: every BN layer of a training ResNet
# was an extern call (53 in ResNet-50). Both are ours now (decomp/table.py, decomp/pooling.py); the
# pool has overlapping 3x3 stride-2 windows with padding, so an input position can be the maximum of
# up to four windows and its gradient sums them; ties (the ReLU's zeros) test the first-index rule.
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_batchnorm_and_max_pool_backward_are_compiled_and_match(backend):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(3, stride=2, padding=1), nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8),
                          nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True), nn.Flatten(), nn.Linear(8 * 5 * 5, 5))
    s = _compare_one_step(model, torch.randn(3, 3, 17, 17).requires_grad_(), backend=backend)
    assert s.stats["fallback_graphs"] == 0, s.messages
    assert s.stats["fallback_ops"] == [], s.stats["fallback_ops"]
    backward_kernels = [src.name for src in s.graphs[0].backward.kernels]
    assert backward_kernels, "the backward graph made no kernel of ours"


def test_frozen_batchnorm_backward_in_eval_mode():
    # Fine-tuning with BN in eval mode: the backward uses the running statistics, not the batch's.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.Tanh())
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    model.eval()
    s = _compare_one_step(model, torch.randn(2, 2, 6, 6).requires_grad_())
    assert s.stats["fallback_ops"] == [], s.stats["fallback_ops"]


@pytest.mark.parametrize("dims", [1, 3])
def test_max_pool_backward_in_one_and_three_dimensions(dims):
    torch.manual_seed(0)
    pool = {1: nn.MaxPool1d(3, stride=2, padding=1, dilation=2), 3: nn.MaxPool3d(3, stride=2, padding=1)}[dims]
    x = torch.randn(2, 3, *([9] * dims), requires_grad=True)
    expected_grad, = torch.autograd.grad(pool(x).square().sum(), x)
    compiled = cc.compile(pool)
    actual_grad, = torch.autograd.grad(compiled(x).square().sum(), x)
    torch.testing.assert_close(actual_grad, expected_grad)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]


def test_bf16_batchnorm_max_pool_training_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(3, stride=2, padding=1)).to(torch.bfloat16)
    s = _compare_one_step(model, torch.randn(2, 3, 12, 12, dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    assert s.stats["fallback_ops"] == [], s.stats["fallback_ops"]


@pytest.mark.parametrize("pool", [
    pytest.param(nn.AvgPool2d(3, stride=2, padding=1), id="avg2d_padded_overlapping"),
    pytest.param(nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), id="avg2d_ceil_no_pad"),
    pytest.param(nn.AvgPool2d(2, divisor_override=3), id="avg2d_divisor_override"),
    pytest.param(nn.AvgPool3d(2, stride=1, padding=1), id="avg3d"),
    pytest.param(nn.AvgPool1d(4, stride=3, padding=2, ceil_mode=True), id="avg1d_ceil"),
])
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_avg_pool_forward_and_backward_are_ours(pool, backend):
    torch.manual_seed(0)
    spatial = {nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}[type(pool)]
    x = torch.randn(2, 3, *([7] * spatial), requires_grad=True)
    probe = torch.randn_like(pool(x))
    expected_out = pool(x)
    expected_grad, = torch.autograd.grad((expected_out * probe).sum(), x)
    compiled = cc.compile(pool, backend=backend)
    out = compiled(x)
    grad, = torch.autograd.grad((out * probe).sum(), x)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(grad, expected_grad)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_adaptive_max_pool_values_and_indices(backend):
    # windows of unequal length (7 -> 3: [0,3), [2,5), [4,7)); a tie inside a window keeps the first
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 10)
    x[0, 0, 2, 0] = x[0, 0, 1, 0] = 9.0

    def pool(x):
        return nn.functional.adaptive_max_pool2d(x, (3, 4), return_indices=True)

    compiled = cc.compile(pool, backend=backend)
    (values, indices), (expected_values, expected_indices) = compiled(x), pool(x)
    assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_adaptive_avg_pool3d_averages_windows_of_unequal_length(backend):
    # 7 -> 3 windows [0,3), [2,5), [4,7); 5 -> 2: [0,3), [2,5); 4 -> 4: single elements; a 4-d input too
    torch.manual_seed(0)
    for x in (torch.randn(2, 3, 7, 5, 4), torch.randn(3, 7, 5, 4)):
        compiled = cc.compile(lambda x: nn.functional.adaptive_avg_pool3d(x, (3, 2, 4)), backend=backend)
        expected = nn.functional.adaptive_avg_pool3d(x, (3, 2, 4))
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        assert torch.allclose(got[..., 0, 0, 0], x[..., 0:3, 0:3, 0].mean((-2, -1)))
        assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_antialiased_bilinear_resize_is_ours(backend):
    """Shrinking (the filter widened by the scale), enlarging, both at once, align_corners, a scale
    factor, and a size kept: each output is a normalised triangle-weighted window of inputs."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 13)
    cases = [dict(size=(4, 5)), dict(size=(20, 7)), dict(size=(3, 3), align_corners=True),
             dict(scale_factor=(0.4, 0.7)), dict(size=(9, 6))]
    for kwargs in cases:
        def resize(t, kwargs=kwargs):
            return nn.functional.interpolate(t, mode="bilinear", antialias=True, **kwargs)

        compiled = cc.compile(resize, backend=backend)
        torch.testing.assert_close(compiled(x), resize(x), rtol=1e-5, atol=1e-5)
        assert compiled.session.stats["fallback_ops"] == [], (kwargs, compiled.session.stats["fallback_ops"])


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_grid_sample_3d_reads_like_eager(backend):
    """Trilinear and nearest, each padding mode, both corner conventions (the OpInfo sweep runs every
    combination); points outside the volume, on its edge and a NaN point."""
    torch.manual_seed(0)
    volume, grid = torch.randn(2, 3, 5, 6, 7), torch.rand(2, 4, 3, 5, 3) * 2.6 - 1.3
    grid[0, 0, 0, 0] = torch.tensor([1.0, -1.0, 0.0])
    grid[0, 0, 0, 1] = float("nan")
    for mode, padding, corners in [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                   ("nearest", "border", False)]:
        def sample(v, g, mode=mode, padding=padding, corners=corners):
            return nn.functional.grid_sample(v, g, mode=mode, padding_mode=padding, align_corners=corners)

        compiled = cc.compile(sample, backend=backend)
        torch.testing.assert_close(compiled(volume, grid), sample(volume, grid), equal_nan=True)
        assert compiled.session.stats["fallback_ops"] == [], (mode, padding, compiled.session.stats)
