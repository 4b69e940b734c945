"""lu_unpack as our kernels: L and U are masks of the packed factor, P replays LAPACK's row swaps.

LU_data holds L below the diagonal (its unit diagonal implied) and U on and above it; pivots[i]
(1-based) is the row that step i of the factorization swapped with row i. Replaying the swaps on the
row order 0..m-1 gives `perm`, the original row that ended at each position, and A = P L U with
P[r, i] = (perm[i] == r). The swaps are sequential (each reads the order the last one left), so they
are unrolled, one gather each: fine for the small factorizations this is for, and above MAX_SWAPS
the op stays PyTorch's.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten
MAX_SWAPS = 32


def lu_unpack(lu: torch.Tensor, pivots: torch.Tensor, unpack_data: bool = True, unpack_pivots: bool = True) -> Any:
    if not lu.dtype.is_floating_point or lu.dim() < 2 or pivots.dtype not in (torch.int32, torch.int64):
        return NotImplemented
    m, n = lu.shape[-2:]
    k = min(m, n)
    if unpack_pivots and k > MAX_SWAPS:
        return NotImplemented
    nothing = lu.new_empty(0)
    lower = upper = permutation = nothing
    if unpack_data:
        lower = lu[..., :, :k].tril(-1) + torch.eye(m, k, dtype=lu.dtype, device=lu.device)
        upper = lu[..., :k, :].triu()
    if unpack_pivots:
        rows = torch.arange(m, device=lu.device)
        order = rows.expand(*lu.shape[:-2], m)
        swaps = pivots.to(torch.int64) - 1
        for i in range(k):
            j = swaps[..., i:i + 1]
            here, there = order[..., i:i + 1], order.gather(-1, j)
            order = torch.where(rows == i, there, torch.where(rows == j, here, order))
        permutation = (order.unsqueeze(-2) == rows.unsqueeze(-1)).to(lu.dtype)
    return permutation, lower, upper


LU_UNPACK = {aten.lu_unpack.default: lu_unpack}
