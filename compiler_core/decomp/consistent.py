"""Values that decompositions compare with each other must be the same bits at every read.

A pointwise producer fused into a kernel is recomputed wherever a read asks for it. In a C++ kernel one
read may sit in a vectorised loop (glibc's libmvec sinf, expf...) and another in a scalar one or a
loop's scalar tail (libm's), and those can differ in the last bit. For arithmetic that is rounding
noise; for a decomposition that *compares* elements it is a wrong answer: sort's ranks saw x_i < x_j
and x_j < x_i both hold and left a position empty, argmax of x.sin() missed the maximum it had just
computed (24 of 30 random rows), cummax returned index -1.

Since 2026-12-05 the C++ kernels use no libmvec (codegen/cpp/prelude.py): every function rounds the same
in every loop, which fixes the class at its cause. The sorts, arg-reductions and running extremes still
compare `compared(x)`: on the CPU, x through a
reduction over a size-1 dim, which the scheduler never inlines at another element, so x is stored once
and every comparison reads the stored bits. It costs one copy of the input there. On CUDA a function
rounds the same wherever it runs in a Triton kernel, and x is used as it is.
"""

from __future__ import annotations

import torch


def compared(x: torch.Tensor) -> torch.Tensor:
    if x.device.type != "cpu" or x.dim() == 0 or x.dtype == torch.bool or x.is_complex():
        return x
    return x.unsqueeze(-1).amax(-1)
