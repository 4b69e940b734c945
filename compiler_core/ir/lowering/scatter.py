"""Lowering of the scatters: fcompile::scatter_add(self, dim, index, src) (decomp/atomic_scatter.py)
and fcompile::scatter_store (decomp/store_scatter.py).

Two loop nodes:

    buf4 = copy of self                              (pointwise: a fill of zeros fuses into it)
    buf5 = buf4, then for x in index's shape:        (kind "scatter", in buf4's storage)
        buf5[x with x_dim replaced by checked(index[x], size)] += src[x]    (atomic; "add")
        buf5[x with x_dim replaced by checked(index[x], size)] = src[x]     (scatter_store: "overwrite")

The copy is the scatter's own buffer, read by nothing else, so updating it in place changes no
value anyone else can see; the scatter node names it as `destination` (a read, so the scheduler
runs the copy first) and as `may_alias` (so the memory planner keeps one storage for both).

A scatter whose result is the new value of a graph input that it alone reads (a static KV cache's
`index_copy_` in an inference graph: `Lowering.sole_updates`) has no copy: its destination is the
input, so a decode step writes the new rows and not the whole cache twice. A
position out of range is flagged like an indirect load's (SCATTER_ERROR: eager's RuntimeError).
"""

from __future__ import annotations

import torch

from compiler_core import _compat
from compiler_core.ir.graph import Buffer, LoopNode, ViewRef
from compiler_core.ir.index import Index
from compiler_core.ir.lowering.core import Lowering, Unsupported
from compiler_core.ir.values import SCATTER_ERROR, IndirectIndex

# Dtypes with an atomic add on both backends (decomp/atomic_scatter.py sums bf16/fp16 in fp32).
ATOMIC_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)


def scatter_add(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    if val.dtype not in ATOMIC_DTYPES:
        raise Unsupported(f"no atomic add for {val.dtype}")
    return _scatter(lw, node, val, "add")


def scatter_store(lw: Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    if val.dtype == torch.bool or val.is_complex():
        raise Unsupported(f"no overwriting scatter for {val.dtype}")
    return _scatter(lw, node, val, "overwrite")


def _scatter(lw: Lowering, node: torch.fx.Node, val: torch.Tensor, accumulate: str) -> ViewRef:
    self_, dim, index, src = node.args
    shape, index_shape = tuple(val.shape), tuple(_compat.fake_value(index).shape)
    if not shape or 0 in index_shape:
        raise Unsupported("a 0-d or empty scatter")
    dim %= len(shape)
    if len(index_shape) != len(shape) or any(i > s for d, (i, s) in enumerate(zip(index_shape, shape)) if d != dim):
        raise Unsupported(f"index shape {list(index_shape)} does not fit self's {list(shape)} outside dim {dim}")
    if node.name in lw.sole_updates:
        # The new value of this input, which nothing else reads: the elements are stored into the
        # caller's tensor itself (AOTAutograd's copy back then finds source and destination the same).
        destination = lw.values[self_.name]
    else:
        destination = lw.pointwise(node, val, lambda names: lw.load(self_, shape, names, val.dtype))
    layout = destination.layout
    out = Buffer(lw.fresh_name(f"buf{len(lw.nodes)}"), val.dtype, layout, val.device.type)
    lw.buffer_devices[out.name] = out.device
    names = [f"x{i}" for i in range(len(index_shape))]
    body = lw.load(src, index_shape, names, val.dtype)  # src is read where index has elements, as in ATen
    position = lw.load(index, index_shape, names, torch.int64)
    store = Index.of(layout.offset)
    for d, name in enumerate(names):
        if d != dim:
            store = store + Index.var(name) * layout.stride[d]
    term = IndirectIndex(position, shape[dim], layout.stride[dim], SCATTER_ERROR, wrap=False)
    return lw.add_node(LoopNode(name=out.name, kind="scatter", output=out, origins=(node.name,), ranges=index_shape,
                                body=body, store_index=store, scatter_positions=(term,),
                                destination=destination.buffer, accumulate=accumulate, may_alias=(destination.buffer,)))
