"""Lowering handlers that move data by index arithmetic: cat, constant padding, flip, roll."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from compiler_core import _compat
from compiler_core.ir.graph import ViewRef
from compiler_core.ir.index import Index, floordiv, linear_index, mod
from compiler_core.ir.lowering.core import Lowering, Unsupported, compute_dtype, scalar_of, size_value
from compiler_core.ir.lowering.pointwise import copy_
from compiler_core.ir.symbolic import as_size, is_symbolic
from compiler_core.ir.values import (
    Constant,
    IndexValue,
    Load,
    Op,
    Value,
    rebuild,
)


def _read_at(lw: Lowering, arg: Any, shape: tuple[int, ...], names: list[str], dtype: torch.dtype,
             moved: dict[str, Index], mask: Value | None = None) -> Value:
    """`arg` loaded at the output point whose loop variables are replaced by `moved`, guarded by
    `mask` (a bool value: where it is false the index may be outside the input, and nothing is read)."""
    value = lw.load(arg, shape, names, dtype)

    def leaf(v: Value) -> Value:
        if isinstance(v, Load):
            return dataclasses.replace(v, index=v.index.subs(moved), mask=mask)
        return v

    return rebuild(value, leaf)


def _position(name: str) -> Value:
    return IndexValue(Index.var(name), torch.int64)


def _all(conditions: list[Value]) -> Value | None:
    out = None
    for c in conditions:
        out = c if out is None else Op("logical_and", (out, c), torch.bool)
    return out


def _within(name: str, lo: int | None, hi: int | None) -> list[Value]:
    """lo <= name < hi, as bool values (None: no bound on that side)."""
    out = []
    if lo is not None:
        out.append(Op("ge", (_position(name), size_value(lo, torch.int64)), torch.bool))
    if hi is not None:
        out.append(Op("lt", (_position(name), size_value(hi, torch.int64)), torch.bool))
    return out


def cat_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """Each input fills a band of the output along `dim`: a chain of selects over masked loads."""
    tensors = list(node.args[0])
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if val.dim() == 0 or not all(isinstance(t, torch.fx.Node) for t in tensors):
        raise Unsupported("cat of non-tensors")
    dim %= val.dim()
    parts, start = [], 0
    for t in tensors:
        meta = _compat.fake_value(t)
        if meta.dim() != val.dim():  # legacy: 1-D empty tensors are skipped by cat
            continue
        if meta.shape[dim]:
            parts.append((t, start, meta.shape[dim]))
        start += meta.shape[dim]
    cdt = compute_dtype(val.dtype)
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        name = names[dim]
        result: Value | None = None
        for t, begin, size in reversed(parts):
            end = begin + size
            inside = _all(_within(name, begin if begin else None, end if end < shape[dim] else None))
            part = _read_at(lw, t, shape, names, cdt, {name: Index.var(name) - begin}, inside)
            result = part if result is None else Op("where", (inside, part, result), cdt)
        return result if result is not None else Constant(scalar_of(0, cdt), cdt)

    return lw.pointwise(node, val, body)


def constant_pad(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """constant_pad_nd: the input shifted by the leading pads, `value` outside it (negative pads crop)."""
    x = node.args[0]
    # Symbolic pads (a mask padded to a multiple of 8: (8 - s0 % 8) % 8) are expressions of the sizes.
    pad = [as_size(lw.values[p.name]) if isinstance(p, torch.fx.Node) else as_size(p) for p in node.args[1]]
    fill = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    in_shape = tuple(as_size(s) for s in _compat.fake_value(x).shape)
    cdt = compute_dtype(val.dtype)
    shape = tuple(val.shape)

    def positive(amount) -> bool:  # a symbolic pad keeps its bound: redundant where the pad is 0, never wrong
        return is_symbolic(amount) or amount > 0

    def body(names: list[str]) -> Value:
        moved, conditions = {}, []
        for k in range(len(pad) // 2):
            d = len(shape) - 1 - k
            before, after = pad[2 * k], pad[2 * k + 1]
            moved[names[d]] = Index.var(names[d]) - before
            conditions += _within(names[d], before if positive(before) else None,
                                  before + in_shape[d] if positive(after) else None)
        inside = _all(conditions)
        value = _read_at(lw, x, shape, names, cdt, moved, inside)
        if inside is None:
            return value
        return Op("where", (inside, value, Constant(scalar_of(fill, cdt), cdt)), cdt)

    return lw.pointwise(node, val, body)


def flip_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    x, dims = node.args[0], node.args[1]
    shape = tuple(val.shape)
    dims = {d % max(len(shape), 1) for d in dims}

    def body(names: list[str]) -> Value:
        moved = {names[d]: Index.of(shape[d] - 1) - Index.var(names[d]) for d in dims}
        return _read_at(lw, x, shape, names, val.dtype, moved)

    return lw.pointwise(node, val, body)


def roll_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """roll: output[i] = input[(i - shift) mod n] along each dim, or over the flattened tensor."""
    x = node.args[0]
    shifts = list(node.args[1]) if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
    dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", [])
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    shape = tuple(val.shape)
    if val.numel() == 0:
        return copy_(lw, node, val)

    def body(names: list[str]) -> Value:
        ranges = dict(zip(names, shape))
        if not dims:  # flattened: the flat position moves, then splits back into dims
            flat = linear_index(names, _contiguous_strides(shape))
            numel = val.numel()
            source = mod(flat + (numel - shifts[0] % numel), numel, ranges)
            moved = {}
            for d, stride in enumerate(_contiguous_strides(shape)):
                moved[names[d]] = mod(floordiv(source, stride, ranges), shape[d], ranges)
            return _read_at(lw, x, shape, names, val.dtype, moved)
        moved = {}
        for shift, d in zip(shifts, dims):
            d %= len(shape)
            n = shape[d]
            moved[names[d]] = mod(Index.var(names[d]) + (n - shift % n), n, ranges)
        return _read_at(lw, x, shape, names, val.dtype, moved)

    return lw.pointwise(node, val, body)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))
