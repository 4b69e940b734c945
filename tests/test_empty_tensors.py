"""Tensors with a zero-size dim go through every stage: no kernel may divide by a size of 0 (torch.eye(5, 0)
once failed in the kernel plan's index inversion and ran in eager), and the results are eager's shapes
and values. Both backends."""

import pytest
import torch

import compiler_core as cc

x46 = torch.randn(4, 6)
PROGRAMS = {
    "eye 5x0": (lambda: torch.eye(5, 0), ()),
    "eye 0x5": (lambda: torch.eye(0, 5), ()),
    "empty slice exp": (lambda x: x[:, :0].exp() + 1, (x46,)),
    "sum over an empty dim": (lambda x: x[:, :0].sum(1) + x[:, 0], (x46,)),
    "amax of no rows": (lambda x: x[:0].amax(1), (x46,)),
    "cat with an empty part": (lambda x: torch.cat([x[:, :0], x * 2], 1).relu(), (x46,)),
    "reshape and transpose of nothing": (lambda x: x[:0].reshape(0, 3, 8).transpose(1, 2).sin(),
                                         (torch.randn(4, 24),)),
    "softmax of no rows": (lambda x: torch.softmax(x[:0], -1), (x46,)),
    "mean over an empty dim": (lambda x: x[:, :0].mean(1), (x46,)),
    "matmul over an empty inner dim": (lambda x, w: (x[:, :0] @ w[:0]) + 1, (x46, torch.randn(6, 5))),
    "zeros 0x3 plus a slice": (lambda x: torch.zeros(0, 3) + x[:0, :3], (x46,)),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_zero_size_dims_compile_and_match_eager(name, backend):
    fn, args = PROGRAMS[name]
    compiled = cc.compile(fn, backend=backend)
    actual, expected = compiled(*args), fn(*args)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, equal_nan=True)
    assert [g.fallback_reason for g in compiled.session.all_records() if g.fell_back] == []
