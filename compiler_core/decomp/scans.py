"""Short prefix scans (cumsum, cumprod, logcumsumexp, cummax, cummin) as masked reductions.

    out[..., i, ...] = sum over j of  where(j <= i, x[..., j, ...], 0)

Every output position reduces its own row of a lower-triangular mask, so the where and the sum fuse
into one reduction kernel and the n x n mask is index arithmetic, never stored. That is n^2 work for
a scan of length n: nothing next to a memory pass for the short scans real models make (RoBERTa's
position ids: a cumsum over the sequence), ruinous for a long one. Scans longer than SHORT_SCAN stay
PyTorch's call until the kernel IR has a scan of its own. The sum runs in the reduction's order, not
eager's left-to-right one; integer scans are exact, float ones round within a sum's usual error.
"""

from __future__ import annotations

import torch
import torch._refs as refs

from compiler_core.decomp.consistent import compared

aten = torch.ops.aten
SHORT_SCAN = 1024  # 1024^2 multiply-adds per output row at most


def _short(reference):
    def scan(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None):
        if _length(x, dim) is None:
            return NotImplemented
        return reference(x, dim, dtype=dtype)

    return scan


def _length(x: torch.Tensor, dim: int) -> int | None:
    """The scanned length when the scan is short enough for a masked reduction, else None."""
    length = x.shape[dim] if x.dim() else 1
    return length if isinstance(length, int) and length <= SHORT_SCAN else None


def itself_at_zero(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a 0-d tensor's sort, extreme or median is: itself, at index 0."""
    return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)


def extreme_identity(dtype: torch.dtype, kind: str) -> float | int:
    """What a running max ("max") or min ("min") starts from: the dtype's lowest or highest value."""
    if dtype.is_floating_point:
        return float("-inf") if kind == "max" else float("inf")
    return torch.iinfo(dtype).min if kind == "max" else torch.iinfo(dtype).max


def _prefix_rows(x: torch.Tensor, dim: int, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, mask): rows[..., j, i, ...] is x[..., j, ...] where j <= i, else `fill`; reducing over
    `dim` (j) gives output position i its prefix. The mask is arange arithmetic, never a stored tensor."""
    positions = torch.arange(x.shape[dim], device=x.device)
    mask = positions.unsqueeze(1) <= positions  # [j, i]
    for _ in range(x.dim() - dim - 1):
        mask = mask.unsqueeze(-1)
    return torch.where(mask, x.unsqueeze(dim + 1), fill), mask


def _logcumsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    if x.dim() == 0 or not x.is_floating_point() or _length(x, dim) is None:
        return NotImplemented
    dim = dim % x.dim()
    rows, mask = _prefix_rows(x, dim, float("-inf"))
    # Shifted by each prefix's max, as a stable logsumexp; an infinite max shifts by 0 instead, so
    # all -inf gives log(0) = -inf and a +inf gives +inf, as eager's running log-add-exp does.
    top = rows.amax(dim)
    shift = torch.where(top.abs() == float("inf"), 0.0, top)
    total = torch.where(mask, torch.exp(x.unsqueeze(dim + 1) - shift.unsqueeze(dim)), 0.0).sum(dim)
    return torch.log(total) + shift


def _cum_extreme(kind: str):
    """cummax / cummin: eager walks the row keeping the extreme, replacing it on every element that
    is NaN or ties or beats it (>= for max), so an index is the last NaN of the prefix if there is
    one, else the last position holding the extreme value; the value is the one read there (of -0.0
    and 0.0, which tie, the later one, as eager keeps it)."""
    def scan(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() == 0 or x.dtype == torch.bool or x.is_complex() or _length(x, dim) is None:
            return NotImplemented
        dim = dim % x.dim()
        x = compared(x)  # the running extreme and the comparison with it read the same bits
        rows, mask = _prefix_rows(x, dim, extreme_identity(x.dtype, kind))
        values = rows.amax(dim) if kind == "max" else rows.amin(dim)
        here, extreme = x.unsqueeze(dim + 1), values.unsqueeze(dim)
        hit = here == extreme
        if x.dtype.is_floating_point:
            hit = hit | (torch.isnan(here) & torch.isnan(extreme))
        positions = torch.arange(x.shape[dim], device=x.device).reshape([-1] + [1] * (x.dim() - dim))
        indices = torch.where(mask & hit, positions, -1).amax(dim)
        return x.gather(dim, indices), indices

    return scan


SCANS = {aten.cumsum.default: _short(refs.cumsum), aten.cumprod.default: _short(refs.cumprod),
         aten.logcumsumexp.default: _logcumsumexp,
         aten.cummax.default: _cum_extreme("max"), aten.cummin.default: _cum_extreme("min")}
