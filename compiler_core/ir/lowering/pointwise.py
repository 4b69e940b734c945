"""Lowering handlers of pointwise primitives: arithmetic, comparisons, logic, casts, fills, positions."""

from __future__ import annotations

import math
from typing import Any, Callable, Union

import torch

from compiler_core import _compat
from compiler_core.ir.graph import ViewRef
from compiler_core.ir.index import Index
from compiler_core.ir.lowering.core import Lowering, Unsupported, compute_dtype, scalar_of
from compiler_core.ir.values import (
    Cast,
    Constant,
    IndexValue,
    Op,
    Value,
)


def elementwise(prim: str, arity: int) -> Callable:
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        args = list(node.args[:arity])
        if len(args) != arity:
            raise Unsupported(f"expected {arity} arguments")
        alpha = node.kwargs.get("alpha", 1)
        cdt = compute_dtype(val.dtype)
        if prim in ("floordiv", "truncdiv", "remainder", "maximum", "minimum", "add", "sub", "mul", "neg",
                    "abs", "sign", "truediv", "fmod", "gcd"):
            operand_dtype = cdt
        else:
            operand_dtype = cdt if cdt.is_floating_point else torch.float32

        def body(names: list[str]) -> Value:
            vals = [lw.load(a, tuple(val.shape), names, operand_dtype) for a in args]
            if alpha != 1 and prim in ("add", "sub"):
                vals[1] = Op("mul", (vals[1], Constant(scalar_of(alpha, operand_dtype), operand_dtype)), operand_dtype)
            return Op(prim, tuple(vals), operand_dtype)

        return lw.pointwise(node, val, body)

    return handler


def compare(prim: str) -> Callable:
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        a, b = node.args[:2]
        cdt = compute_dtype(torch.result_type(*(_meta_or_scalar(x) for x in (a, b))))

        def body(names: list[str]) -> Value:
            return Op(prim, (lw.load(a, tuple(val.shape), names, cdt), lw.load(b, tuple(val.shape), names, cdt)),
                      torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def logical(prim: str, arity: int) -> Callable:
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        if val.dtype != torch.bool:
            raise Unsupported("bitwise ops on integers")

        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, torch.bool) for a in node.args[:arity])
            return Op(prim, vals, torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def bitwise(prim: str, arity: int) -> Callable:
    """bitwise_* on integers; on bools the logical op of the same name (a bool is 0 or 1)."""
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        if val.dtype == torch.bool:
            return logical(prim.replace("bitwise_", "logical_"), arity)(lw, node, val)
        if val.dtype.is_floating_point:
            raise Unsupported("bitwise ops on floats raise in eager PyTorch")

        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, val.dtype) for a in node.args[:arity])
            return Op(prim, vals, val.dtype)

        return lw.pointwise(node, val, body)

    return handler


def shift(prim: str) -> Callable:
    """Bit shifts of integers (both operands in the result's type, as ATen computes them); floats and
    bools stay PyTorch's call (eager refuses bools; a float shift is a multiply no model asks of us)."""
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        if val.dtype.is_floating_point or val.dtype.is_complex or val.dtype == torch.bool:
            raise Unsupported(f"{prim} of {val.dtype} tensors")

        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, val.dtype) for a in node.args[:2])
            return Op(prim, vals, val.dtype)

        return lw.pointwise(node, val, body)

    return handler


def logical_any(prim: str) -> Callable:
    """logical_xor of any dtypes: each operand is true when nonzero (NaN included)."""
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, torch.bool) for a in node.args[:2])
            return Op(prim, vals, torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def float_test(kind: str) -> Callable:
    """isinf / isposinf / isneginf / signbit: a bool from one operand; integers are never infinite,
    and an integer's sign bit is set when it is negative."""
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        x = node.args[0]
        src = _meta_or_scalar(x).dtype
        shape = tuple(val.shape)
        if not src.is_floating_point:
            if kind == "signbit" and src.is_signed and src != torch.bool:
                return lw.pointwise(node, val, lambda names: Op("lt", (lw.load(x, shape, names, src),
                                                                       Constant(0, src)), torch.bool))
            return lw.pointwise(node, val, lambda names: Constant(False, torch.bool))
        cdt = compute_dtype(src)
        inf = Constant(float("inf"), cdt)

        def body(names: list[str]) -> Value:
            v = lw.load(x, shape, names, cdt)
            if kind == "signbit":
                return Op("signbit", (v,), torch.bool)
            if kind == "isinf":
                return Op("eq", (Op("abs", (v,), cdt), inf), torch.bool)
            if kind == "isposinf":
                return Op("eq", (v, inf), torch.bool)
            return Op("eq", (v, Constant(float("-inf"), cdt)), torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def fmax_fmin(prim: str) -> Callable:
    """fmax/fmin: like maximum/minimum, but a NaN operand loses to a number (NaN only if both are)."""
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        cdt = compute_dtype(val.dtype)
        a, b = node.args[:2]

        def body(names: list[str]) -> Value:
            x, y = (lw.load(v, tuple(val.shape), names, cdt) for v in (a, b))
            both = Op(prim, (x, y), cdt)
            if not cdt.is_floating_point:
                return both
            return Op("where", (Op("isnan", (x,), torch.bool), y,
                                Op("where", (Op("isnan", (y,), torch.bool), x, both), cdt)), cdt)

        return lw.pointwise(node, val, body)

    return handler


def _meta_or_scalar(x: Any) -> Any:
    return _compat.fake_value(x) if isinstance(x, torch.fx.Node) else x


def isnan(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    x = node.args[0]
    src = _meta_or_scalar(x).dtype
    if not src.is_floating_point:
        return lw.pointwise(node, val, lambda names: Constant(False, torch.bool))
    return lw.pointwise(node, val, lambda names: Op("isnan", (lw.load(x, tuple(val.shape), names,
                                                                      compute_dtype(src)),), torch.bool))


def where_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    cond, a, b = node.args
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        shape = tuple(val.shape)
        return Op("where", (lw.load(cond, shape, names, torch.bool), lw.load(a, shape, names, cdt),
                            lw.load(b, shape, names, cdt)), cdt)

    return lw.pointwise(node, val, body)


def clamp(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    x = node.args[0]
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    cdt = compute_dtype(val.dtype)

    def bound(v: Value, b: object, names: list[str], side: str) -> Value:
        limit = lw.load(b, tuple(val.shape), names, cdt)
        if isinstance(b, (int, float)):
            return clamped_by_a_number(v, limit, b, side, val.device)
        return Op("maximum" if side == "min" else "minimum", (v, limit), cdt)  # eager's, for a tensor bound

    def body(names: list[str]) -> Value:
        v = lw.load(x, tuple(val.shape), names, cdt)
        if lo is not None:
            v = bound(v, lo, names, "min")
        if hi is not None:
            v = bound(v, hi, names, "max")
        return v

    return lw.pointwise(node, val, body)


def clamped_by_a_number(v: Value, limit: Value, number: Union[int, float], side: str,
                        device: torch.device) -> Value:
    """`v` clamped from below (side "min") or above ("max") by `number`, as eager rounds the ties.

    Both devices keep a NaN x. Eager's CPU clamp keeps x unless it lies beyond the bound (std::max(x, lo)
    and vmaxps(lo, x) alike: relu(-0.0) and clamp(-0.0, min=0.0) are -0.0), and a NaN bound gives NaN
    everywhere. Eager's CUDA clamp is fmaxf/fminf of the bound, which ignore a NaN bound and order -0.0
    below 0.0 (measured on an H100: relu(-0.0) is 0.0, clamp(-1.5, -0.0, 0.0) is -0.0): of two equal
    values the bound wins only when it is the larger zero (0.0 from below, -0.0 from above)."""
    if isinstance(number, float) and math.isnan(number):
        if device.type == "cuda":
            return v
        return Op("maximum" if side == "min" else "minimum", (v, limit), v.dtype)
    bound_wins_ties = device.type == "cuda" and number == 0 and (
        math.copysign(1.0, number) > 0) == (side == "min")
    compare = {("min", False): "lt", ("min", True): "le", ("max", False): "gt", ("max", True): "ge"}
    beyond = Op(compare[side, bound_wins_ties], (v, limit), torch.bool)
    return Op("where", (beyond, limit, v), v.dtype)


def relu_or_maximum(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    if node.target is torch.ops.aten.relu.default:  # a clamp from below by 0 (eager's relu is one)
        cdt = compute_dtype(val.dtype)
        x = node.args[0]
        return lw.pointwise(node, val, lambda names: clamped_by_a_number(
            lw.load(x, tuple(val.shape), names, cdt), Constant(scalar_of(0, cdt), cdt), 0, "min", val.device))
    return elementwise("maximum", 2)(lw, node, val)


def pow_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    base, exponent = node.args[:2]
    cdt = compute_dtype(val.dtype)
    if isinstance(base, torch.fx.Node) and isinstance(exponent, (int, float)) and float(exponent) in (
            0.5, -0.5, 1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.0):
        e = float(exponent)

        def body(names: list[str]) -> Value:
            x = lw.load(base, tuple(val.shape), names, cdt)
            if e == 0.5:
                return Op("sqrt", (x,), cdt)
            if e == -0.5:
                return Op("rsqrt", (x,), cdt)
            if e == 0.0:
                return Constant(scalar_of(1, cdt), cdt)
            result = x
            for _ in range(int(abs(e)) - 1):
                result = Op("mul", (result, x), cdt)
            return Op("reciprocal", (result,), cdt) if e < 0 else result

        if e < 0 and not cdt.is_floating_point:
            raise Unsupported("negative integer power of an integer raises in eager PyTorch")
        return lw.pointwise(node, val, body)
    if val.dtype == torch.bool or (not cdt.is_floating_point and isinstance(exponent, (int, float))
                                   and not isinstance(exponent, bool) and exponent < 0):
        raise Unsupported("a bool power, or a negative scalar power of an integer (raises in eager PyTorch)")
    if any(isinstance(a, (torch.SymInt, torch.SymFloat)) for a in (base, exponent)):
        raise Unsupported("symbolic scalar")
    return lw.pointwise(node, val, lambda names: Op("pow", tuple(lw.load(a, tuple(val.shape), names, cdt)
                                                                 for a in (base, exponent)), cdt))


def fma(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """prims.fma(a, b, c) = a * b + c. torch's decompositions emit it (addcmul in Adam's second moment,
    lerp); a multiply and an add, rounded twice, as eager's CPU kernels compute it: no new primitive."""
    a, b, c = node.args[:3]
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        x, y, z = (lw.load(v, tuple(val.shape), names, cdt) for v in (a, b, c))
        return Op("add", (Op("mul", (x, y), cdt), z), cdt)

    return lw.pointwise(node, val, body)


def round_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """round(x, decimals) as ATen computes it: scale by 10**|decimals|, round half to even, unscale."""
    x = node.args[0]
    decimals = node.args[1] if len(node.args) > 1 else node.kwargs.get("decimals", 0)
    cdt = compute_dtype(val.dtype)
    if not cdt.is_floating_point:
        return lw.pointwise(node, val, lambda names: lw.load(x, tuple(val.shape), names, cdt))
    scale = Constant(float(10 ** abs(int(decimals))), cdt)

    def body(names: list[str]) -> Value:
        v = lw.load(x, tuple(val.shape), names, cdt)
        if decimals == 0:
            return Op("round", (v,), cdt)
        if decimals < 0:
            return Op("mul", (Op("round", (Op("truediv", (v, scale), cdt),), cdt), scale), cdt)
        return Op("truediv", (Op("round", (Op("mul", (v, scale), cdt),), cdt), scale), cdt)

    return lw.pointwise(node, val, body)


def cast_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != lw.device:
        raise Unsupported("device transfer")
    x = node.args[0]
    return lw.pointwise(node, val, lambda names: lw.load(x, tuple(val.shape), names, val.dtype))


def copy_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    # clone(x) / copy(dst, src): the source broadcast to the output shape and dtype.
    src = node.args[1] if node.target is torch.ops.aten.copy.default else node.args[0]
    return lw.pointwise(node, val, lambda names: lw.load(src, tuple(val.shape), names, val.dtype))


def fill_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    target = node.target
    if target in (torch.ops.aten.full.default,):
        value = node.args[1]
    elif target in (torch.ops.aten.zeros.default,):
        value = 0
    elif target in (torch.ops.aten.ones.default,):
        value = 1
    elif target is torch.ops.aten.scalar_tensor.default:
        value = node.args[0]
    elif target in (torch.ops.aten.fill.Scalar, torch.ops.aten.fill.Tensor, torch.ops.aten.full_like.default):
        value = node.args[1]
    elif target in (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_like.default,
                    torch.ops.aten.new_empty.default, torch.ops.aten.zero.default, torch.ops.aten.empty_strided.default,
                    torch.ops.aten.new_empty_strided.default):
        value = 0  # uninitialized memory may hold anything: zeros, made by a kernel that fuses
    else:
        raise Unsupported("fill variant")
    if isinstance(value, torch.fx.Node):  # fill.Tensor: a 0-d tensor's value (or a size), broadcast and cast
        fake = _compat.fake_value(value)
        if isinstance(fake, torch.Tensor) and fake.dim() != 0:
            raise Unsupported("fill with a tensor value that is not 0-d")
        return lw.pointwise(node, val, lambda names: lw.load(value, tuple(val.shape), names, val.dtype))
    return lw.pointwise(node, val, lambda names: Constant(scalar_of(value, val.dtype), val.dtype))


def arange(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    args = list(node.args)
    if node.target is torch.ops.aten.arange.default:
        start, step = 0, 1
    elif node.target is torch.ops.aten.arange.start:
        start, step = args[0], 1
    elif node.target is torch.ops.aten.arange.start_step:
        # `step` has a default: torch's references call arange.start_step(start, end) without it
        start, step = args[0], args[2] if len(args) > 2 else node.kwargs.get("step", 1)
    elif node.target is torch.ops.prims.iota.default:
        start, step = node.kwargs["start"], node.kwargs["step"]
    else:
        raise Unsupported("arange variant")
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        position = Cast(IndexValue(Index.var(names[0]), torch.int64), cdt)
        return Op("add", (Op("mul", (position, Constant(scalar_of(step, cdt), cdt)), cdt),
                          Constant(scalar_of(start, cdt), cdt)), cdt)

    return lw.pointwise(node, val, body)


def recurrence_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """fcompile::three_term_recurrence(x, n, p, q, coefficients): one `recurrence` op per element, the
    degree as int64 and the eight coefficients as constants of the computation dtype."""
    x, n, p, q, coefficients = node.args
    cdt = compute_dtype(val.dtype)
    if not cdt.is_floating_point or len(coefficients) != 8:
        raise Unsupported("a recurrence of a non-float dtype")

    def body(names: list[str]) -> Value:
        shape = tuple(val.shape)
        operands = (lw.load(x, shape, names, cdt), lw.load(n, shape, names, torch.int64),
                    lw.load(p, shape, names, cdt), lw.load(q, shape, names, cdt))
        return Op("recurrence", operands + tuple(Constant(float(c), cdt) for c in coefficients), cdt)

    return lw.pointwise(node, val, body)
