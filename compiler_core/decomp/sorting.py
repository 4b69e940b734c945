"""Short sorts as counting: sort, topk, kthvalue and the medians along a row of at most SHORT_SORT elements.

Where does element i of a row land in its sorted order? At the number of elements that go before it:

    rank[..., i] = count over j of  x_j before x_i,  or  x_j ties x_i and j < i

(ties kept in their order: a stable sort, as ATen's CPU sort is). Then position p takes the element
whose rank is p:

    values[..., p]  = max over i of where(rank_i == p, x_i, lowest)
    indices[..., p] = max over i of where(rank_i == p, i, -1)

Both are masked reductions over a [row, row] square our kernels compute without storing it: n^2 work
for a row of n, nothing for a top-k over a vocabulary slice or an OpInfo sample, ruinous for a sort of
10^6 elements, so longer rows stay PyTorch's call. NaN sorts after every number, as in ATen (first when
descending), and NaNs tie with each other; -0.0 ties 0.0.
"""

from __future__ import annotations

import torch

from compiler_core.decomp.consistent import compared
from compiler_core.decomp.scans import extreme_identity, itself_at_zero

aten = torch.ops.aten
SHORT_SORT = 4096  # elements along the sorted dim, at most
SHORT_SORT_WORK = 1 << 26  # rows x length^2 comparisons, at most


def _sortable(x: torch.Tensor, dim: int) -> bool:
    if x.dim() == 0 or x.dtype == torch.bool or x.is_complex():
        return False
    if not all(isinstance(s, int) for s in x.shape):
        return False
    length = x.shape[dim]
    return 0 < length <= SHORT_SORT and x.numel() * length <= SHORT_SORT_WORK


def _ranks(x: torch.Tensor, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(rank, positions) of each element of the last dim of `x`: where it lands, and its own index."""
    length = x.shape[-1]
    positions = torch.arange(length, device=x.device)
    mine, other = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, 1] and [..., 1, j]
    if x.dtype.is_floating_point:
        mine_nan, other_nan = torch.isnan(mine), torch.isnan(other)
        if descending:
            before = (other > mine) | (other_nan & ~mine_nan)
        else:
            before = (other < mine) | (mine_nan & ~other_nan)
        tie = (other == mine) | (mine_nan & other_nan)
    else:
        before = other > mine if descending else other < mine
        tie = other == mine
    earlier = positions < positions.unsqueeze(-1)  # [i, j]: j < i
    rank = (before | (tie & earlier)).sum(-1)
    return rank, positions


def _ranked(x: torch.Tensor, dim: int, descending: bool):
    """(dim made positive, the rows along it moved last and stored once, their ranks, their positions)."""
    dim = dim % x.dim()
    rows = compared(x.movedim(dim, -1))
    return (dim, rows, *_ranks(rows, descending))


def _one_per_row(values: torch.Tensor, indices: torch.Tensor, dim: int, keepdim: bool):
    """A one-position take as reduced rows: dim dropped, or kept as size 1."""
    values, indices = values.squeeze(-1), indices.squeeze(-1)
    if keepdim:
        values, indices = values.unsqueeze(dim), indices.unsqueeze(dim)
    return values, indices


def _take(x: torch.Tensor, rank: torch.Tensor, positions: torch.Tensor, wanted: torch.Tensor):
    """values and indices of the elements whose rank is `wanted` (a tensor of positions, broadcast over
    the rows, one per output element)."""
    hit = rank.unsqueeze(-2) == wanted.unsqueeze(-1)  # [..., p, i]
    values = torch.where(hit, x.unsqueeze(-2), extreme_identity(x.dtype, "max")).amax(-1)
    indices = torch.where(hit, positions, -1).amax(-1)
    return values, indices


def _zero_dim(x: torch.Tensor, dim: int) -> bool:
    return x.dim() == 0 and dim in (0, -1) and x.dtype != torch.bool and not x.is_complex()


def sort(x: torch.Tensor, dim: int = -1, descending: bool = False):
    if _zero_dim(x, dim):
        return itself_at_zero(x)
    if not _sortable(x, dim):
        return NotImplemented
    dim, rows, rank, positions = _ranked(x, dim, descending)
    values, indices = _take(rows, rank, positions, positions)
    return values.movedim(-1, dim), indices.movedim(-1, dim)


def sort_stable(x: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False):
    return sort(x, dim, descending)  # ours is stable either way


def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    if _zero_dim(x, dim) and k == 1:
        return itself_at_zero(x)
    # Unsorted, ATen returns the k in an order of its algorithm's making: keep its call.
    if not sorted or not _sortable(x, dim) or not isinstance(k, int) or not 0 <= k <= x.shape[dim]:
        return NotImplemented
    dim, rows, rank, positions = _ranked(x, dim, descending=largest)
    values, indices = _take(rows, rank, positions, positions[:k])
    return values.movedim(-1, dim), indices.movedim(-1, dim)


def kthvalue(x: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False):
    if _zero_dim(x, dim) and k == 1:
        return itself_at_zero(x)
    if not _sortable(x, dim) or not isinstance(k, int) or not 1 <= k <= x.shape[dim]:
        return NotImplemented
    dim, rows, rank, positions = _ranked(x, dim, descending=False)
    return _one_per_row(*_take(rows, rank, positions, positions[k - 1:k]), dim, keepdim)


def _median(x: torch.Tensor, dim: int, keepdim: bool, skip_nan: bool):
    """The lower median of each row. median: a row holding NaN gives its first NaN. nanmedian: the
    lower median of the row's numbers; a row of NaN only gives the element at position (n-1)//2."""
    if _zero_dim(x, dim):
        return itself_at_zero(x)
    if not _sortable(x, dim):
        return NotImplemented
    dim, rows, rank, positions = _ranked(x, dim, descending=False)
    length = rows.shape[-1]
    middle = (length - 1) // 2
    if x.dtype.is_floating_point:
        numbers = (~torch.isnan(rows)).sum(-1, keepdim=True)  # NaN ranks after every number
        if skip_nan:
            wanted = torch.where(numbers > 0, (numbers - 1) // 2, middle)
        else:
            wanted = torch.where(numbers < length, numbers, middle)  # the first NaN, or the middle
    else:
        wanted = torch.full(rows.shape[:-1] + (1,), middle, dtype=torch.int64, device=x.device)
    return _one_per_row(*_take(rows, rank, positions, wanted), dim, keepdim)


def median_dim(x: torch.Tensor, dim: int, keepdim: bool = False):
    return _median(x, dim, keepdim, skip_nan=False)


def nanmedian_dim(x: torch.Tensor, dim: int, keepdim: bool = False):
    return _median(x, dim, keepdim, skip_nan=True)


def _whole(skip_nan: bool):
    def median(x: torch.Tensor):
        if x.numel() == 0:
            return NotImplemented
        out = _median(x.reshape(-1), 0, False, skip_nan)
        return out if out is NotImplemented else out[0]

    return median


SORTING = {aten.sort.default: sort, aten.sort.stable: sort_stable, aten.topk.default: topk,
           aten.kthvalue.default: kthvalue, aten.median.dim: median_dim, aten.nanmedian.dim: nanmedian_dim,
           aten.median.default: _whole(skip_nan=False), aten.nanmedian.default: _whole(skip_nan=True)}
