"""Short sorts as counting (compiler_core/decomp/sorting.py): sort, topk, kthvalue and the medians are
kernels of ours up to SHORT_SORT elements a row, with eager's values and indices; longer rows stay
PyTorch's call."""

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp.sorting import SHORT_SORT

NAN = float("nan")


def awkward_rows():
    """Random rows with NaNs (one, several, a whole row), a signed zero beside a zero, and ties."""
    torch.manual_seed(0)
    x = torch.randn(7, 37)
    x[1, 3] = NAN
    x[2, [5, 9, 30]] = NAN
    x[3, 4], x[3, 7] = -0.0, 0.0
    x[4, :5] = 1.5
    x[6] = NAN
    return x


def same(actual, expected):
    """Equal values (NaN where eager has NaN, the sign of every zero) and indices, dtypes and shapes."""
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True)
        if a.is_floating_point():
            assert torch.equal(torch.signbit(a), torch.signbit(e))


def same_values_valid_indices(actual, expected, x, dim):
    """Equal values; each index points at an element of x equal to its value (NaN at NaN). Where ATen
    leaves the choice among equal elements to its algorithm (topk, kthvalue, the medians, an unstable
    sort), any such index is right."""
    same(actual[0], expected[0])
    values, indices = actual
    picked = x.gather(dim, indices)
    torch.testing.assert_close(picked, values, rtol=0, atol=0, equal_nan=True)


# Ties and NaNs in a defined order: a stable sort, median's first NaN.
PROGRAMS = {
    "sort stable": lambda x: torch.sort(x, dim=1, stable=True),
    "sort descending, dim 0": lambda x: torch.sort(x, dim=0, descending=True, stable=True),
    "argsort stable": lambda x: torch.argsort(x, dim=1, stable=True, descending=True),
    "median": lambda x: torch.median(x, 1),
    "whole median": lambda x: torch.median(x[:6]) + torch.nanmedian(x),
    "quantile": lambda x: torch.quantile(x[5], torch.tensor([0.1, 0.5, 0.9])),
    "integers": lambda x: torch.sort((x.nan_to_num() * 3).to(torch.int64)[:, :9], dim=1, stable=True),
}
# (function, dim of the indices): the choice among ties is ATen's algorithm's.
CHOOSING = {
    "topk": (lambda x: torch.topk(x, 5, 1), 1),
    "topk smallest": (lambda x: torch.topk(x, 3, 0, largest=False), 0),
    "kthvalue": (lambda x: torch.kthvalue(x, 4, 1, keepdim=True), 1),
    "nanmedian": (lambda x: torch.nanmedian(x, 1, keepdim=True), 1),
    "unstable sort": (lambda x: torch.sort(x, 1), 1),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_short_sorts_are_ours_and_match_eager(name, backend):
    fn = PROGRAMS[name]
    x = awkward_rows()
    compiled = cc.compile(fn, backend=backend)
    same(compiled(x), fn(x))
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, stats
    assert stats["kernel_count"] >= 2


@pytest.mark.parametrize("name", list(CHOOSING))
def test_ties_get_eagers_values_and_indices_of_equal_elements(name):
    fn, dim = CHOOSING[name]
    x = awkward_rows()
    compiled = cc.compile(fn)
    actual = compiled(x)
    expected = fn(x)
    same_values_valid_indices(actual, expected, x, dim)
    assert compiled.session.stats["fallback_ops"] == []
    if name == "unstable sort":  # ours keeps equal elements in their order: the stable sort's answer
        same(actual, torch.sort(x, dim=1, stable=True))


def test_a_long_row_stays_pytorchs_call():
    x = torch.randn(2, SHORT_SORT + 1)
    compiled = cc.compile(lambda x: torch.topk(x, 3, 1))
    same(compiled(x), torch.topk(x, 3, 1))
    assert "aten.topk.default" in compiled.session.stats["fallback_ops"]


COMPARED_PRODUCERS = {
    "sort of sin": lambda x: torch.sort(x.sin(), dim=1, stable=True),
    "topk of sin": lambda x: torch.topk(x.sin(), 3, 1),
    "median of exp": lambda x: torch.median(x.exp(), 1),
    "cummax of sin": lambda x: torch.cummax(x.sin(), 1),
    "max.dim of sin": lambda x: torch.max(x.sin(), 1),
    "argmin of exp, flat": lambda x: (torch.amin(x.exp()), torch.argmin(x.exp())),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(COMPARED_PRODUCERS))
def test_comparisons_of_a_fused_producer_read_the_same_bits(name, backend):
    """A fused sin recomputed in a vectorised loop (libmvec) and a scalar one (libm) can differ in the last
    bit; decompositions that compare elements read one stored copy (decomp/consistent.py). Before, sort of
    x.sin() left positions empty (-inf, index -1) on every one of 30 random inputs, argmax missed its max."""
    fn = COMPARED_PRODUCERS[name]
    g = torch.Generator().manual_seed(1)
    compiled = cc.compile(fn, backend=backend)
    for _ in range(8 if backend == "cpp" else 2):
        x = torch.randn(16, 64, generator=g) * 3
        (values, indices), (expected_values, expected_indices) = compiled(x), fn(x)
        torch.testing.assert_close(values, expected_values, rtol=1e-6, atol=1e-7)  # eager's sin: other ulps
        assert torch.equal(indices, expected_indices)
