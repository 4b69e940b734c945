"""Algebraic simplification and constant folding of a kernel's value trees.

Every rule is exact: the simplified tree gives the same bits as the original for every input,
NaN, infinities and signed zeros included. That rules out `x + 0.0 -> x` (-0.0 + 0.0 is +0.0) and
`x * 0 -> 0` (inf * 0 is NaN); what is left:

    x * 1, 1 * x, x / 1            -> x          (same dtype)
    x - 0.0, x + (-0.0)            -> x          (floating point: keeps x's sign of zero)
    x + 0, 0 + x, x - 0            -> x          (integers)
    -(-x)                          -> x
    where(c, where(c, a, _), b)    -> where(c, a, b)    (and the same in the else branch)
    to_T(x) where x is already T   -> x
    constant op constant           -> one constant, computed by torch in the op's dtype
    constant comparison constant   -> True or False
    x and True, x or False         -> x          (bool)
    where(True, a, b), where(False, a, b) -> a, b
    constant position comparison constant -> True or False (a select of a stacked or
                                     concatenated tensor: which piece it reads is known when printed)

    value, counts = simplify_value(value)   # counts: Counter of the rules that fired
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Optional

import torch

from compiler_core.ir.values import Cast, Constant, IndexValue, Load, Op, Value

# The rules by the names the pass log prints.
MUL_ONE = "x * 1 -> x"
DIV_ONE = "x / 1 -> x"
SUB_ZERO = "x - 0.0 -> x"
ADD_ZERO_INT = "x + 0 -> x (integers)"
DOUBLE_NEG = "-(-x) -> x"
NESTED_WHERE = "where(c, where(c, a, _), b) -> where(c, a, b)"
SAME_CAST = "to_T(x: T) -> x"
FOLD = "constant op constant -> constant"
FOLD_COMPARE = "constant comparison constant -> True/False"
BOOL_IDENTITY = "x and True, x or False -> x"
CONSTANT_WHERE = "where(True/False, a, b) -> a / b"
CONSTANT_POSITION = "a constant position compared with a constant -> True/False"

# Ops folded when every argument is a constant (torch computes them in the op's dtype, so the result
# is the value the kernel would have computed).
_FOLDABLE = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div,
             "maximum": torch.maximum, "minimum": torch.minimum, "neg": torch.neg}
# Floating-point functions of constants, folded too (torch's value is eager's): `atan2(1.0, 2.0)` of
# two `full_like`s reached the Triton printer as a helper call on two Python floats, which has no
# `.to` (the kernel failed to run).
_FOLDABLE_FLOAT = {name: getattr(torch, name) for name in (
    "abs", "reciprocal", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid",
    "floor", "ceil", "trunc", "round", "sign", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
    "atanh", "log2", "log10", "exp2", "erfc", "atan2", "hypot", "pow", "fmod", "copysign", "remainder")}
_COMPARISONS = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


def simplify_value(value: Value) -> tuple[Value, Counter]:
    """The tree with every rule applied bottom-up until none fires, and how often each fired."""
    counts: Counter = Counter()
    done: dict[int, tuple[Value, Value]] = {}  # a shared subtree is simplified once (ir/values.py says why)

    def visit(v: Value) -> Value:
        hit = done.get(id(v))
        if hit is None:
            hit = done[id(v)] = (v, simplified(v))
        return hit[1]

    def simplified(v: Value) -> Value:
        if isinstance(v, Op):
            v = Op(v.op, tuple(visit(a) for a in v.args), v.dtype, v.origins)
            while True:
                simpler, rule = _rewrite(v)
                if rule is None:
                    return v
                counts[rule] += 1
                if not isinstance(simpler, Op):
                    return simpler
                v = simpler
        if isinstance(v, Cast):
            arg = visit(v.arg)
            if _dtype(arg) == v.dtype and not isinstance(arg, Constant):
                counts[SAME_CAST] += 1
                return arg
            return Cast(arg, v.dtype, v.origins)
        if isinstance(v, Load) and (v.mask is not None or v.indirect):
            # A load's mask and gathered positions are values too: an upsample's clamped coordinates
            # came with `i * 1 + 0` and int64 casts of int64 values into every gather of SegFormer's loss.
            mask = None if v.mask is None else visit(v.mask)
            positions = tuple(visit(t.value) for t in v.indirect)
            if mask is v.mask and all(new is t.value for new, t in zip(positions, v.indirect)):
                return v
            return dataclasses.replace(v, mask=mask, indirect=tuple(dataclasses.replace(t, value=new)
                                                                    for new, t in zip(positions, v.indirect)))
        return v  # constants, index values, reduction results

    return visit(value), counts


def _rewrite(v: Op) -> tuple[Value, Optional[str]]:
    """One rule applied at the root of `v`, or (v, None)."""
    args = v.args
    if all(isinstance(a, Constant) for a in args) and (
            v.op in _FOLDABLE or (v.op in _FOLDABLE_FLOAT and v.dtype.is_floating_point)):
        folded = _fold(v)
        if folded is not None:
            return folded, FOLD
    if v.op in _COMPARISONS and v.dtype == torch.bool and all(_constant_value(a) is not None for a in args):
        tensors = [torch.tensor(_constant_value(a), dtype=a.dtype) for a in args]
        rule = FOLD_COMPARE if all(isinstance(a, Constant) for a in args) else CONSTANT_POSITION
        return Constant(bool(_COMPARISONS[v.op](*tensors).item()), torch.bool), rule
    if v.op in ("logical_and", "logical_or") and v.dtype == torch.bool:
        neutral = v.op == "logical_and"  # True for and, False for or
        for keep, other in ((args[0], args[1]), (args[1], args[0])):
            if isinstance(other, Constant) and other.dtype == torch.bool and _dtype(keep) == torch.bool:
                return (keep if bool(other.value) == neutral else other), BOOL_IDENTITY
    if v.op == "where" and isinstance(args[0], Constant):
        chosen = args[1] if bool(args[0].value) else args[2]
        if _dtype(chosen) == v.dtype:
            return chosen, CONSTANT_WHERE
    if v.op == "mul" and len(args) == 2:
        for keep, one in ((args[0], args[1]), (args[1], args[0])):
            if _is_constant(one, 1) and _dtype(keep) == v.dtype:
                return keep, MUL_ONE
    if v.op == "truediv" and _is_constant(args[1], 1) and _dtype(args[0]) == v.dtype:
        return args[0], DIV_ONE
    if v.dtype.is_floating_point and _dtype(args[0]) == v.dtype and len(args) == 2:
        if (v.op == "sub" and _is_zero(args[1], negative=False)) or \
                (v.op == "add" and _is_zero(args[1], negative=True)):
            return args[0], SUB_ZERO
    if not v.dtype.is_floating_point and v.dtype != torch.bool and v.op in ("add", "sub") and len(args) == 2:
        pairs = ((args[0], args[1]), (args[1], args[0])) if v.op == "add" else ((args[0], args[1]),)
        for keep, zero in pairs:
            if _is_constant(zero, 0) and _dtype(keep) == v.dtype:
                return keep, ADD_ZERO_INT
    if v.op == "neg" and isinstance(args[0], Op) and args[0].op == "neg" and args[0].dtype == v.dtype:
        return args[0].args[0], DOUBLE_NEG
    if v.op == "where":
        cond, then, other = args
        if isinstance(then, Op) and then.op == "where" and then.args[0] == cond and then.dtype == v.dtype:
            return Op("where", (cond, then.args[1], other), v.dtype, v.origins), NESTED_WHERE
        if isinstance(other, Op) and other.op == "where" and other.args[0] == cond and other.dtype == v.dtype:
            return Op("where", (cond, then, other.args[2]), v.dtype, v.origins), NESTED_WHERE
    return v, None


def _constant_value(v: Value) -> Optional[float]:
    """A constant's value, or a constant position's (an index value with no loop variable in it). Only
    comparisons fold positions: as a value the position stays an index value, which keeps its integer
    type in Triton (a bare literal there is int32)."""
    if isinstance(v, Constant):
        return v.value
    if isinstance(v, IndexValue) and not v.index.terms and type(v.index.const) is int:
        return v.index.const
    return None


def _dtype(v: Value) -> Optional[torch.dtype]:
    return getattr(v, "dtype", None)


def _is_constant(v: Value, number: float) -> bool:
    return isinstance(v, Constant) and not isinstance(v.value, bool) and v.value == number


def _is_zero(v: Value, negative: bool) -> bool:
    """A floating constant 0.0 with the given sign."""
    if not (isinstance(v, Constant) and isinstance(v.value, float) and v.value == 0.0):
        return False
    return (math.copysign(1.0, v.value) < 0) == negative


def _fold(v: Op) -> Optional[Constant]:
    """The constant torch computes for `v` in its dtype; None for what a Constant cannot hold exactly
    the way the printers print it (bool results, integer division)."""
    if v.dtype == torch.bool or (v.op == "truediv" and not v.dtype.is_floating_point):
        return None
    try:
        tensors = [torch.tensor(a.value, dtype=v.dtype) for a in v.args]
        result = (_FOLDABLE.get(v.op) or _FOLDABLE_FLOAT[v.op])(*tensors).item()
    except (RuntimeError, TypeError, OverflowError):
        return None
    if isinstance(result, float) and not math.isfinite(result):
        return None  # the printers write finite literals; leave inf and NaN to the op
    return Constant(result, v.dtype)
