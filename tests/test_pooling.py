"""Max pooling as eager's loop written out over the window's offsets (decomp/pooling.py, _unrolled_max):
one pointwise kernel whose loads are strided slices of the padded input. Values and indices must stay
eager's for every shape of window, bit for bit: several NaNs, windows of -inf, zeros of both signs."""

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
    """Random values, and where eager's loop decides: one window holding two NaNs (eager names the
    last), a channel of -inf only (padding is -inf too: eager names the first position inside the
    input), a channel of zeros of both signs (eager keeps the first of equal values), and a third of
    another channel drawn from NaN, +-inf and +-0."""
    torch.manual_seed(dims)
    x = torch.randn(2, 3, *([17] * dims))
    flat = x.view(-1)
    flat[5] = float("nan")
    flat[6] = float("nan")
    flat[40:44] = float("-inf")
    flat[100] = float("inf")
    x[0, 1] = float("-inf")
    x[0, 2] = 0.0
    x[0, 2].view(-1)[::3] = -0.0
    special = torch.rand(x[1, 1].shape) < 0.3
    x[1, 1][special] = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0])[
        torch.randint(0, 5, (int(special.sum()),))]
    return x


def assert_same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal values, NaN where eager has NaN, and the same sign on every zero."""
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num().view(torch.int32), expected.nan_to_num().view(torch.int32))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("dims,kernel,stride,padding,dilation,ceil_mode", CASES)
def test_max_pool_values_and_indices_match_eager(backend, dims, kernel, stride, padding, dilation, ceil_mode):
    pool = POOLS[dims]

    def values(x):
        return pool(torch.relu(x * 2), kernel, stride, padding, dilation, ceil_mode)

    def with_indices(x):
        return pool(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)

    x = pool_input(dims)
    # Through relu, compared as values: our relu(-0.0) is 0.0, eager's -0.0 (a zero's sign in the
    # min/max family is not yet eager's; the pool itself is checked bit for bit below).
    torch.testing.assert_close(cc.compile(values, backend=backend)(x), values(x), equal_nan=True)
    got, expected = cc.compile(with_indices, backend=backend)(x), with_indices(x)
    assert_same_bits(got[0], expected[0])
    assert torch.equal(got[1], expected[1])


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("dims,out", [(1, 5), (2, (3, 5)), (3, 2)])
def test_adaptive_max_pool_values_and_indices_match_eager(backend, dims, out):
    """Adaptive windows start inside the input; several NaNs and zeros of both signs decide as in eager's
    loop (the last NaN, the first of equal values), as in test_max_pool_values_and_indices_match_eager."""
    pool = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[dims]

    def fn(x):
        return pool(x, out, return_indices=True)

    x = pool_input(dims)
    got, expected = cc.compile(fn, backend=backend)(x), fn(x)
    assert_same_bits(got[0], expected[0])
    assert torch.equal(got[1], expected[1])


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_values_and_indices_are_one_pointwise_kernel(backend):
    """Windows up to UNROLLED_MAX_WINDOW: eager's loop written out over the offsets gives both outputs in
    one pointwise kernel (were three: the values, a copy of the windows, and a reduction for the
    positions)."""
    def fn(x):
        return F.max_pool2d(x, 3, 2, 1, return_indices=True)

    x = pool_input(2)
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(x), fn(x)
    assert_same_bits(got[0], expected[0])
    assert torch.equal(got[1], expected[1])
    assert [k.kind for k in compiled.session.kernels] == ["pointwise"]


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


ADAPTIVE_CASES = [((2, 3, 7, 5), (3, 2)), ((2, 3, 7, 5), (1, 1)), ((1, 2, 4, 3), (7, 5)), ((3, 6, 6), (4, 3)),
                  ((1, 2, 5, 4, 6), (2, 3, 4))]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape,out", ADAPTIVE_CASES,
                         ids=["shrink", "global", "grow", "unbatched", "3d"])
def test_adaptive_pooling_backward_is_ours_and_matches_eager(backend, kind, shape, out):
    # Both backwards ran in PyTorch (a CNN's global average pool in every training step): now a gather
    # over the windows holding each input position, overlapping windows (out > in) included.
    torch._dynamo.reset()
    pool = {(2, "avg"): F.adaptive_avg_pool2d, (2, "max"): F.adaptive_max_pool2d,
            (3, "avg"): F.adaptive_avg_pool3d, (3, "max"): F.adaptive_max_pool3d}[(len(out), kind)]

    def fn(x):
        return pool(x, out).sin()

    x0 = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    eager_x, our_x = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    expected = fn(eager_x)
    weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    (expected * weight).sum().backward()
    compiled = cc.compile(fn, backend=backend)
    got = compiled(our_x)
    (got * weight).sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(our_x.grad, eager_x.grad, rtol=1e-4, atol=1e-5)
    assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["fallback_graphs"] == 0
