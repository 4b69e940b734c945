"""`a * b + c` rounded once: `fcompile::fused_multiply_add(a, b, c)`, one primitive of ours.

Our kernels compile without FMA contraction (`_compat.triton_exact_float_options`, and the C++
build's -ffp-contract=off): every multiply and add of a graph rounds on its own, as eager's separate
kernels do. But inside one eager CUDA kernel nvcc contracts by default, and eager's results carry it:
a complex64 product on CUDA is `(fma(a, c, -(b*d)), fma(a, d, b*c))` bit for bit (measured on an H100,
torch 2.11: 0 of 1,024 elements differ; the twice-rounded products differ in 187). The complex
rewrite (complex_pairs.py) writes that form with this op where the graph runs on CUDA, so a
rotary embedding gives eager's bits. Eager's CPU kernels do not contract: the CPU keeps plain ops.

Lowering turns the op into the `fused_multiply_add` primitive (`tl.fma`, `std::fma`).
"""

from __future__ import annotations

import torch


@torch.library.custom_op("fcompile::fused_multiply_add", mutates_args=())
def fused_multiply_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The eager path (a fallback, the kernel check): float32 rounded once (`rounded_once_float32`),
    float16/bfloat16 through it, float64 rounded twice (no wider type to compute in)."""
    dtype = torch.result_type(a, b)
    if dtype == torch.float64:
        return a * b + c
    return rounded_once_float32(a, b, c).to(dtype)


@fused_multiply_add.register_fake
def _(a, b, c):
    shape = torch.broadcast_shapes(a.shape, b.shape, c.shape)
    return a.new_empty(shape, dtype=torch.result_type(a, b))


def rounded_once_float32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a * b + c rounded once to float32 (a, b, c float32 values, or integers below 2^29 for b).

    a * b is exact in float64 (24 + 29 bits) and so is the error e of its sum s with c (TwoSum). s
    rounds to float32 as a * b + c does unless s lies exactly halfway between two float32 values
    while e != 0: then the exact sum lies past the midpoint, on e's side."""
    product = a.to(torch.float64) * b.to(torch.float64)
    addend = c.to(torch.float64)
    s = product + addend
    back = s - addend
    e = (addend - (s - back)) + (product - back)
    rounded = s.to(torch.float32)
    d = s - rounded.to(torch.float64)
    other = s + d  # the float32 neighbour on s's other side when s is a midpoint
    other32 = other.to(torch.float32)
    midpoint = (d != 0) & (other32.to(torch.float64) == other)
    past = torch.where(e > 0, torch.maximum(rounded, other32), torch.minimum(rounded, other32))
    return torch.where(midpoint & (e != 0), past, rounded)
