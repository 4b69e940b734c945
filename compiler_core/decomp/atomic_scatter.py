"""The accumulating scatter as one primitive: `fcompile::scatter_add(self, dim, index, src)`.

scatter_family.py turns a scatter into a dense masked reduction over (positions x scattered
elements): deterministic, but quadratic. Above its cap, or where that costs several times what
one add per element costs, the sums go here instead: a custom op with scatter_add's meaning that
lowering (ir/lowering/scatter.py) turns into a copy of `self` followed by a loop over the source
elements that adds each into its position with an atomic add (Triton `tl.atomic_add`, C++
`#pragma omp atomic`), as Inductor and eager CUDA do.

Floating-point sums then happen in whatever order the threads reach them, so the last bits can
differ from run to run (eager CUDA's scatter_add and embedding backward and Inductor's share this;
eager CPU adds in index order). Integer sums are exact in any order. bf16 and fp16 are summed in an
fp32 copy and rounded once at the end, as Inductor does for the embedding backward: no 16-bit
atomics, and no rounding per add. Other dtypes (8- and 16-bit integers, bool, complex) are not
offered here: the caller keeps its dense form or PyTorch's call.
"""

from __future__ import annotations

from typing import Optional

import torch

# Computed in their own dtype with one atomic add per element; LOW_PRECISION goes through fp32.
ATOMIC_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
LOW_PRECISION = (torch.bfloat16, torch.float16)
# The dense form does (scattered elements x positions) compare-and-selects, the atomic form one add
# per scattered element plus a copy of self. Below this ratio the dense form stays: it is deterministic
# and fuses with what reads it, and for a handful of positions it is no slower. A judgement, not a
# measurement: an atomic add costs a few plain ones when lanes collide.
DENSE_WORK_PER_ATOMIC = 8

@torch.library.custom_op("fcompile::scatter_add", mutates_args=())
def scatter_add_op(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """aten.scatter_add's result, contiguous (the eager path of a fallback and of the kernel check)."""
    return self.scatter_add(dim, index, src).contiguous()


@scatter_add_op.register_fake
def _(self, dim, index, src):
    return self.new_empty(self.shape)


def atomic_cheaper(self: torch.Tensor, dim: int, index: torch.Tensor) -> bool:
    """Whether the atomic form does several times less work than the dense one."""
    dense = index.numel() * self.shape[dim]
    return dense > DENSE_WORK_PER_ATOMIC * (index.numel() + self.numel())


def atomic_scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor,
                       src: torch.Tensor) -> Optional[torch.Tensor]:
    """self.scatter_add(dim, index, src) through fcompile::scatter_add, or None for a dtype it does not
    take (see the module docstring). `src` is read only where `index` has elements, as in ATen."""
    dtype = self.dtype
    if dtype in LOW_PRECISION:
        summed = scatter_add_op(self.to(torch.float32), dim, index, src.to(torch.float32))
        return summed.to(dtype)
    if dtype not in ATOMIC_DTYPES or src.dtype != dtype or index.dtype != torch.int64:
        return None
    return scatter_add_op(self, dim, index, src)
