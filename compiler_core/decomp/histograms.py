"""Histograms (histc, histogram, histogramdd) as masked sums over [bins, elements].

Every element gets a bin position (or none), then each bin sums what lands on it:

    position[i] = the bin of x[i], -1 outside the edges or NaN
    hist[b]     = sum over i of  where(position[i] == b, weight[i], 0)     (weight 1 for a count)

The where and the sum fuse into one reduction kernel and the [bins, elements] square is never
stored: nothing for a histogram of a batch's activations, ruinous for 10^6 elements into 10^4 bins,
so above SHORT_HISTOGRAM (elements x bins) the op stays PyTorch's call.

Positions follow ATen's CPU kernel bit for bit, one rule per op:
- histc: lo <= x <= hi, then trunc(((x - lo) * bins) / (hi - lo)) in the input's dtype, the last
  bin taking its right edge. No search: the edges are not returned.
- histogram and histogramdd with a bin count: the same linear guess g, then libstdc++'s upper_bound
  over the edges g - 1 .. g + 1 (a local search, so the bin agrees with the edges returned).
- with edge tensors: upper_bound over all the edges, step by step as libstdc++ takes them, so
  unsorted edges (which eager accepts) land where eager's binary search puts them.
Edges are ATen's linspace: start + step * k below the middle and end - step * (steps - 1 - k) above,
each one rounded once (the CPU build contracts them to fused multiply-adds); ours are computed in
float64 with the one case where rounding twice differs corrected (fused_multiply_add.rounded_once_float32).
A data range (histc's min == max, histogram's range=None) is amin/amax in the graph. Where eager
raises on it (a NaN or infinite element) ours raises too, an IndexError from an index_select
(decomp/checks.py); so does constant data so large that widening its range (by 1 for histc, 0.5
for histogram) leaves it one float32 value, where eager divides by zero and reads an undefined bin.
Counts are exact; weighted sums and density add in the reduction's order, not eager's, so they
round within a sum's usual error. Float32 only where edges are computed (fma in float64 would
need double-double arithmetic), float32/float64 for histc and edge tensors, CPU only (CUDA's histc
is a different kernel).
"""

from __future__ import annotations

import builtins
import math
import struct
from typing import Any, Optional, Sequence

import torch

from compiler_core.decomp.checks import raise_unless
from compiler_core.decomp.consistent import compared
from compiler_core.decomp.fused_multiply_add import rounded_once_float32
from compiler_core.decomp.scatter_family import SHORT_SCATTER

aten = torch.ops.aten
SHORT_HISTOGRAM = SHORT_SCATTER  # elements x bins (all cells of a histogramdd), at most
_SEARCHED = (torch.float32, torch.float64)  # histc and edge tensors: no linspace of ours involved
_LINSPACED = (torch.float32,)  # our linspace reproduces ATen's float32 one exactly


# ---------------------------------------------------------------------------------------------------
# checks made while tracing (Python numbers, shapes): where eager would raise, PyTorch's call raises


def _fits(x: torch.Tensor, cells: int, dtypes: tuple) -> bool:
    if x.device.type != "cpu" or x.dtype not in dtypes:
        return False
    if not all(isinstance(s, int) for s in x.shape):
        return False
    return cells > 0 and max(x.numel(), 1) * cells <= SHORT_HISTOGRAM


def _float32(value: float) -> Optional[float]:
    """`value` rounded to float32 as ATen's Scalar.to<float>() rounds it; None beyond float32's range."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return None


def _static_range(lo: float, hi: float, dtype: torch.dtype) -> bool:
    """A range given as numbers that eager accepts, and whose edges stay apart in `dtype` (otherwise
    eager divides by zero in its kernel: PyTorch's call keeps that to itself)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        return False
    if dtype == torch.float32:
        lo32, hi32 = _float32(lo), _float32(hi)
        return lo32 is not None and hi32 is not None and lo32 < hi32
    return True


# ---------------------------------------------------------------------------------------------------
# graph pieces


def _full(value: Any, like: torch.Tensor) -> torch.Tensor:
    return torch.full((), value, dtype=like.dtype, device=like.device)


def _checked_range(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) of a data range, raising where eager raises (a bound not finite) or divides by zero
    (bounds equal in the input's dtype)."""
    valid = (lo.abs() < math.inf) & (hi.abs() < math.inf) & (lo < hi)
    check = raise_unless(valid)
    return lo - check, hi - check


def _data_range(columns: torch.Tensor, widen: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column of [M, N] (M > 0): [amin, amax], widened by `widen` each way where they are equal."""
    lo, hi = columns.amin(0), columns.amax(0)
    same = lo == hi
    return _checked_range(torch.where(same, lo - widen, lo), torch.where(same, hi + widen, hi))


def _linspace(start: torch.Tensor, end: torch.Tensor, steps: int) -> torch.Tensor:
    """ATen's CPU linspace of float32 0-d start and end, bit for bit (see the module docstring)."""
    step = (end - start) / (steps - 1)
    k = torch.arange(steps, device=start.device)
    low = rounded_once_float32(step, k, start)
    high = rounded_once_float32(-step, steps - 1 - k, end)
    return torch.where(k < steps // 2, low, high)


def _upper_bound(edges: torch.Tensor, value: torch.Tensor, first: torch.Tensor, length: torch.Tensor,
                 longest: int) -> torch.Tensor:
    """libstdc++'s std::upper_bound(edges + first, edges + first + length, value) - edges for every
    element of `value`, step by step (the same probes, so unsorted edges give eager's answer too);
    `longest` bounds `length`, and so the number of halvings."""
    last = edges.numel() - 1
    for _ in range(longest.bit_length()):
        half = length // 2
        middle = first + half
        probe = edges[middle.clamp(0, last)]
        right = (length > 0) & ~(value < probe)
        first = torch.where(right, middle + 1, first)
        length = torch.where(right, length - half - 1, half)
    return first


def _linear_guess(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bins: int) -> torch.Tensor:
    """trunc(((x - lo) * bins) / (hi - lo)) in x's dtype, for x in [lo, hi]: 0 .. bins."""
    return (((x - lo) * bins) / (hi - lo)).to(torch.int64)


def _inside(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    return (x >= lo) & (x <= hi)  # False for NaN


def _histc_positions(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bins: int) -> torch.Tensor:
    inside = _inside(x, lo, hi)
    guess = _linear_guess(torch.where(inside, x, lo), lo, hi, bins)
    return torch.where(inside, guess.clamp(max=bins - 1), -1)


def _searched_positions(x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """histogram with edge tensors: a binary search over all the edges."""
    count = edges.numel()
    lo, hi = edges[0], edges[count - 1]
    inside = _inside(x, lo, hi)
    start = torch.zeros_like(x, dtype=torch.int64)
    after = _upper_bound(edges, x, start, torch.full_like(start, count), count)
    return torch.where(inside, (after - 1).clamp(max=count - 2), -1)


def _local_positions(x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """histogram with a bin count: the linear guess, then a search of the edges next to it."""
    bins = edges.numel() - 1
    lo, hi = edges[0], edges[bins]
    inside = _inside(x, lo, hi)
    guess = _linear_guess(torch.where(inside, x, lo), lo, hi, bins)
    first = (guess - 1).clamp(min=0)
    length = (guess + 2).clamp(max=bins + 1) - first
    after = _upper_bound(edges, x, first, length, 3)
    return torch.where(inside, (after - 1).clamp(max=bins - 1), -1)


def _sums(positions: torch.Tensor, cells: int, weight: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """hist[b] = sum over i of where(positions[i] == b, weight[i], 0): [cells] from [M] positions."""
    hits = positions == torch.arange(cells, device=positions.device).unsqueeze(1)  # [cells, M]
    if weight is None:
        return hits.sum(1).to(dtype)
    return torch.where(hits, weight, 0).sum(1, dtype=dtype)


def _density(hist: torch.Tensor, edges: Sequence[torch.Tensor]) -> torch.Tensor:
    """Divided by its total, then by each dim's bin lengths, as eager divides (one rounding each)."""
    hist = hist / hist.sum()
    for dim, e in enumerate(edges):
        shape = [1] * hist.dim()
        shape[dim] = e.numel() - 1
        hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return hist


# ---------------------------------------------------------------------------------------------------
# the ops


def histc(self: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    """torch.histc(tensor([1., 2, 1]), bins=4, min=0, max=3) == tensor([0., 2, 1, 0])."""
    if not _fits(self, bins, _SEARCHED) or isinstance(min, torch.Tensor) or isinstance(max, torch.Tensor):
        return NotImplemented
    lo, hi = float(min), float(max)
    x = compared(self.reshape(-1))
    if lo == hi and x.numel() > 0:
        lo_t, hi_t = _data_range(x.unsqueeze(1), 1.0)
        lo_t, hi_t = lo_t.reshape(()), hi_t.reshape(())
    else:
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if not _static_range(lo, hi, self.dtype):
            return NotImplemented
        lo_t, hi_t = _full(lo, x), _full(hi, x)
    return _sums(_histc_positions(x, lo_t, hi_t, bins), bins, None, self.dtype)


def _outer_edges(columns: torch.Tensor, bins: Sequence[int], range: Optional[Sequence[float]]) -> Any:
    """Each dim's edges of a histogram over the columns of [M, N]: a linspace of the given range or
    of the data's, as ATen's select_outer_bin_edges picks it; NotImplemented where eager raises."""
    count = columns.shape[1]
    if range is not None:
        if len(range) != 2 * count:
            return NotImplemented
        edges = []
        for dim in builtins.range(count):  # the ops' `range` argument shadows the builtin
            lo, hi = float(range[2 * dim]), float(range[2 * dim + 1])
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            if not _static_range(lo, hi, columns.dtype):
                return NotImplemented
            edges.append(_linspace(_full(lo, columns), _full(hi, columns), bins[dim] + 1))
        return edges
    if columns.shape[0] == 0:  # numpy's default range for no data
        return [_linspace(_full(0.0, columns), _full(1.0, columns), b + 1) for b in bins]
    lo, hi = _data_range(columns, 0.5)
    return [_linspace(lo[dim], hi[dim], bins[dim] + 1) for dim in builtins.range(count)]


def _weight_ok(weight: Optional[torch.Tensor], self: torch.Tensor, shape: Sequence[int]) -> bool:
    return weight is None or (weight.dtype == self.dtype and tuple(weight.shape) == tuple(shape))


def _histogramdd(columns: torch.Tensor, edges: Sequence[torch.Tensor], weight: Optional[torch.Tensor],
                 density: bool, local: bool) -> torch.Tensor:
    """[M, N] columns into the cells of N edge tensors: one flat cell position per row, then the sums."""
    positions = columns.new_zeros(columns.shape[0], dtype=torch.int64)
    outside = torch.zeros_like(positions, dtype=torch.bool)
    for dim, e in enumerate(edges):
        column = compared(columns[:, dim])
        position = _local_positions(column, e) if local else _searched_positions(column, e)
        outside = outside | (position < 0)
        positions = positions * (e.numel() - 1) + position
    cells = [e.numel() - 1 for e in edges]
    flat_weight = None if weight is None else weight.reshape(-1)
    hist = _sums(torch.where(outside, -1, positions), math.prod(cells), flat_weight, columns.dtype)
    hist = hist.reshape(cells)
    return _density(hist, edges) if density else hist


def histogram_bin_ct(self: torch.Tensor, bins: int = 100, *, range: Optional[Sequence[float]] = None,
                     weight: Optional[torch.Tensor] = None, density: bool = False) -> Any:
    """torch.histogram(x, bins=3): (hist, bin_edges), the edges a linspace of `range` or of x's."""
    if not _fits(self, bins, _LINSPACED) or (weight is not None and weight.numel() != self.numel()):
        return NotImplemented
    if weight is not None and weight.dtype != self.dtype:
        return NotImplemented
    columns = self.reshape(-1, 1)
    edges = _outer_edges(columns, [bins], range)
    if edges is NotImplemented:
        return NotImplemented
    hist = _histogramdd(columns, edges, weight, density, local=True)
    return hist, edges[0]


def histogram_bins_tensor(self: torch.Tensor, bins: torch.Tensor, *, weight: Optional[torch.Tensor] = None,
                          density: bool = False) -> Any:
    """torch.histogram(x, bins=edges): the edges searched as given (copied into bin_edges)."""
    if bins.dim() != 1 or bins.numel() < 2 or bins.dtype != self.dtype or bins.device != self.device:
        return NotImplemented
    if not _fits(self, bins.numel() - 1, _SEARCHED):
        return NotImplemented
    if weight is not None and (weight.numel() != self.numel() or weight.dtype != self.dtype):
        return NotImplemented
    hist = _histogramdd(self.reshape(-1, 1), [bins], weight, density, local=False)
    return hist, bins.clone()


def _dd_inputs(self: torch.Tensor, cells: int, count: int, weight: Optional[torch.Tensor],
               dtypes: tuple) -> Optional[torch.Tensor]:
    """self as [M, N] columns, or None where eager raises or the work is too large for us."""
    if self.dim() < 1 or self.shape[-1] != count or count == 0:
        return None
    if not _fits(self, cells, dtypes) or not _weight_ok(weight, self, self.shape[:-1]):
        return None
    return self.reshape(-1, count)


def histogramdd_bin_edges(self: torch.Tensor, bins: Sequence[int], *, range: Optional[Sequence[float]] = None,
                          weight: Optional[torch.Tensor] = None, density: bool = False) -> Any:
    if any(b <= 0 for b in bins):
        return NotImplemented
    columns = _dd_inputs(self, math.prod(bins), len(bins), weight, _LINSPACED)
    if columns is None:
        return NotImplemented
    return _outer_edges(columns, bins, range)


def histogramdd_from_bin_cts(self: torch.Tensor, bins: Sequence[int], *, range: Optional[Sequence[float]] = None,
                             weight: Optional[torch.Tensor] = None, density: bool = False) -> Any:
    if any(b <= 0 for b in bins):
        return NotImplemented
    columns = _dd_inputs(self, math.prod(bins), len(bins), weight, _LINSPACED)
    if columns is None:
        return NotImplemented
    edges = _outer_edges(columns, bins, range)
    if edges is NotImplemented:
        return NotImplemented
    return _histogramdd(columns, edges, weight, density, local=True)


def histogramdd_from_bin_tensors(self: torch.Tensor, bins: Sequence[torch.Tensor], *,
                                 weight: Optional[torch.Tensor] = None, density: bool = False) -> Any:
    if any(b.dim() != 1 or b.numel() < 2 or b.dtype != self.dtype or b.device != self.device for b in bins):
        return NotImplemented
    columns = _dd_inputs(self, math.prod(b.numel() - 1 for b in bins), len(bins), weight, _SEARCHED)
    if columns is None:
        return NotImplemented
    return _histogramdd(columns, bins, weight, density, local=False)


HISTOGRAMS = {
    aten.histc.default: histc, aten.histogram.bin_ct: histogram_bin_ct,
    aten.histogram.bins_tensor: histogram_bins_tensor, aten._histogramdd_bin_edges.default: histogramdd_bin_edges,
    aten._histogramdd_from_bin_cts.default: histogramdd_from_bin_cts,
    aten._histogramdd_from_bin_tensors.default: histogramdd_from_bin_tensors,
}
