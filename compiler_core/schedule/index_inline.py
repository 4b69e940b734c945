"""Values computed from loop indices alone are recomputed where they are read, never stored.

A bilinear upsample's decomposition computes its source coordinates and weights as small tensors of
their own (`arange(224)` -> float -> scale -> clamp -> int64: 224 elements) that four gathers and
the interpolation read. Stored, they tie every reader to the kernel that writes them: where the
readers end up in two kernels (an upsample beside a loss that gathers at the labels), the positions
are loaded back from memory, which also hides that they were clamped, so each gather keeps a range
check (on the GPU a `tl.device_assert`, which needs Triton's debug build).

This pass rewrites the loop graph before scheduling: a pointwise node whose body reads no memory (only
index values and constants, a few ops at most) is substituted into every node that loads it, at the
element each load asks for, and is dropped once nothing reads it (a graph output stays stored).
A node whose body reads only such nodes becomes one itself, so chains collapse in one sweep. Inductor
makes the same choice for index arithmetic; the plan pass `bounds` then proves the clamped
positions inside their dimension.

    graph, notes = inline_index_computations(graph)   # notes: FusionDecisions for the decision log
"""

from __future__ import annotations

import dataclasses

import torch

from compiler_core.ir.graph import LoopGraph, LoopNode
from compiler_core.ir.symbolic import hint, thousands
from compiler_core.ir.values import Constant, Load, Op, ReductionResult, Value, rebuild, subs_index, walk, with_origins
from compiler_core.schedule.artifacts import FusionDecision
from compiler_core.schedule.graph_rewrite import loop_ranges, without_dead
from compiler_core.schedule.kernel_plan import invert_layout

# Ops an index-only body may hold and still be recomputed at every element that reads it: an
# upsample's coordinate is ~10, a bicubic weight ~25. A longer body is computed once and stored.
MAX_OPS = 40


def inline_index_computations(graph: LoopGraph) -> tuple[LoopGraph, tuple[FusionDecision, ...]]:
    index_only: dict[str, LoopNode] = {}  # buffer -> its node, body already free of loads
    inlined: dict[str, list[str]] = {}  # producer buffer -> readers that now compute it themselves
    nodes = []
    for node in graph.nodes:
        if node.kind != "extern" and node.body is not None and index_only:
            node = _substituted(node, index_only, inlined)
        if node.kind == "pointwise" and not node.extra_outputs and node.body is not None and _is_index_only(node.body):
            index_only[node.output.name] = node
        nodes.append(node)
    if not inlined:
        return graph, ()
    nodes, removed = without_dead(nodes, set(inlined), graph.output_buffers())
    notes = tuple(_note(index_only[p], readers, p in removed) for p, readers in inlined.items())
    return dataclasses.replace(graph, nodes=tuple(nodes)), notes


def _is_index_only(body: Value) -> bool:
    ops = 0
    for v in walk(body):
        if isinstance(v, (Load, ReductionResult)):
            return False
        ops += isinstance(v, Op)
    return ops <= MAX_OPS


def _substituted(node: LoopNode, index_only: dict[str, LoopNode], inlined: dict[str, list[str]]) -> LoopNode:
    """`node` with every plain load of an index-only buffer replaced by that buffer's value there."""
    ranges = loop_ranges(node)

    def leaf(v: Value) -> Value:
        if not isinstance(v, Load) or v.indirect or v.buffer not in index_only:
            return v  # an indirect read of a computed table: gather_inline's job
        producer = index_only[v.buffer]
        # The body ends in a cast to the buffer's dtype, so the value is the one the load would give.
        value = subs_index(with_origins(producer.body, producer.origins), invert_layout(producer, v.index, ranges),
                           ranges)
        readers = inlined.setdefault(v.buffer, [])
        if node.name not in readers:
            readers.append(node.name)
        if v.mask is None:
            return value
        # A masked read gives 0 where the mask is off (cat, pad): the element may not exist there.
        zero = Constant(False if value.dtype == torch.bool else 0, value.dtype)
        return Op("where", (v.mask, value, zero), value.dtype, producer.origins)

    body = rebuild(node.body, leaf)
    positions = tuple(dataclasses.replace(t, value=rebuild(t.value, leaf)) for t in node.scatter_positions)
    if body is node.body and all(a.value is b.value for a, b in zip(positions, node.scatter_positions)):
        return node
    return dataclasses.replace(node, body=body, scatter_positions=positions)


def _note(producer: LoopNode, readers: list[str], removed: bool) -> FusionDecision:
    what = f"{producer.name} ({', '.join(producer.origins)})" if producer.origins else producer.name
    stored = (f"so {producer.name} ({thousands(producer.output.nbytes)} bytes) is never stored" if removed
              else f"{producer.name} is still stored for its other readers")
    reason = f"index arithmetic: {', '.join(readers)} compute {what} from their own loop indices; {stored}"
    return FusionDecision((producer.name,), tuple(readers), True, True, reason,
                          hint(producer.output.nbytes) if removed else 0)
