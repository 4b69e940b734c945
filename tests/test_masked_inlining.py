"""A producer inlined into a masked read (a pad, a pooling window's halo, a cat) is placed with the
mask's bounds (kernel_plan.invert_where_masked): its loads get affine indices, not floor divisions
with carries, and per-channel loads that are in bounds everywhere lose the mask and are read once.
Values must stay eager's, edges included."""

import re

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


def sources(compiled):
    return "\n".join(k.source for k in compiled.session.kernels)


def divisions_in_loads(source: str) -> list[str]:
    """C++ subscripts (`in_ptr0[...]`) holding a division or a modulo. (Triton's offsets always split
    the flat `xindex` into dimensions with // and %, so only the C++ source can show the carries.)"""
    subscripts = re.findall(r"in_ptr\d+\[([^\]]*)\]", source)
    assert subscripts, "no load found: the pattern no longer matches the C++ printer"
    return [i for i in subscripts if "/" in i or "%" in i]


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_relu_max_pool_reads_its_window_at_affine_positions(backend):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(6).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)

    def f(x):
        return F.max_pool2d(torch.relu(bn(x)), 3, 2, 1)

    x = torch.randn(2, 6, 13, 11)
    compiled = cc.compile(f, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), f(x))
    if backend == "cpp":
        source = sources(compiled)
        assert divisions_in_loads(source) == [], divisions_in_loads(source)
        # The channel's mean is read once for the nine window offsets, not under nine masks.
        assert len(re.findall(r"in_ptr1\[x1\]", source)) == 1, source


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pad", [(1, 2, 3, 0), (2, 2, 2, 2), (-1, 2, 1, -2), (0, 0, 4, 1)])
def test_padded_pointwise_producers_match_eager(pad, backend):
    torch.manual_seed(1)
    x, s = torch.randn(3, 4, 7, 9), torch.randn(4, 1, 1)

    def f(x, s):
        y = F.pad(torch.sigmoid(x * s + 1), pad, value=-0.5)
        return y.exp() + 1

    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x, s), f(x, s))
    assert compiled.session.stats["kernel_count"] == 1
    if backend == "cpp":
        assert divisions_in_loads(sources(compiled)) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_of_pointwise_producers_and_a_padded_flattened_read_match_eager(backend):
    torch.manual_seed(2)
    a, b = torch.randn(2, 3, 5), torch.randn(2, 4, 5)

    def f(a, b):
        joined = torch.cat([a.relu() * 2, torch.tanh(b)], dim=1)
        # The flattened pad reads the producer across rows: the mask bounds the flat position only,
        # so the row/column split needs its division and must still be right.
        flat = F.pad((a + 1).flatten(1), (3, 2))
        return joined.sin(), flat * 3

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(a, b), f(a, b)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_outside_the_mask_never_leak_into_the_padding(backend):
    x = torch.tensor([[[[float("nan"), 1.0, float("inf")], [2.0, -float("inf"), 3.0]]]])
    scale = torch.tensor([[[[0.0]]]])

    def f(x, scale):
        # 0 * inf = NaN inside; the pad value must stay 7 wherever the window is outside the input.
        return F.pad(x * scale + x.abs(), (2, 1, 1, 2), value=7.0) - 1

    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x, scale), f(x, scale), equal_nan=True)
