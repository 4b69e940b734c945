"""Short prefix sums and products (cumsum, cumprod) as a masked reduction.

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

aten = torch.ops.aten
SHORT_SCAN = 1024  # 1024^2 multiply-adds per output row at most


def _short(reference):
    def scan(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None):
        length = x.shape[dim] if x.dim() else 1
        if not isinstance(length, int) or length > SHORT_SCAN:
            return NotImplemented
        return reference(x, dim, dtype=dtype)

    return scan


SCANS = {aten.cumsum.default: _short(refs.cumsum), aten.cumprod.default: _short(refs.cumprod)}
