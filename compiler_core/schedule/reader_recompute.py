"""Cheap pointwise values are recomputed by readers in other kernels instead of stored for them.

A pointwise value read by kernels of different iteration spaces cannot be inlined into all of them:
the scheduler puts it in one kernel and stores it for the others. Layer norm's backward is the case
that costs most. `xhat = (x - mean) * rstd` and `g = dy * weight` are read by the column sums that give
the weight's and bias's gradients and by the row sums and the row kernel that give `dx`; stored, each is
a float32 tensor of the activation's size, written once and read twice. In gpt_block's bf16 backward on
the H200 (8,192 rows of 1,024) that was 64 MB written and 128 MB read per layer norm where recomputing
reads the bf16 `x` and `dy` again (4 bytes an element against 8) and writes nothing.

This pass runs after a first schedule, which says which values are stored for another kernel: such a
value, followed back through the values its own kernel keeps in registers to buffers that are in
memory anyway, is substituted into each reader outside its kernel when

- every reader outside is a kernel (a pointwise loop or a reduction), not an extern call, and it is not
  a graph output, so the value is not stored at all afterwards;
- recomputing reads no more bytes per element than loading it: each buffer the recomputation loads
  counts its item size, nothing for a buffer much smaller than the value (a per-row statistic, a
  weight vector: read once per row or column and kept in cache);
- it has at most MAX_OPS operations, no indirect load, and every reader reaches it without a division
  in the index.

Then the graph is scheduled again. Inductor makes the same trade by inlining pointwise values into
every reader unless they are read often or are long; this pass asks the schedule instead.

    graph, notes = recompute_for_readers(graph, sched)   # notes: FusionDecisions for the decision log
"""

from __future__ import annotations

import dataclasses

import torch

from compiler_core.ir.graph import Buffer, LoopGraph, LoopNode
from compiler_core.ir.index import Var
from compiler_core.ir.symbolic import hint, thousands
from compiler_core.ir.values import Constant, Load, Op, Value, rebuild, subs_index, walk, with_origins
from compiler_core.schedule.artifacts import FusionDecision, Schedule
from compiler_core.schedule.graph_rewrite import loop_ranges, without_dead
from compiler_core.schedule.kernel_plan import invert_layout_masked, masked_loads

# Operations a recomputed value may hold: layer norm's normalized input is ~6, GELU's ~10.
MAX_OPS = 40
READER_KINDS = ("pointwise", "reduction")
SMALL_RATIO = 8


class _NotCheap(Exception):
    """The value cannot be recomputed where it is read (the message says why; for the log only)."""


def recompute_for_readers(graph: LoopGraph, sched: Schedule) -> tuple[LoopGraph, tuple[FusionDecision, ...]]:
    nodes = {n.name: n for n in graph.nodes}
    producer = {n.output.name: n for n in graph.nodes}
    group_of = {name: g for g in sched.groups for name in g.nodes}
    readers: dict[str, list[str]] = {}
    for n in graph.nodes:
        for b in n.input_buffers:
            readers.setdefault(b, []).append(n.name)
    buffers = {b.name: b for b in (*graph.inputs, *(o for n in graph.nodes for o in (n.output, *n.extra_outputs)))}
    in_memory = {b.name for b in graph.inputs} | {b for g in sched.groups for b in g.materialized}
    in_memory |= {o.name for n in graph.nodes if n.kind == "extern" for o in (n.output, *n.extra_outputs)}
    outputs = graph.output_buffers()

    chosen: dict[str, Value] = {}  # buffer -> its value in its producer's loop variables, over buffers kept
    notes = []
    for node in graph.nodes:  # topological: a chosen value's inputs were decided before it
        name = node.output.name
        group = group_of.get(node.name)
        if (group is None or node.kind != "pointwise" or node.extra_outputs or name in outputs
                or name not in group.materialized):
            continue
        outside = [r for r in readers.get(name, ()) if group_of.get(r) is not group]
        if not outside or any(nodes[r].kind not in READER_KINDS for r in outside):
            continue
        try:
            value = _expanded(node, producer, in_memory, chosen, depth=0)
            cost = _read_cost(value, buffers, buffers[name])
            if cost > node.output.dtype.itemsize:
                raise _NotCheap(f"reads {cost:.1f} bytes an element to recompute")
            rewritten = {r: _substituted(nodes[r], name, node, value) for r in outside}
        except _NotCheap:
            continue
        chosen[name] = value
        nodes.update(rewritten)
        notes.append(_note(node, outside, value, cost))
    if not chosen:
        return graph, ()
    kept, _ = without_dead([nodes[n.name] for n in graph.nodes], set(chosen), outputs)
    return dataclasses.replace(graph, nodes=tuple(kept)), tuple(notes)


def _expanded(node: LoopNode, producer: dict[str, LoopNode], in_memory: set[str], chosen: dict[str, Value],
              depth: int) -> Value:
    """`node`'s value in its own loop variables, reading only buffers that stay in memory: values its
    kernel keeps in registers (and values already chosen for recomputation) are followed back."""
    if depth > 16:
        raise _NotCheap("chain too long")
    ranges = loop_ranges(node)

    def leaf(v: Value) -> Value:
        if not isinstance(v, Load) or (v.buffer in in_memory and v.buffer not in chosen):
            if isinstance(v, Load) and v.indirect:
                raise _NotCheap("indirect load")
            return v
        inner = producer.get(v.buffer)
        if v.indirect or inner is None or inner.kind != "pointwise" or inner.extra_outputs:
            raise _NotCheap(f"reads {v.buffer}, which only its kernel holds and which is not pointwise")
        value = chosen.get(v.buffer)
        if value is None:
            value = _expanded(inner, producer, in_memory, chosen, depth + 1)
        return _at(value, inner, v, ranges)

    value = rebuild(with_origins(node.body, node.origins), leaf)
    if sum(isinstance(v, Op) for v in walk(value)) > MAX_OPS:
        raise _NotCheap(f"more than {MAX_OPS} operations")
    return value


def _at(value: Value, producer: LoopNode, load: Load, ranges: dict) -> Value:
    """`value` (in `producer`'s loop variables) at the element `load` reads, in the reader's variables."""
    # a cat's or a pad's read: affine where the mask holds
    mapping = invert_layout_masked(producer, load.index, ranges, load.mask)
    if _divides(mapping):
        raise _NotCheap("the reader reaches it through a division")
    # The body ends in a cast to the buffer's dtype: the value is the one the load would give.
    at = subs_index(value, mapping, ranges)
    if load.mask is None:
        return at
    # Where the mask is off the element does not exist: the recomputation's loads take the mask too (they
    # may point outside their buffers there), and the value is 0, as the masked load gives.
    at = masked_loads(at, load.mask)
    zero = Constant(False if at.dtype == torch.bool else 0, at.dtype)
    return Op("where", (load.mask, at, zero), at.dtype, producer.origins)


def _divides(mapping: dict) -> bool:
    return any(not isinstance(atom, Var) for m in mapping.values() for atom, _ in m.terms)


def _substituted(reader: LoopNode, buffer: str, producer: LoopNode, value: Value) -> LoopNode:
    ranges = loop_ranges(reader)

    def leaf(v: Value) -> Value:
        if isinstance(v, Load) and v.buffer == buffer:
            if v.indirect:
                raise _NotCheap(f"{reader.name} reads it at positions loaded from memory")
            return _at(value, producer, v, ranges)
        return v

    return dataclasses.replace(reader, body=rebuild(reader.body, leaf))


def _read_cost(value: Value, buffers: dict[str, Buffer], of: Buffer) -> float:
    """Bytes per element of `of` that recomputing `value` loads: each buffer once, its item size
    scaled by how many of its elements there are per element of `of` (at most one). A buffer at
    least SMALL_RATIO times smaller (a per-row statistic, a weight vector) is read from cache and
    counts nothing."""
    elements = max(hint(of.layout.storage_numel), 1)
    cost = 0.0
    for name in {v.buffer for v in walk(value) if isinstance(v, Load)}:
        b = buffers[name]
        share = hint(b.layout.storage_numel) / elements
        cost += 0.0 if share * SMALL_RATIO <= 1 else b.dtype.itemsize * min(1.0, share)
    return cost


def _note(producer: LoopNode, readers: list[str], value: Value, cost: float) -> FusionDecision:
    what = f"{producer.name} ({', '.join(producer.origins)})" if producer.origins else producer.name
    sources = sorted({v.buffer for v in walk(value) if isinstance(v, Load)})
    size = producer.output.dtype.itemsize
    reason = (f"recompute: {', '.join(readers)} (other kernels) compute {what} from {', '.join(sources) or 'constants'}"
              f" ({cost:.1f} bytes an element read against {size} to load it), so it is never stored "
              f"({thousands(producer.output.nbytes)} bytes)")
    return FusionDecision((producer.name,), tuple(readers), True, True, reason,
                          hint(producer.output.nbytes) * (1 + len(readers)))
