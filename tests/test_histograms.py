"""Histograms as masked sums (compiler_core/decomp/histograms.py): histc, histogram and histogramdd are
kernels of ours with eager's bins, edge for edge: elements on an edge and one ulp either side, signed
zeros, NaN and values out of range, a range taken from the data, edges computed as ATen's linspace."""

from fractions import Fraction

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp import histograms
from compiler_core.decomp.fused_multiply_add import rounded_once_float32

NAN, INF = float("nan"), float("inf")
BACKENDS = ["cpp", "triton"]


def _around(values: torch.Tensor) -> torch.Tensor:
    """Each value, and its float32 neighbours one ulp below and above."""
    return torch.cat([values, torch.nextafter(values, torch.tensor(-INF)), torch.nextafter(values, torch.tensor(INF))])


def awkward_data() -> torch.Tensor:
    """Random values, histc's and histogram's edges for the ranges below with their neighbours, ±0,
    NaN and values outside every range."""
    torch.manual_seed(0)
    edges = torch.cat([torch.histogram(torch.zeros(1), bins=7, range=(-1.3, 2.9)).bin_edges,
                       torch.linspace(-1.3, 2.9, 8), torch.tensor([-3.7, 0.1, 5.0 / 3.0])])
    special = torch.tensor([0.0, -0.0, NAN, 9.0, -9.0, 2.9, -1.3])
    return torch.cat([torch.randn(60) * 2, _around(edges), special])


def _flat(value):
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flat(v)]
    return [value]


def same(actual, expected, exact=True):
    """Same dtypes and shapes; equal values (NaN where eager has NaN, the sign of every zero), or
    within a sum's rounding where they are sums of weights."""
    for a, e in zip(_flat(actual), _flat(expected), strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-6, "atol": 1e-7}
        torch.testing.assert_close(a, e, equal_nan=True, **tolerance)
        if exact:
            assert torch.equal(a.signbit(), e.signbit())


# Edge tensors made in eager: eager's linspace (a compiled one may differ in the last bit), and
# unsorted edges, which eager accepts and searches as its binary search goes.
EDGES = torch.linspace(-1.3, 2.9, 8)
UNSORTED_EDGES = torch.tensor([-2.0, 1.5, -1.0, 0.5, 2.0])
# name -> (function of the data, counts exact); weighted sums and density round within a sum's error
PROGRAMS = {
    "histc": (lambda x: torch.histc(x, bins=7, min=-1.3, max=2.9), True),
    "histc of the data's range": (lambda x: torch.histc(x[x.abs() < 5], bins=9), True),
    "histc min == max != 0 uses the data": (lambda x: torch.histc(x[x.abs() < 5], bins=4, min=3, max=3), True),
    "histc of constant data widens by 1": (lambda x: torch.histc(x[:20] * 0 + 2.5, bins=5), True),
    "histc of zeros and negative zeros": (lambda x: torch.histc(x[-7:-5], bins=3), True),
    "histogram": (lambda x: torch.histogram(x, bins=7, range=(-1.3, 2.9)), True),
    "histogram of the data's range": (lambda x: torch.histogram(x[x.abs() < 5], bins=11), True),
    "histogram of one value widens by 0.5": (lambda x: torch.histogram(x[:1] * 0 - 0.75, bins=3), True),
    "histogram range of one value": (lambda x: torch.histogram(x, bins=4, range=(0.1, 0.1)), True),
    "histogram with many bins": (lambda x: torch.histogram(x, bins=1000, range=(-3.7, 5.0 / 3.0)), True),
    "histogram weighted density": (lambda x: torch.histogram(x, bins=5, range=(-2.0, 3.0), weight=x.cos(),
                                                             density=True), False),
    "histogram with edges": (lambda x: torch.histogram(x, EDGES), True),
    "histogram with unsorted edges": (lambda x: torch.histogram(x, UNSORTED_EDGES), True),
    "histogramdd": (lambda x: torch.histogramdd(x[:60].reshape(-1, 3), [2, 3, 4]), True),
    "histogramdd range and density": (lambda x: torch.histogramdd(x[:60].reshape(-1, 2), [3, 2],
                                                                  range=[-1.0, 1.0, 0.0, 4.0], density=True), False),
    "histogramdd with edges": (lambda x: torch.histogramdd(x[:60].reshape(-1, 2), [EDGES, UNSORTED_EDGES]), True),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_histograms_are_ours_and_match_eager(name, backend):
    fn, exact = PROGRAMS[name]
    x = awkward_data()
    compiled = cc.compile(fn, backend=backend)
    same(compiled(x), fn(x), exact)
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, stats
    assert stats["kernel_count"] >= 1


# (bins, range): a tiny range far from zero (8 float32 values for 1000 bins: edges repeat), many bins
EDGE_CASES = {"1000 bins over 8 floats": (1000, (1e6, 1e6 + 0.5)), "999 bins": (999, (-1e-3, 7.0)),
              "33 bins": (33, (-5.0, 5.0 / 3.0))}


# The C++ backend runs every case; Triton's interpreter the 33-bin one (the many-bin cases are the
# same kernels at other sizes, and took ~20 s each in the interpreter).
@pytest.mark.parametrize("case, backend", [(case, backend) for case in EDGE_CASES for backend in BACKENDS
                                           if backend == "cpp" or case == "33 bins"])
def test_eagers_edges_and_their_neighbours_land_in_eagers_bins(case, backend):
    bins, bounds = EDGE_CASES[case]
    x = _around(torch.histogram(torch.zeros(1), bins=bins, range=bounds).bin_edges)
    pairs = torch.stack([x, x.sign()], 1)  # histogramdd: a second dim of 2 bins

    def fn(x, pairs):  # one compilation for the four (a compile is most of this test's time)
        return (torch.histogram(x, bins=bins, range=bounds), torch.histogram(x, bins=bins),
                torch.histc(x, bins=bins, min=bounds[0], max=bounds[1]),
                torch.histogramdd(pairs, [bins, 2], range=[*bounds, -1.0, 1.0]))

    compiled = cc.compile(fn, backend=backend)
    same(compiled(x, pairs), fn(x, pairs))
    assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["fallback_graphs"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_histc_and_edge_tensors_are_ours(backend):
    x = awkward_data().double()
    edges = EDGES.double()

    def fn(x):
        return torch.histc(x, bins=7, min=-1.3, max=2.9), torch.histc(x[x.abs() < 5], bins=5), torch.histogram(x, edges)

    compiled = cc.compile(fn, backend=backend)
    same(compiled(x), fn(x))
    assert compiled.session.stats["fallback_ops"] == []


def test_float64_edges_of_a_bin_count_stay_pytorchs_call():
    """Our linspace is ATen's float32 one; its float64 fma would need double-double arithmetic."""
    x = awkward_data().double()
    compiled = cc.compile(lambda x: torch.histogram(x, bins=5, range=(-1.3, 2.9)), backend="cpp")
    same(compiled(x), torch.histogram(x, bins=5, range=(-1.3, 2.9)))
    assert compiled.session.stats["fallback_ops"] == ["aten.histogram.bin_ct"]


@pytest.mark.parametrize("values", [[1.0, NAN, 2.0], [1.0, INF], [-INF, 0.0]])
def test_a_data_range_that_is_not_finite_raises_as_in_eager(values):
    """Eager refuses a range it cannot split; ours raises too (an index out of range, not eager's text)."""
    x = torch.tensor(values)
    for fn in (lambda x: torch.histc(x, bins=4), lambda x: torch.histogram(x, bins=4)):
        with pytest.raises(RuntimeError, match="not finite"):
            fn(x)
        with pytest.raises(IndexError):
            cc.compile(fn, backend="cpp")(x)


def test_a_range_that_widening_cannot_open_raises():
    """Constant data beyond float32's integers: widened by 1 it is still one value, and eager divides by
    zero (its bin is undefined behaviour); ours refuses as for a range that is not finite."""
    x = torch.full((3,), 1e8)
    for fn in (lambda x: torch.histc(x, bins=4), lambda x: torch.histogram(x, bins=4)):
        fn(x)
        with pytest.raises(IndexError):
            cc.compile(fn, backend="cpp")(x)


def test_large_histograms_stay_pytorchs_call():
    x = torch.randn(histograms.SHORT_HISTOGRAM // 64 + 1)
    compiled = cc.compile(lambda x: torch.histc(x, bins=64, min=-2, max=2), backend="cpp")
    same(compiled(x), torch.histc(x, bins=64, min=-2, max=2))
    assert compiled.session.stats["fallback_ops"] == ["aten.histc.default"]


def _fma(a: float, k: int, c: float) -> float:
    """a * k + c rounded once to float32 (exact rationals, ties to even)."""
    exact = Fraction(a) * k + Fraction(c)
    below = torch.tensor(float(exact), dtype=torch.float32)
    candidates = [torch.nextafter(below, torch.tensor(d)) for d in (-INF, INF)] + [below]
    return min(candidates, key=lambda v: (abs(Fraction(v.item()) - exact),
                                          v.view(torch.int32).item() & 1)).item()


def test_linspace_steps_round_once_as_a_fused_multiply_add():
    """Where the float64 sum is a float32 midpoint the exact sum is not (here 1 + 2^-24 + 2^-76:
    rounding twice gives 1.0), and on random operands."""
    g = torch.Generator().manual_seed(0)
    a = torch.cat([torch.tensor([14586017 * 2.0**-76]), torch.randn(200, generator=g) * 1e-3])
    k = torch.cat([torch.tensor([308761441]), torch.randint(0, 1 << 20, (200,), generator=g)])
    c = torch.cat([torch.tensor([1.0]), torch.randn(200, generator=g) * 1e4])
    expected = torch.tensor([_fma(ai, ki, ci) for ai, ki, ci in zip(a.tolist(), k.tolist(), c.tolist())])
    assert expected[0].item() == 1.0 + 2.0**-23
    for backend in BACKENDS:
        compiled = cc.compile(rounded_once_float32, backend=backend)
        assert torch.equal(compiled(a, k, c), expected)
