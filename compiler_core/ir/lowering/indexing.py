"""Lowering handlers of tensor-indexed loads: gather, index_select, embedding, take, index.Tensor."""

from __future__ import annotations

from typing import Any

import torch

from compiler_core import _compat
from compiler_core.ir.graph import Layout, ViewRef
from compiler_core.ir.index import Index
from compiler_core.ir.lowering.core import Lowering, Unsupported
from compiler_core.ir.values import (
    GATHER_ERROR,
    INDEX_ERROR,
    TARGET_ERROR,
    IndirectIndex,
    Load,
    Value,
)

_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8)
# By name: the graph's metadata may hold a copy of the OpOverload, which compares unequal to torch.ops'
_NLL_LOSSES = ("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")


def _indirect_read(lw: Lowering, src: Any, names: dict[int, str], positions: dict[int, Value],
                   error: int, wrap: bool) -> Value:
    """`src` read at loop variables `names` (source dim -> variable) in some dims and at `positions`
    (source dim -> int64 value loaded from an index tensor) in the others."""
    view = lw.values[src.name]
    if not isinstance(view, ViewRef):
        raise Unsupported(f"argument {src.name} is not a tensor")
    if lw.buffer_devices.get(view.buffer, lw.device) != lw.device:
        raise Unsupported(f"argument {src.name} lives on {lw.buffer_devices[view.buffer]}")
    index = Index.of(view.layout.offset)
    for d, name in names.items():
        index = index + Index.var(name) * view.layout.stride[d]
    terms = tuple(IndirectIndex(positions[d], view.layout.size[d], view.layout.stride[d], error, wrap)
                  for d in sorted(positions))
    return Load(view.buffer, index, view.dtype, indirect=terms)


def _positions(lw: Lowering, index: Any, shape: tuple[int, ...], names: list[str]) -> Value:
    """An index tensor's element at the output point (broadcast to `shape`), as int64."""
    if not isinstance(index, torch.fx.Node) or _compat.fake_value(index).dtype not in _INDEX_DTYPES:
        raise Unsupported("indices that are not an integer tensor (a bool mask selects a data-dependent number "
                           "of elements)")
    return lw.load(index, shape, names, torch.int64)


def _source_dim(node: torch.fx.Node, dim: int) -> tuple[Any, int]:
    src = node.args[0]
    ndim = _compat.fake_value(src).dim()
    if ndim == 0:
        raise Unsupported("indexing a 0-d tensor")
    return src, dim % ndim


def gather(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """gather(src, dim, index): out[..., i, ...] = src[..., index[..., i, ...], ...] along `dim`."""
    src, dim = _source_dim(node, node.args[1])
    index, shape = node.args[2], tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, index, shape, names)
        others = {d: n for d, n in enumerate(names) if d != dim}
        return _indirect_read(lw, src, others, {dim: pos}, error, wrap=False)

    # nll_loss's decomposition picks each row's target with a gather: eager raises IndexError naming
    # the target there, not gather's RuntimeError
    error = TARGET_ERROR if str(node.meta.get("original_aten")) in _NLL_LOSSES else GATHER_ERROR

    return lw.pointwise(node, val, body)


def index_select(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """index_select(src, dim, index): the slices of src at the positions of the 1-d `index`."""
    src, dim = _source_dim(node, node.args[1])
    index, shape = node.args[2], tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, index, (shape[dim],), [names[dim]])
        others = {d: n for d, n in enumerate(names) if d != dim}
        return _indirect_read(lw, src, others, {dim: pos}, INDEX_ERROR, wrap=False)

    return lw.pointwise(node, val, body)


def embedding(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """embedding(weight, indices): out[i..., j] = weight[indices[i...], j] (padding_idx only matters to
    the backward)."""
    weight, indices = node.args[:2]
    if _compat.fake_value(weight).dim() != 2:
        raise Unsupported("an embedding weight that is not 2-d")
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, indices, shape[:-1], names[:-1])
        return _indirect_read(lw, weight, {1: names[-1]}, {0: pos}, INDEX_ERROR, wrap=False)

    return lw.pointwise(node, val, body)


def take_(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """take(src, index): src as a flat tensor, read at `index`; a flat position is one strided step
    only when src is contiguous (or has at most one dim of more than one element)."""
    src, index = node.args[:2]
    view = lw.values[src.name]
    if not isinstance(view, ViewRef):
        raise Unsupported(f"argument {src.name} is not a tensor")
    sizes = [(size, stride) for size, stride in zip(view.layout.size, view.layout.stride) if size != 1]
    if len(sizes) > 1 and view.layout.stride != Layout.contiguous(view.layout.size).stride:
        raise Unsupported("take from a non-contiguous tensor: a flat position maps to several strided dims")
    stride = sizes[-1][1] if sizes else 1
    flat = ViewRef(view.buffer, Layout((view.layout.numel,), (stride,), view.layout.offset), view.dtype)
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, index, shape, names)
        index_ = Index.of(flat.layout.offset)
        return Load(flat.buffer, index_, flat.dtype,
                    indirect=(IndirectIndex(pos, flat.layout.size[0], stride, INDEX_ERROR, wrap=True),))

    return lw.pointwise(node, val, body)


def index_tensor(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """index.Tensor / _unsafe_index (src[i, :, j] with tensor indices): the index tensors broadcast to
    one shape B; if the indexed dims are adjacent, B's dims replace them in place, else they lead."""
    src, indices = node.args[0], list(node.args[1])
    src_shape = tuple(_compat.fake_value(src).shape)
    indexed = [d for d, i in enumerate(indices) if i is not None]
    if not indexed or len(indices) > len(src_shape):
        raise Unsupported("no tensor index")
    metas = [_compat.fake_value(indices[d]) for d in indexed]
    if any(not isinstance(m, torch.Tensor) or m.dtype not in _INDEX_DTYPES for m in metas):
        raise Unsupported("bool mask indices (a data-dependent number of elements)")
    b_shape = tuple(torch.broadcast_shapes(*(m.shape for m in metas)))
    rest = [d for d in range(len(src_shape)) if d not in indexed]
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    b_start = indexed[0] if adjacent else 0
    before = [d for d in rest if adjacent and d < indexed[0]]
    after = [d for d in rest if d not in before]
    expected = tuple(src_shape[d] for d in before) + b_shape + tuple(src_shape[d] for d in after)
    if expected != tuple(val.shape):
        raise Unsupported(f"result shape {tuple(val.shape)} is not the expected {expected}")
    nb = len(b_shape)

    def body(names: list[str]) -> Value:
        b_names = names[b_start:b_start + nb]
        free = {d: names[k] for k, d in enumerate(before)}
        free.update({d: names[len(before) + nb + k] for k, d in enumerate(after)})
        positions = {d: _positions(lw, indices[d], b_shape, b_names) for d in indexed}
        return _indirect_read(lw, src, free, positions, INDEX_ERROR, wrap=True)

    return lw.pointwise(node, val, body)
