"""The overwriting scatter as one primitive: `fcompile::scatter_store(self, dim, index, src)`.

scatter_family.py writes `scatter` and `index_copy` as a dense masked reduction over (positions x
scattered elements): deterministic, but quadratic, so above its cap those calls used to stay
PyTorch's. Above the cap they come here instead: a custom op with `scatter`'s meaning that lowering
(ir/lowering/scatter.py) turns into a copy of `self` followed by a loop over the source elements
that stores each at its position, one plain store per element.

Where two elements land on one position, eager PyTorch keeps the last in index order on the CPU
(one loop along `dim`) and whichever store lands last on CUDA (the docs call the result
nondeterministic). Our C++ kernel runs an overwriting scatter on one thread in index order, so it
keeps the same element as eager CPU; a Triton kernel stores from many programs at once, as eager
CUDA does. A scatter of one value (`scatter(dim, index, value)`) writes the same value wherever it
lands, so it is deterministic on both.
"""

from __future__ import annotations

from typing import Optional

import torch

# Any real dtype but bool stores as it is: no atomics, no detour through fp32.
STORE_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                torch.int16, torch.int8, torch.uint8)


@torch.library.custom_op("fcompile::scatter_store", mutates_args=())
def scatter_store_op(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """aten.scatter's result, contiguous (the eager path of a fallback and of the kernel check)."""
    return self.scatter(dim, index, src).contiguous()


@scatter_store_op.register_fake
def _(self, dim, index, src):
    return self.new_empty(self.shape)


def store_scatter(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> Optional[torch.Tensor]:
    """self.scatter(dim, index, src) through fcompile::scatter_store, or None where it does not apply
    (another dtype, or sizes that are not plain ints). `src` is read only where `index` has elements."""
    if self.dtype not in STORE_DTYPES or src.dtype != self.dtype or index.dtype != torch.int64:
        return None
    if not all(isinstance(s, int) for t in (self, index, src) for s in t.shape):
        return None
    return scatter_store_op(self, dim, index, src)
