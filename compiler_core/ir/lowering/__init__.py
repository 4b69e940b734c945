"""Lowering: PrimGraph (ATen FX graph with shapes) -> LoopGraph.

Every tensor value is a *view*: a Layout (sizes, strides, offset) over a buffer's storage.  View
ops make no code at all; they only produce a new layout, read from the FakeTensor metadata torch
already computed.  Pointwise and reduction primitives become LoopNodes whose bodies load through
those layouts, so transposed, broadcast (stride 0), sliced (offset) and strided inputs all become
index expressions.

core.py walks the graph (views, extern calls, the helpers every handler uses); the handlers are one
module per kind (pointwise, movement, indexing, reductions), and handlers.py maps primitive names
to them.
"""

from __future__ import annotations

from compiler_core.decomp.artifacts import PrimGraph
from compiler_core.ir.graph import LoopGraph
from compiler_core.ir.lowering.core import (
    LOW_PRECISION,
    SUPPORTED_DTYPES,
    Lowering,
    LoweringError,
    broadcast_index,
    compute_dtype,
)
from compiler_core.ir.lowering.handlers import HANDLERS

__all__ = ["LOW_PRECISION", "SUPPORTED_DTYPES", "LoweringError", "broadcast_index", "compute_dtype", "lower"]


def lower(prims: PrimGraph, updates: tuple[tuple[str, int], ...] = ()) -> LoopGraph:
    """`updates`: (input name, output index) of the inputs the caller overwrites with outputs after
    the graph runs (an inference graph's mutated inputs): a scatter that makes such an output from
    its input alone may store into the input itself (scatter.py)."""
    return Lowering(prims, HANDLERS, updates).run()
