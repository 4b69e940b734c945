"""Float to integer conversions in the C++ backend, as eager's CPU kernels make them (x86's truncating
conversion): NaN and values outside the range give the minimum, narrower integers wrap that. A plain
static_cast of such a value is undefined behaviour, and GCC once used it to drop a clamp to 0 after
`(|x| * 5).long()`, so inf's conversion reached a gather as its index (random program 9520)."""

from __future__ import annotations

import pytest
import torch

import compiler_core as cc

SPECIAL = [float("nan"), float("inf"), -float("inf"), 3e19, -3e19, 3e9, -3e9, 7e4, 300.0, -3.0, 2.7, -2.7,
           0.0, -0.0, 127.9, 255.5, 2**31 - 64, -(2**31), 2**63, -(2**63)]


@pytest.mark.parametrize("source", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("target", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_float_to_integer_conversions_are_eagers(source, target):
    x = torch.tensor(SPECIAL, dtype=source)
    # A pointwise op first, so the conversion is inside a kernel of ours, not a copy of the input.
    fn = lambda x: (x * 1).to(target)  # noqa: E731
    got, expected = cc.compile(fn, backend="cpp")(x), fn(x)
    assert torch.equal(got, expected), (x, got, expected)


def test_a_clamp_after_converting_an_infinity_still_clamps():
    """Random program 9520, shrunk: log_softmax over one element is 0, its log -inf, nan_to_num makes that
    -3.4e38 and |.| * 5 overflows to inf, whose conversion is INT64_MIN; clamped to [0, 0] it is 0, a valid
    index. GCC took the conversion of a non-negative float to be non-negative and dropped the clamp's
    lower bound: the gather raised "index out of bounds"."""
    def fn(x0):
        v0 = x0.index_select(0, ((x0.reshape(-1)[:1] * 7).long() % 5))
        v1 = torch.atan2(v0, v0)
        v7 = torch.nan_to_num(v1.log_softmax(0).log())
        index = (v7.abs() * 5).long()
        return v1.gather(0, index.clamp(0, 0)), index

    x = torch.tensor([-0.7390, 0.7513, -0.0582, -0.1908, -0.0964])
    for dynamic in (False, True):
        torch._dynamo.reset()
        for got, expected in zip(cc.compile(fn, backend="cpp", dynamic=dynamic)(x), fn(x)):
            assert torch.equal(got, expected), (got, expected)
