"""argmax / argmin and max.dim / min.dim as two reductions we lower: the extreme, then its first position.

An index-tracking reduction would carry (value, position) pairs through every reduction template of
both backends; these ops are rare and their rows short (max-pool windows, a vocabulary's logits), so
two reductions over the row are cheap and the scheduler fuses them into one kernel:

    m = amax(x, dim)                                    (amin for the min ops)
    position = amin(where(x == m or x is NaN, arange(n), n), dim)

Eager returns the first position of the extreme, and treats NaN as both the largest and the smallest
value: amax/amin propagate NaN, so m is NaN exactly when the row holds one, and then the first NaN is
the first lane where `x != x`. Where m is not NaN no lane is NaN, so that term never fires.
"""

from __future__ import annotations

from typing import Optional

import torch

from compiler_core.decomp.consistent import compared
from compiler_core.decomp.scans import itself_at_zero

aten = torch.ops.aten


def _first_extreme(x: torch.Tensor, dim: int, keepdim: bool, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the extreme along dim, the first position holding it), as eager's max.dim / min.dim return."""
    dim = dim % max(x.dim(), 1)
    if x.dim() == 0:
        return itself_at_zero(x)
    x = compared(x)  # the extreme and the comparison with it read the same bits (decomp/consistent.py)
    extreme = torch.amax(x, dim, keepdim=True) if largest else torch.amin(x, dim, keepdim=True)
    n = x.shape[dim]
    shape = [1] * x.dim()
    shape[dim] = n
    positions = torch.arange(n, device=x.device, dtype=torch.int64).view(shape)
    hit = x == extreme
    if x.dtype.is_floating_point:
        hit = hit | (x != x)
    first = torch.amin(torch.where(hit, positions, n), dim, keepdim=keepdim)
    return (extreme if keepdim else extreme.squeeze(dim)), first


def _arg(x: torch.Tensor, dim: Optional[int], keepdim: bool, largest: bool) -> torch.Tensor:
    if dim is None:  # the position in the flattened tensor; keepdim keeps every dim as size 1
        flat = _first_extreme(x.reshape(-1), 0, False, largest)[1]
        return flat.reshape([1] * x.dim()) if keepdim else flat
    return _first_extreme(x, dim, keepdim, largest)[1]


def argmax(x: torch.Tensor, dim: Optional[int] = None, keepdim: bool = False) -> torch.Tensor:
    return _arg(x, dim, keepdim, largest=True)


def argmin(x: torch.Tensor, dim: Optional[int] = None, keepdim: bool = False) -> torch.Tensor:
    return _arg(x, dim, keepdim, largest=False)


def max_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _first_extreme(x, dim, keepdim, largest=True)


def min_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _first_extreme(x, dim, keepdim, largest=False)


ARG_REDUCTIONS = {aten.argmax.default: argmax, aten.argmin.default: argmin, aten.max.dim: max_dim,
                  aten.min.dim: min_dim}
