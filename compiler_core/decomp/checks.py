"""A decomposition's way to raise: eager refuses some inputs only after looking at their values (lengths
that do not add up, a data range that is not finite), and a kernel cannot raise.

`raise_unless(valid)` is zeros of valid's shape, made by an index_select of position 0, or of -1 where
valid is False: that position is out of range, so the runtime raises (IndexError: index out of range in
self) after the kernel ran, and the graph's result is never handed back. Add it to (or subtract it
from) a tensor the result is made of, so the check cannot be dropped as dead code; x + 0 and x - 0
are x, -0.0 included for the subtraction.
"""

from __future__ import annotations

import torch


def raise_unless(valid: torch.Tensor) -> torch.Tensor:
    positions = torch.where(valid, 0, -1).reshape(-1)
    return torch.arange(1, device=valid.device).index_select(0, positions).reshape(valid.shape)
