"""Value ranges: an interval [lo, hi] that every element of a value tree lies in, where one can be shown.

A bilinear upsample reads its input at positions computed from the output's coordinates, clamped to
the input's size: `minimum(to_int64(maximum((x + 0.5) * 0.25 - 0.5, 0)) + 1, 55)`. Such a position
cannot leave [0, 55], so the range check every gathered position gets (and on the GPU the debug
build a `tl.device_assert` needs, ~25x slower on SegFormer's loss) is not needed. This module proves
that by interval arithmetic over the tree: loop variables and index values from the kernel's ranges,
constants as themselves, and each op mapped to an interval that contains every result it can give.

Float ops round; each float result is widened by a relative step larger than its dtype's rounding
error, so the interval still contains what the hardware computes. A leaf whose value is not known
(a float load, a reduction result) makes the whole tree unknown (None): nothing is claimed about it.
Every interval is finite, so no value in a proven tree is NaN or infinite.

    value_range(value, {"x0": 224})   # (0.0, 55.0), or None

`magnitude_range` asks less: an interval for the elements that are not NaN, where NaN may occur. sin,
cos, tanh and sigmoid bound any argument that way, so `sin(sin(x) * 1.01 + 0.1)` has its argument in
[-0.91, 1.11] whatever x is: the C++ backend then skips the large-argument reduction of that sine.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from compiler_core.ir.symbolic import is_symbolic
from compiler_core.ir.values import Cast, Constant, IndexValue, Load, Op, Value, _memoized

Interval = tuple[float, float]

# Past this magnitude a float64 interval no longer holds integers exactly (and int64 arithmetic
# could come close to wrapping): give up rather than reason about it.
LIMIT = float(2**52)
# Relative widening of a float result, well above the rounding error of its dtype (fp32: 6e-8).
_WIDEN = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-3}
_ALWAYS_BOOL = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor")
_INTEGER_LOADS = {torch.bool: (0, 1), torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (-32768, 32767)}


def value_range(value: Value, ranges: dict[str, int]) -> Optional[Interval]:
    """An interval holding every element of `value` when loop variable v runs over [0, ranges[v]),
    or None if none can be shown."""
    return _memoized(lambda v, recurse: _range(v, recurse, ranges))(value)


def magnitude_range(ranges: dict[str, int]) -> Callable[[Value], Optional[Interval]]:
    """A function giving for a value an interval that holds its every element but NaN (NaN allowed,
    infinities not), or None; it remembers what it has seen, so one per kernel serves all its values."""
    return _memoized(lambda v, recurse: _range(v, recurse, ranges, nan=True))


# Bounded whatever their argument, NaN aside (the NaN of a NaN argument).
_BOUNDED_FUNCTIONS = {"sin": (-1.0, 1.0), "cos": (-1.0, 1.0), "tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0)}


def _range(v: Value, recurse, ranges: dict[str, int], nan: bool = False) -> Optional[Interval]:
    if isinstance(v, Constant):
        x = float(v.value)
        return _checked((x, x), v.dtype)
    if isinstance(v, IndexValue):
        bounds = v.index.bounds(ranges)
        if bounds is None or is_symbolic(bounds[0]) or is_symbolic(bounds[1]):  # symbolic: not shown
            return None
        return _checked((float(bounds[0]), float(bounds[1])), v.dtype)
    if isinstance(v, Load):
        known = _INTEGER_LOADS.get(v.dtype)
        return None if known is None else (float(known[0]), float(known[1]))
    if isinstance(v, Cast):
        if nan and v.arg.dtype.is_floating_point and not v.dtype.is_floating_point and v.dtype != torch.bool:
            return None  # a NaN converted to an integer is any integer
        arg = recurse(v.arg)
        return None if arg is None else _cast(arg, v.dtype)
    if isinstance(v, Op):
        if v.op in _ALWAYS_BOOL:  # 0 or 1 whatever the operands, NaN included
            return 0.0, 1.0
        if nan and v.op in _BOUNDED_FUNCTIONS and v.dtype.is_floating_point:
            return _checked(_BOUNDED_FUNCTIONS[v.op], v.dtype)
        clamp = _clamp_of(v)
        if clamp is not None:  # where(x < c, c, x): at least c, as maximum(x, c) is
            name, x, c = clamp
            bounds = recurse(x), recurse(c)
            out = None if None in bounds else _op(name, list(bounds), v.dtype)
            return None if out is None else _checked(out, v.dtype)
        # a where's condition only picks a branch: what it is does not matter
        args = [(0.0, 1.0) if v.op == "where" and i == 0 else recurse(a) for i, a in enumerate(v.args)]
        if any(a is None for a in args):
            return None
        out = _op(v.op, args, v.dtype)
        return None if out is None else _checked(out, v.dtype)
    return None  # a reduction result: anything


def _clamp_of(v: Op) -> Optional[tuple[str, Value, Value]]:
    """A clamp written as eager's select (lowering's clamp by a number, relu): where(x < c, c, x) and
    where(x <= c, c, x) are ("maximum", x, c), where(x > c, c, x) and where(x >= c, c, x) are
    ("minimum", x, c); else None."""
    if v.op != "where" or not isinstance(v.args[0], Op) or v.args[0].op not in ("lt", "le", "gt", "ge"):
        return None
    x, c = v.args[0].args
    if v.args[1] == c and v.args[2] == x:
        return ("maximum" if v.args[0].op in ("lt", "le") else "minimum"), x, c
    return None


def _checked(interval: Interval, dtype: torch.dtype) -> Optional[Interval]:
    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > LIMIT:
        return None
    if dtype.is_floating_point:
        widen = _WIDEN.get(dtype, 1e-2)
        lo, hi = lo - abs(lo) * widen, hi + abs(hi) * widen
    elif dtype == torch.bool:
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    elif not _fits(lo, hi, dtype):
        return None  # integer arithmetic that may wrap
    return lo, hi


def _fits(lo: float, hi: float, dtype: torch.dtype) -> bool:
    info = torch.iinfo(dtype)
    return info.min <= lo and hi <= info.max


def _cast(arg: Interval, dtype: torch.dtype) -> Optional[Interval]:
    lo, hi = arg
    if dtype == torch.bool:
        return (0.0, 1.0) if lo <= 0 <= hi else (1.0, 1.0)
    if dtype.is_floating_point:
        return _checked(arg, dtype)
    # float -> integer truncates toward zero (C's cast, Triton's .to); monotone, so the ends map to ends
    lo, hi = float(math.trunc(lo)), float(math.trunc(hi))
    return (lo, hi) if _fits(lo, hi, dtype) else None


def _op(name: str, args: list[Interval], dtype: torch.dtype) -> Optional[Interval]:
    if name in ("add", "sub", "mul"):
        (a_lo, a_hi), (b_lo, b_hi) = args
        if name == "add":
            return a_lo + b_lo, a_hi + b_hi
        if name == "sub":
            return a_lo - b_hi, a_hi - b_lo
        ends = [a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi]
        return min(ends), max(ends)
    if name in ("maximum", "minimum"):
        (a_lo, a_hi), (b_lo, b_hi) = args
        pick = max if name == "maximum" else min
        return pick(a_lo, b_lo), pick(a_hi, b_hi)
    if name == "where":
        _, (a_lo, a_hi), (b_lo, b_hi) = args
        return min(a_lo, b_lo), max(a_hi, b_hi)
    if name == "neg":
        lo, hi = args[0]
        return -hi, -lo
    if name == "abs":
        lo, hi = args[0]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    if name in ("floor", "ceil", "trunc", "round"):
        lo, hi = args[0]
        rounding = {"floor": math.floor, "ceil": math.ceil, "trunc": math.trunc, "round": round}[name]
        return float(rounding(lo)), float(rounding(hi))
    if name in ("truediv", "floordiv", "truncdiv"):
        (a_lo, a_hi), (b_lo, b_hi) = args
        if b_lo <= 0 <= b_hi:
            return None  # a divisor that may be zero
        ends = [a_lo / b_lo, a_lo / b_hi, a_hi / b_lo, a_hi / b_hi]
        lo, hi = min(ends), max(ends)
        if name == "floordiv":
            return float(math.floor(lo)), float(math.floor(hi))
        if name == "truncdiv":
            return float(math.trunc(lo)), float(math.trunc(hi))
        return lo, hi
    if name == "remainder" and not dtype.is_floating_point:
        (a_lo, a_hi), (b_lo, b_hi) = args
        if b_lo > 0:  # takes the sign of the divisor: [0, b - 1], or the dividend itself when it is smaller
            return (a_lo, a_hi) if 0 <= a_lo and a_hi < b_lo else (0.0, b_hi - 1)
        return None
    if name == "sigmoid":
        return 0.0, 1.0
    if name in ("tanh", "sin", "cos"):
        return -1.0, 1.0
    return None  # an op this analysis does not follow
