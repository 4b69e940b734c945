"""Max pooling's values as a maximum over the window's offsets (decomp/pooling.py, _unrolled_max): one
pointwise kernel whose loads are strided slices of the padded input. Values and indices must stay
eager's for every shape of window, NaN and -inf included."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

CASES = [  # (dims, kernel, stride, padding, dilation, ceil_mode)
    (1, 3, 2, 1, 1, False),
    (2, 3, 2, 1, 1, False),  # ResNet's stem pool
    (2, 2, 2, 0, 1, True),
    (2, (3, 2), (1, 2), (1, 0), (2, 1), False),
    (2, 3, 2, 1, 1, True),
    (3, 3, 2, 1, 1, False),
    (2, 8, 8, 0, 1, False),  # 64 offsets: above UNROLLED_MAX_WINDOW, the windows' path
]
POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def pool_input(dims: int) -> torch.Tensor:
    torch.manual_seed(dims)
    x = torch.randn(2, 3, *([17] * dims))
    flat = x.view(-1)
    flat[5] = float("nan")
    flat[40:44] = float("-inf")
    flat[100] = float("inf")
    return x


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("dims,kernel,stride,padding,dilation,ceil_mode", CASES)
def test_max_pool_values_and_indices_match_eager(backend, dims, kernel, stride, padding, dilation, ceil_mode):
    pool = POOLS[dims]

    def values(x):
        return pool(torch.relu(x * 2), kernel, stride, padding, dilation, ceil_mode)

    def with_indices(x):
        return pool(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)

    x = pool_input(dims)
    torch.testing.assert_close(cc.compile(values, backend=backend)(x), values(x), equal_nan=True)
    got, expected = cc.compile(with_indices, backend=backend)(x), with_indices(x)
    torch.testing.assert_close(got[0], expected[0], equal_nan=True)
    assert torch.equal(got[1], expected[1])


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_values_alone_are_one_pointwise_kernel_with_its_producers_inside(backend):
    """ResNet's stem: batch norm's arithmetic and the ReLU recomputed at each of the 9 offsets inside the
    pool's kernel, no window buffer and no reduction."""
    def stem(x, scale, shift):
        return F.max_pool2d(torch.relu(x * scale + shift), 3, 2, 1)

    torch.manual_seed(0)
    x, scale, shift = torch.randn(2, 16, 16, 16), torch.randn(16, 1, 1), torch.randn(16, 1, 1)
    compiled = cc.compile(stem, backend=backend)
    torch.testing.assert_close(compiled(x, scale, shift), stem(x, scale, shift))
    kinds = [k.kind for k in compiled.session.kernels]
    assert kinds == ["pointwise"], kinds
