"""Short cumsum/cumprod are a masked reduction of ours (decomp/scans.py); long ones stay PyTorch's."""

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp.scans import SHORT_SCAN


def _position_ids(input_ids, padding_idx: int = 1):
    # RoBERTa's: positions count only the non-padding tokens, padding keeps padding_idx
    mask = input_ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_position_ids_cumsum_is_our_kernel(backend):
    ids = torch.tensor([[5, 7, 1, 1, 9, 4], [1, 3, 3, 8, 1, 2]])
    compiled = cc.compile(_position_ids, backend=backend)
    assert torch.equal(compiled(ids), _position_ids(ids))
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_float_cumsum_and_cumprod_along_a_middle_dim(backend):
    torch.manual_seed(0)
    x = torch.rand(3, 37, 5) + 0.5

    def f(x):
        return torch.cumsum(x, 1), torch.cumprod(x, 1).sum(-1)

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(x), f(x)):
        torch.testing.assert_close(got, expected)
    assert compiled.session.stats["fallback_ops"] == []


def test_a_long_scan_stays_pytorchs_call():
    x = torch.randn(SHORT_SCAN + 1)
    compiled = cc.compile(lambda x: torch.cumsum(x, 0) * 2, backend="cpp")
    torch.testing.assert_close(compiled(x), torch.cumsum(x, 0) * 2)
    assert compiled.session.stats["fallback_ops"] == ["aten.cumsum.default"]


def _awkward_rows():
    # NaN, +-inf, ties (equal values at two positions) and a row of -inf: every rule of eager's scans
    torch.manual_seed(0)
    x = torch.randn(3, 9, 4)
    x[0, 3, 1] = float("nan")
    x[0, 6, 1] = float("nan")
    x[1, 2, 2] = float("inf")
    x[2, :, 0] = float("-inf")
    x[1, 5, 3] = x[1, 1, 3]
    x[2, 4, 2] = x[2, 7, 2] = 5.0
    return x


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name, fn", [
    ("logcumsumexp", lambda x: torch.logcumsumexp(x, 1)),
    ("cummax", lambda x: torch.cummax(x, 1)),
    ("cummin_last_dim", lambda x: torch.cummin(x, -1)),
    ("cummax_int", lambda x: torch.cummax((x.nan_to_num(0, 9, -9) * 3).int(), 0)),
])
def test_log_and_extreme_scans_are_our_kernel_with_eagers_values_and_indices(backend, name, fn):
    # cummax/cummin indices: the last NaN of the prefix, else the last position of the extreme (ties)
    x = _awkward_rows()
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(x), fn(x)
    as_tuple = lambda v: v if isinstance(v, tuple) else (v,)  # noqa: E731
    for a, b in zip(as_tuple(got), as_tuple(expected), strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, equal_nan=True)
    # one kernel; cummax/cummin on the CPU read a stored copy of their input first (decomp/consistent.py)
    copies = 1 if name.startswith("cum") else 0
    assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["kernel_count"] == 1 + copies
