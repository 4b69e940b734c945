"""A view op applied to a layout we chose, by index arithmetic on sizes, strides and the offset.

Lowering places a view on torch's metadata when our buffer is laid out as torch says. Where it is not
(a result we made contiguous, a padded buffer), the view has to be redone on our strides. For static
sizes `core._view_of_our_layout` asks a meta tensor; a meta tensor cannot hold sympy strides, so with
symbolic sizes the views that show up in real graphs (slices of a padded attention mask, permutes,
unsqueezes, reshapes of a contiguous buffer) are computed here. The result's sizes are always torch's
(`result_shape`); only the strides and the offset are ours."""

from __future__ import annotations

from typing import Any, Callable

import sympy
import torch

from compiler_core.ir.graph import Layout
from compiler_core.ir.symbolic import NotSymbolic, Size, decide, is_symbolic, known

aten = torch.ops.aten


class NotAViewOfOurs(Exception):
    """This view cannot be placed on our layout by index arithmetic (the caller says why)."""


def restride(target: Any, layout: Layout, args: tuple, result_shape: tuple[Size, ...]) -> Layout:
    """`target(tensor_with(layout), *args)`'s layout. `args` are the op's arguments after the tensor,
    with sizes already as ints or sympy expressions."""
    rule = _RULES.get(target)
    if rule is None:
        raise NotAViewOfOurs(f"{target} has no rule for a layout of our own")
    return rule(layout, _padded(args, _ARITY.get(target, len(args))), tuple(result_shape))


def _padded(args: tuple, arity: int) -> tuple:
    return tuple(args) + (None,) * (arity - len(args))


def _dim(d: int, ndim: int) -> int:
    return d % ndim if ndim else 0


def _non_negative(position: Size, size: Size, what: str) -> Size:
    """A start or an index as a position in [0, size]: ints wrap once like Python's, a symbolic
    position must be provably non-negative."""
    if isinstance(position, int):
        if isinstance(size, int):
            return min(max(position + size if position < 0 else position, 0), size)
        if position >= 0:
            return position
        return size + position if known(sympy.Ge(size + position, 0)) else _unknown(what, position)
    if known(sympy.Ge(position, 0)):
        return position
    return _unknown(what, position)


def _unknown(what: str, value: Size) -> Size:
    raise NotAViewOfOurs(f"the {what} {value} may be negative")


def _slice(layout: Layout, args: tuple, shape: tuple) -> Layout:
    dim, start, _end, step = args
    dim = _dim(dim if dim is not None else 0, len(layout.size))
    start = _non_negative(start if start is not None else 0, layout.size[dim], "slice start")
    step = step if step is not None else 1
    stride = list(layout.stride)
    offset = layout.offset + start * stride[dim]
    stride[dim] = stride[dim] * step
    return Layout(shape, tuple(stride), offset)


def _select(layout: Layout, args: tuple, shape: tuple) -> Layout:
    dim, index = args
    dim = _dim(dim, len(layout.size))
    index = _non_negative(index, layout.size[dim], "index")
    stride = list(layout.stride)
    offset = layout.offset + index * stride.pop(dim)
    return Layout(shape, tuple(stride), offset)


def _permute(layout: Layout, args: tuple, shape: tuple) -> Layout:
    (dims,) = args
    order = [_dim(d, len(layout.size)) for d in dims]
    return Layout(shape, tuple(layout.stride[d] for d in order), layout.offset)


def _transpose(layout: Layout, args: tuple, shape: tuple) -> Layout:
    a, b = args if args != (None, None) else (0, 1)  # t() has no arguments
    n = len(layout.size)
    stride = list(layout.stride)
    if n >= 2:
        a, b = _dim(a, n), _dim(b, n)
        stride[a], stride[b] = stride[b], stride[a]
    return Layout(shape, tuple(stride), layout.offset)


def _unsqueeze(layout: Layout, args: tuple, shape: tuple) -> Layout:
    (dim,) = args
    dim = dim % (len(layout.size) + 1)
    stride = list(layout.stride)
    # any stride is right for a size-1 dim; the next dim's extent keeps the layout contiguous-looking
    stride.insert(dim, stride[dim] * layout.size[dim] if dim < len(stride) else 1)
    return Layout(shape, tuple(stride), layout.offset)


def _squeeze(layout: Layout, args: tuple, shape: tuple) -> Layout:
    (dims,) = args
    n = len(layout.size)
    if dims is None:
        dims = range(n)
    elif isinstance(dims, int):
        dims = (dims,)
    dropped = {_dim(d, n) for d in dims if layout.size[_dim(d, n)] == 1}
    stride = tuple(s for d, s in enumerate(layout.stride) if d not in dropped)
    if len(stride) != len(shape):
        raise NotAViewOfOurs("squeeze of a dim whose size is not known to be 1")
    return Layout(shape, stride, layout.offset)


def _reshape(layout: Layout, args: tuple, shape: tuple) -> Layout:
    """A reshape is a view of our buffer where each run of dims it merges or splits is contiguous in
    memory (torch's rule for view()). Sizes are matched as expressions: a run whose products differ
    only in form (s0*(s1 + 1) against s0*s1 + s0) still matches; one they cannot show equal is refused."""
    if equal_sizes(tuple(layout.size), shape):
        return Layout(shape, tuple(layout.stride), layout.offset)
    if equal_sizes(tuple(layout.stride), Layout.contiguous(tuple(layout.size)).stride):
        return Layout(shape, Layout.contiguous(shape).stride, layout.offset)
    old = [(size, stride) for size, stride in zip(layout.size, layout.stride) if size != 1]
    new_stride: list[Size] = [0] * len(shape)
    d = len(shape) - 1
    while old:
        # the trailing run of old dims that is one contiguous block
        run_size, base = old[-1]
        old.pop()
        while old and _same(old[-1][1], run_size * base):
            run_size = run_size * old[-1][0]
            old.pop()
        placed: Size = 1
        while d >= 0 and (shape[d] == 1 or not _same(placed, run_size)):
            if _larger(placed, run_size):
                break
            new_stride[d] = placed * base
            placed = placed * shape[d]
            d -= 1
        if not _same(placed, run_size):
            raise NotAViewOfOurs("a reshape that merges dims our layout keeps apart")
    while d >= 0:  # leading size-1 dims
        if shape[d] != 1:
            raise NotAViewOfOurs("a reshape that merges dims our layout keeps apart")
        new_stride[d] = 1
        d -= 1
    return Layout(shape, tuple(new_stride), layout.offset)


def _same(a: Size, b: Size) -> bool:
    """Equal sizes: as expressions, else by the ShapeEnv's range analysis, else at the example call
    kept as a guard (Swin's window sizes are equal only under integer-division reasoning sympy lacks;
    a call where they differ compiles again)."""
    if equal_sizes((a,), (b,)):
        return True
    if not (is_symbolic(a) or is_symbolic(b)):
        return False
    condition = sympy.Eq(a, b)
    if known(condition):
        return True
    try:
        return decide(condition)
    except NotSymbolic:  # outside a compilation, or a condition Dynamo could not keep
        return False


def _larger(a: Size, b: Size) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a > b


def _broadcast_in_dim(layout: Layout, args: tuple, shape: tuple) -> Layout:
    """prims.broadcast_in_dim: input dim k becomes output dim broadcast_dimensions[k]; new dims and
    size-1 dims that grow are read with stride 0."""
    _shape, placed = args
    stride: list[Size] = [0] * len(shape)
    for k, d in enumerate(placed):
        if not equal_sizes((layout.size[k],), (shape[d],)):
            if layout.size[k] != 1:
                raise NotAViewOfOurs(f"cannot broadcast size {layout.size[k]} to {shape[d]}")
            continue
        stride[d] = layout.stride[k]
    return Layout(shape, tuple(stride), layout.offset)


def _alias(layout: Layout, args: tuple, shape: tuple) -> Layout:
    return Layout(shape, tuple(layout.stride), layout.offset)


def equal_sizes(a: tuple, b: tuple) -> bool:
    """Equal as expressions (sympy compares structure: `s0*(s0 + 1)` is not `s0**2 + s0`)."""
    if len(a) != len(b):
        return False
    return all(x == y or (isinstance(x - y, sympy.Expr) and sympy.expand(x - y) == 0) for x, y in zip(a, b))


_Rule = Callable[[Layout, tuple, tuple], Layout]
_RULES: dict[Any, _Rule] = {
    aten.slice.Tensor: _slice,
    aten.select.int: _select,
    aten.permute.default: _permute,
    aten.transpose.int: _transpose,
    aten.t.default: _transpose,
    aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.squeeze.default: _squeeze,
    aten.view.default: _reshape,
    aten._unsafe_view.default: _reshape,
    aten.reshape.default: _reshape,
    aten.alias.default: _alias,
    aten.detach.default: _alias,
    torch.ops.prims.broadcast_in_dim.default: _broadcast_in_dim,
}
# how many arguments follow the tensor, so defaults can be filled in as None
_ARITY: dict[Any, int] = {aten.slice.Tensor: 4, aten.t.default: 2, aten.squeeze.default: 1}
