"""The least common multiple from the greatest common divisor (the `gcd` primitive, ATen's Euclid).

ATen computes lcm(a, b) = |a / g * b| with g = gcd(a, b) (0 where g is 0) in C++ integer arithmetic:
int8, int16 and uint8 operands are promoted to int, so the product and its absolute value are taken
in 32 bits and only the result wraps back (lcm(-100, 90) in int8 is -124: 900 wrapped; in int8 all
along it would be 124). So are ours. The most negative int32 or int64 over a g of -1 traps in eager
(x86's idiv); ours wraps (decomp's truncdiv, codegen/cpp/prelude.py's int_quotient).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

_PROMOTED = (torch.int8, torch.int16, torch.uint8)


def lcm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype != b.dtype or a.dtype.is_floating_point or a.dtype.is_complex or a.dtype == torch.bool:
        return NotImplemented
    g = aten.gcd.default(a, b)
    wide = torch.int32 if a.dtype in _PROMOTED else a.dtype
    g_wide = g.to(wide)
    safe = torch.where(g_wide == 0, torch.ones_like(g_wide), g_wide)
    product = (torch.div(a.to(wide), safe, rounding_mode="trunc") * b.to(wide)).abs()
    return torch.where(g_wide == 0, torch.zeros_like(product), product).to(a.dtype)


DIVISORS = {aten.lcm.default: lcm}
