"""Ops that ran in eager PyTorch in real models beyond the zoo (a sweep of 23 transformers architectures,
2026-12-02): a bilinear upsample's backward (SegFormer, MobileViT), weight norm (wav2vec2, HuBERT), group
norm's backward (HuBERT) and 2-d cross-entropy (SegFormer). Each now runs in our kernels: no fallback op,
and the output and every gradient match eager's."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield


def _train_matches(fn, inputs, params, backend):
    """Loss and gradients of fn compiled against eager; returns the session."""
    def step(f):
        for t in (*inputs, *params):
            t.grad = None
        out = f(*inputs)
        loss = out if out.dim() == 0 else (out.float() * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
        loss.backward()
        return [loss.detach()] + [t.grad.clone() for t in (*inputs, *params) if t.grad is not None]

    expected = step(fn)
    compiled = cc.compile(fn, backend=backend)
    got = step(compiled)
    assert len(got) == len(expected) > 1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    return compiled.session


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_upsample_backward_scatters_into_trailing_dims(backend, align_corners):
    x = torch.randn(2, 3, 5, 7, requires_grad=True)
    session = _train_matches(lambda t: F.interpolate(t, size=(9, 12), mode="bilinear", align_corners=align_corners),
                             [x], [], backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_weight_norm_forward_and_backward(backend):
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 6, 3, padding=1), dim=2)  # wav2vec2's choice
    x = torch.randn(2, 4, 10, requires_grad=True)
    session = _train_matches(conv, [x], list(conv.parameters()), backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_norm_backward(backend):
    gn = nn.GroupNorm(2, 6)
    x = torch.randn(3, 6, 10, requires_grad=True)
    session = _train_matches(gn, [x], list(gn.parameters()), backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_over_image_logits(backend, reduction):
    logits = torch.randn(2, 5, 4, 3, requires_grad=True)
    target = torch.randint(0, 5, (2, 4, 3))
    target[0, 0, 0] = target[1, 2, 1] = -100  # ignored pixels
    weight = torch.rand(5) + 0.5
    session = _train_matches(lambda t: F.cross_entropy(t, target, weight=weight, reduction=reduction),
                             [logits], [], backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("args", [dict(kernel_size=3, padding=1),
                                  dict(kernel_size=(2, 3), stride=(2, 1), dilation=(1, 2), padding=(1, 0))],
                         ids=["3x3", "strided_dilated"])
def test_fold_and_unfolds_backward_are_ours(backend, args):
    # F.fold is col2im, which is also F.unfold's backward: found in eager by a sweep of user snippets
    # (2026-12-04); now torch's reference onto index_put with accumulate, our scatter family.
    x = torch.randn(2, 3, 9, 8, requires_grad=True)
    session = _train_matches(lambda t: F.fold(F.unfold(t, **args) * 1.5, t.shape[-2:], **args).relu(), [x], [],
                             backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("periodic", [True, False])
def test_hann_window_is_ours(backend, periodic):
    # An audio front end's window (STFT framing), in eager before (no lowering for hann_window).
    def frames(x):
        return (x.unfold(-1, 16, 8) * torch.hann_window(16, periodic=periodic)).sum(-1)

    x = torch.randn(2, 64)
    compiled = cc.compile(frames, backend=backend)
    torch.testing.assert_close(compiled(x), frames(x), rtol=1e-5, atol=1e-6)
    assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["fallback_graphs"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_norm_and_foreach_norm_train_through_our_kernels(backend):
    # Both ran in PyTorch before (found by the same snippet sweep): instance norm's
    # _native_batch_norm_legit.no_stats, and _foreach_norm, which clip_grad_norm_ calls on the gradients.
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    w, b = (torch.rand(4) + 0.5).requires_grad_(), torch.randn(4, requires_grad=True)
    session = _train_matches(lambda t, w, b: F.instance_norm(t, weight=w, bias=b), [x, w, b], [], backend)
    assert session.stats["fallback_ops"] == []
    torch._dynamo.reset()
    a, c = torch.randn(10, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    session = _train_matches(lambda a, c: torch.stack(torch._foreach_norm([a, c])).norm()
                             + torch._foreach_norm([a, c], 1.0)[1], [a, c], [], backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["mse", "smooth_l1", "huber", "unfold_frames"])
def test_regression_losses_and_unfold_train_through_our_kernels(backend, loss):
    # Their backwards (mse_loss_backward, smooth_l1/huber_loss_backward, unfold_backward) ran in PyTorch:
    # a diffusion model's MSE loss left its gradient to eager. Torch's references, pointwise and a scatter.
    fn = {"mse": lambda a, b: F.mse_loss(a, b) + F.mse_loss(a, b, reduction="none").mean(1).sum(),
          "smooth_l1": lambda a, b: F.smooth_l1_loss(a, b, beta=0.3) + F.smooth_l1_loss(a, b, beta=0.0,
                                                                                          reduction="sum"),
          "huber": lambda a, b: F.huber_loss(a, b, delta=0.5, reduction="none").sum(),
          "unfold_frames": lambda a, b: (a.unfold(-1, 3, 2) * b[:, :3].unsqueeze(1)).sum()
          + a.unfold(0, 2, 1).square().sum()}[loss]
    a, b = torch.randn(5, 9, requires_grad=True), torch.randn(5, 9, requires_grad=True)
    session = _train_matches(fn, [a, b], [], backend)
    assert session.stats["fallback_ops"] == []


ACTIVATIONS_AND_LOSSES = {
    "elu": lambda x, y: F.elu(x, 0.7), "leaky_relu": lambda x, y: F.leaky_relu(x, 0.1),
    "relu6": lambda x, y: F.relu6(x * 4), "hardtanh": lambda x, y: F.hardtanh(x, -0.5, 0.8),
    "hardswish": lambda x, y: F.hardswish(x * 4), "hardsigmoid": lambda x, y: F.hardsigmoid(x * 4),
    "softplus": lambda x, y: F.softplus(x, beta=2, threshold=1), "mish": lambda x, y: F.mish(x),
    "logsigmoid": lambda x, y: F.logsigmoid(x), "glu": lambda x, y: F.glu(x, -1),
    "logit": lambda x, y: torch.logit(y.sigmoid(), eps=0.01), "prelu": lambda x, y: F.prelu(x, torch.tensor([0.2])),
    "bce": lambda x, y: F.binary_cross_entropy(x.sigmoid(), y.detach().sigmoid()),
    "soft_margin": lambda x, y: F.soft_margin_loss(x, y.detach().sign()),
    "diagonal": lambda x, y: torch.diagonal(x[:, :6], 1).exp(),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ACTIVATIONS_AND_LOSSES))
def test_activation_and_loss_backwards_are_ours(backend, name):
    # Their autograd formulas are ATen ops of their own (elu_backward, hardtanh_backward...), which ran in
    # PyTorch in every training step that used them (found by the snippet sweep, 2026-12-04).
    x, y = torch.randn(6, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    session = _train_matches(ACTIVATIONS_AND_LOSSES[name], [x, y], [], backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 9), (2, 3)), ((2, 3, 6, 8), (2, 1, 0, 3)),
                                       ((1, 2, 4, 5, 6), (1, 2, 2, 0, 1, 1)), ((3, 6, 8), (3, 0, 1, 2))],
                         ids=["1d", "2d", "3d", "unbatched"])
def test_padding_backwards_are_ours(backend, mode, shape, pad):
    # ReflectionPad2d / ReplicationPad2d in image generators: their backwards ran in PyTorch.
    x = torch.randn(*shape, requires_grad=True)
    session = _train_matches(lambda t: F.pad(t, pad, mode=mode).sin(), [x], [], backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_grid_sample_trains_through_our_kernels(backend, align_corners):
    # grid_sampler_2d_backward (spatial transformers, deformable attention, flow warping) ran in PyTorch:
    # now a scatter-add into the input's four corners and the weights' derivatives for the grid. Points
    # outside the image (zero padding) included.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, generator=gen).requires_grad_()
    grid = (torch.rand(2, 4, 7, 2, generator=gen) * 2.4 - 1.2).requires_grad_()
    session = _train_matches(lambda a, g: F.grid_sample(a, g, align_corners=align_corners).sin(), [x, grid], [],
                             backend)
    assert session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_affine_grid_is_ours(backend):
    # A spatial transformer's sampling grid; the grid sample's own backward stays PyTorch's call.
    x, theta = torch.randn(2, 3, 5, 5), torch.randn(2, 2, 3)

    def warp(x, theta):
        return F.grid_sample(x, F.affine_grid(theta, (2, 3, 6, 6), align_corners=False), align_corners=False)

    compiled = cc.compile(warp, backend=backend)
    torch.testing.assert_close(compiled(x, theta), warp(x, theta), rtol=1e-4, atol=1e-5)
    assert compiled.session.stats["fallback_ops"] == []


@pytest.mark.parametrize("indices", ["trailing", "middle_and_gap"])
def test_index_put_on_later_dims_matches_eager(indices):
    """Adjacent index tensors after unindexed dims are ours; a gap between indexed dims (whose result
    dims move to the front) stays PyTorch's call. Both give eager's values."""
    base = torch.randn(2, 3, 4, 5)
    if indices == "trailing":
        index = [None, None, torch.tensor([0, 3, 3]), torch.tensor([1, 4, 1])]
        values = torch.randn(2, 3, 3)
    else:
        index = [None, torch.tensor([0, 2]), None, torch.tensor([1, 4])]
        values = torch.randn(2, 2, 4)

    def f(b, v):
        return torch.ops.aten.index_put(b, index, v, True)

    compiled = cc.compile(f, backend="cpp")
    torch.testing.assert_close(compiled(base, values), f(base, values))
    fallbacks = compiled.session.stats["fallback_ops"]
    assert fallbacks == ([] if indices == "trailing" else ["aten.index_put.default"]), fallbacks


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_same_ops_on_cuda(dtype):
    """Each case above on the GPU, in fp32 and bf16 (bf16 against eager's bf16, within bf16's rounding)."""
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(16, 32, 5, padding=2), dim=2).cuda().to(dtype)
    gn = nn.GroupNorm(4, 32).cuda().to(dtype)
    target = torch.randint(0, 8, (4, 16, 16), device="cuda")
    target[0, :3] = -100

    def f(x, logits):
        h = gn(conv(x))
        up = F.interpolate(h.unsqueeze(1), size=(48, 96), mode="bilinear", align_corners=False)
        return up.float().square().mean() + F.cross_entropy(logits.float(), target)

    x = torch.randn(4, 16, 64, device="cuda", dtype=dtype, requires_grad=True)
    logits = torch.randn(4, 8, 16, 16, device="cuda", dtype=dtype, requires_grad=True)
    params = [x, logits, *conv.parameters(), *gn.parameters()]

    def step(fn):
        for p in params:
            p.grad = None
        loss = fn(x, logits)
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in params]

    expected = step(f)
    compiled = cc.compile(f)
    for got, want in zip(step(compiled), expected, strict=True):
        torch.testing.assert_close(got, want, **tol)
    assert compiled.session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_gptj_rotary_without_a_mask_matches_eager(backend):
    """GPT-J's rotary kernel (queries and keys in one horizontal kernel) gave wrong queries on the C++
    backend: GCC 12.2's induction-variable optimisation shifted a masked load of cos by 2 * head under
    512-bit `omp simd` (max error 0.2 in the logits, varying by process). cpp_build.py builds with
    -fno-ivopts since. Found by `python -m tests.models --only beyond` (the no-mask path)."""
    from tests.models.beyond import BEYOND

    case = BEYOND["gptj"].build("small", "cpu", torch.float32, mask=False)
    with torch.no_grad():
        expected = case.model(**case.inputs).logits
        compiled = cc.compile(case.model, backend=backend)
        got = compiled(**case.inputs).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert compiled.session.stats["fallback_graphs"] == 0
