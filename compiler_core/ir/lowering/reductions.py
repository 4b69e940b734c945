"""Lowering handlers of reductions: sum, mean, amax, amin, prod, var."""

from __future__ import annotations

from typing import Any, Callable

import torch

from compiler_core import _compat
from compiler_core.ir.graph import ViewRef
from compiler_core.ir.lowering.core import Lowering, Unsupported, broadcast_index, compute_dtype, size_value
from compiler_core.ir.symbolic import as_size, decide, is_symbolic, known
from compiler_core.ir.values import (
    Cast,
    Constant,
    Load,
    Op,
    Value,
)


def _reduction_dims(node: torch.fx.Node) -> list[int] | None:
    if len(node.args) > 1 and node.args[1] is not None:
        dims = node.args[1]
        return [dims] if isinstance(dims, int) else list(dims)
    dims = node.kwargs.get("dim")
    if dims is None:
        return None
    return [dims] if isinstance(dims, int) else list(dims)


def reduction_handler(kind: str) -> Callable:
    def handler(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        source = node.args[0]
        src_val = _compat.fake_value(source)
        dims = _reduction_dims(node)
        if dims is None or len(dims) == 0:
            dims = list(range(src_val.dim()))
        acc = compute_dtype(val.dtype)
        if kind in ("sum", "prod", "amax", "amin"):
            return lw.reduction(node, val, source, dims, kind, acc)
        if kind == "mean":
            count = 1
            for d in dims:
                count *= as_size(src_val.shape[d % max(src_val.dim(), 1)]) if src_val.dim() else 1
            total = lw.reduction(node, val, source, dims, "sum", acc)
            if is_symbolic(count):  # divided by the count the kernel computes from its size arguments
                return _scale(lw, node, val, total, count, divide=True)
            return _scale(lw, node, val, total, 1.0 / max(count, 1) if count else float("nan"))
        if kind == "var":
            correction = node.args[2] if len(node.args) > 2 else node.kwargs.get("correction", 1)
            return _variance(lw, node, val, source, dims, correction)
        raise Unsupported(kind)

    return handler


def _scale(lw: Lowering, node: torch.fx.Node, val: torch.Tensor, source: ViewRef, factor: Any,
           divide: bool = False) -> ViewRef:
    """`source * factor`, or with `divide`, `source / factor` (a symbolic count)."""
    cdt = compute_dtype(val.dtype)
    names_shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        load = Load(source.buffer, broadcast_index(source.layout, names_shape, names), source.dtype)
        value = load if source.dtype == cdt else Cast(load, cdt)
        if divide:
            return Op("truediv", (value, size_value(factor, cdt)), cdt)
        return Op("mul", (value, Constant(factor, cdt)), cdt)

    return lw.pointwise(node, val, body, origin=node.name)


def _variance(lw: Lowering, node: torch.fx.Node, val: torch.Tensor, source: torch.fx.Node, dims: list[int],
              correction: Any) -> ViewRef:
    """var = sum((x - mean)^2) / (n - correction), as two reductions that share one kernel."""
    src_val = _compat.fake_value(source)
    ndim = src_val.dim()
    dims = sorted({d % ndim for d in dims})
    count = 1
    for d in dims:
        count *= as_size(src_val.shape[d])
    acc = compute_dtype(val.dtype)
    total = lw.reduction(node, val, source, dims, "sum", acc)
    # A symbolic count is divided by where the kernel runs (its size arguments), never taken as a number.
    mean = _scale(lw, node, val, total, count, divide=True) if is_symbolic(count) else \
        _scale(lw, node, val, total, 1.0 / count)
    kept = [d for d in range(ndim) if d not in dims]

    def centered_square(value: Value, full_names: list[str]) -> Value:
        kept_names = [full_names[d] for d in kept]
        m = Load(mean.buffer, broadcast_index(mean.layout, tuple(val.shape), kept_names[-val.dim():] if val.dim()
                                              else []), mean.dtype)
        diff = Op("sub", (value, m if mean.dtype == acc else Cast(m, acc)), acc)
        return Op("mul", (diff, diff), acc)

    squares = lw.reduction(node, val, source, dims, "sum", acc, prologue=centered_square)
    if is_symbolic(count):
        if correction is not None and correction != int(correction):
            raise Unsupported("a fractional correction of a variance over symbolic sizes")
        denominator = count - int(correction or 0)
        if not known(denominator > 0) and not decide(denominator > 0):  # a guard: one element, correction 1
            raise Unsupported("a variance over symbolic sizes whose count may not exceed its correction")
        return _scale(lw, node, val, squares, denominator, divide=True)
    denominator = count - float(correction or 0)
    return _scale(lw, node, val, squares, 1.0 / denominator if denominator > 0 else float("inf"))
