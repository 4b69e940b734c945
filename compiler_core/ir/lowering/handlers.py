"""Primitive name -> the lowering handler that turns it into loop nodes (one module per kind)."""

from __future__ import annotations

from typing import Callable

from compiler_core.ir.lowering.indexing import embedding, gather, index_select, index_tensor, take_
from compiler_core.ir.lowering.movement import cat_, constant_pad, flip_, roll_
from compiler_core.ir.lowering.pointwise import (
    arange,
    bitwise,
    cast_,
    clamp,
    compare,
    copy_,
    elementwise,
    fill_,
    float_test,
    fma,
    fmax_fmin,
    isnan,
    logical,
    logical_any,
    pow_,
    recurrence_,
    relu_or_maximum,
    round_,
    shift,
    where_,
)
from compiler_core.ir.lowering.reductions import reduction_handler
from compiler_core.ir.lowering.scatter import scatter_add, scatter_store

HANDLERS: dict[str, Callable] = {
    **{p: elementwise(p, 2) for p in ("add", "sub", "mul", "truediv", "floordiv", "truncdiv", "remainder",
                                        "minimum")},
    **{p: elementwise(p, 1) for p in ("neg", "abs", "reciprocal", "exp", "log", "log1p", "expm1", "sqrt",
                                        "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid", "floor", "ceil", "trunc",
                                        "sign")},
    "round": round_,
    **{p: compare(p) for p in ("eq", "ne", "lt", "le", "gt", "ge")},
    "logical_not": logical("logical_not", 1), "logical_and": logical("logical_and", 2),
    "logical_or": logical("logical_or", 2), "isnan": isnan, "where": where_, "clamp": clamp,
    "maximum": relu_or_maximum, "pow": pow_, "fma": fma, "cast": cast_, "copy": copy_, "fill": fill_,
    "index": arange,
    **{p: elementwise(p, 2) for p in ("atan2", "hypot", "fmod", "copysign", "gcd")},
    "fused_multiply_add": elementwise("fused_multiply_add", 3),
    **{p: elementwise(p, 1) for p in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                        "log2", "log10", "exp2", "erfc")},
    **{p: bitwise(p, 2) for p in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    "bitwise_not": bitwise("bitwise_not", 1), "logical_xor": logical_any("logical_xor"),
    "lshift": shift("lshift"), "rshift": shift("rshift"),
    **{k: float_test(k) for k in ("isinf", "isposinf", "isneginf", "signbit")},
    "fmax": fmax_fmin("maximum"), "fmin": fmax_fmin("minimum"),
    "cat": cat_, "constant_pad": constant_pad, "flip": flip_, "roll": roll_,
    "gather": gather, "index_select": index_select, "embedding": embedding, "take": take_,
    "index_tensor": index_tensor, "recurrence": recurrence_, "scatter_add": scatter_add, "scatter_store": scatter_store,
    **{k: reduction_handler(k) for k in ("sum", "mean", "amax", "amin", "prod", "var")},
}
