"""Matmul accumulation: a matmul whose only reader adds it to another tensor becomes one `addmm`.

    out = mm(a, b) + y        becomes        out = addmm(y, a, b)

When the add would run as a kernel of its own, it is one more pass over three full-size tensors
(read the product and `y`, write the sum) after the library has already written the product. BLAS
and cuBLAS compute `C = beta * C + A @ B` while they write C, for the price of reading C once, so
the sum costs no pass at all. The memory planner then lets the call write its result over `y` when
`y` dies there (`memory._written_over`), so no fresh full-size buffer is touched either: the
gradient of a tied embedding (`mm(grad_logits.T, h) + embedding_backward(...)` in a language model's
backward) is one library call into the embedding gradient's own storage.

Only where the add would otherwise be a kernel by itself: an add that shares a kernel with other
nodes (a residual add inside a layer norm's kernel) reads both tensors there anyway, so it is left.
Each rewrite is written into the schedule's decision log.

    folded, notes = fold_matmul_adds(graph, sched)   # then schedule `folded` again
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from compiler_core.ir.graph import ExternCall, LoopGraph, LoopNode, ViewRef
from compiler_core.ir.index import linear_index
from compiler_core.ir.values import Cast, Load, Op, Value
from compiler_core.schedule.artifacts import FusionDecision, Schedule

MM = "aten.mm.default"
ADDMM = "aten.addmm.default"
REASON = "matmul accumulating into the tensor it is added to (extern call; the library adds while it writes)"


def fold_matmul_adds(graph: LoopGraph, sched: Schedule) -> tuple[LoopGraph, tuple[FusionDecision, ...]]:
    """`graph` with each foldable mm + add replaced by one addmm (decided on `sched`, which the caller
    schedules again when anything was folded), and one decision per fold for the log."""
    readers: dict[str, list[LoopNode]] = {}
    for n in graph.nodes:
        for b in n.input_buffers:
            readers.setdefault(b, []).append(n)
    outputs = set(graph.output_buffers())
    folds: dict[str, tuple[LoopNode, ViewRef]] = {}  # add node -> (its mm, the addend)
    for node in graph.nodes:
        found = _foldable(graph, sched, node, readers, outputs)
        if found is not None:
            folds[found[0].name] = (node, found[1])
    if not folds:
        return graph, ()
    removed = {mm.name for mm, _ in folds.values()}
    nodes = []
    for node in graph.nodes:
        if node.name in removed:
            continue
        nodes.append(_addmm(node, *folds[node.name]) if node.name in folds else node)
    gone = {mm.output.name for mm, _ in folds.values()}
    values = {k: v for k, v in graph.values.items() if not (isinstance(v, ViewRef) and v.buffer in gone)}
    folded = dataclasses.replace(graph, nodes=tuple(nodes), values=values)
    return folded, tuple(_decision(mm, add_name, addend) for add_name, (mm, addend) in folds.items())


def _foldable(graph: LoopGraph, sched: Schedule, mm: LoopNode, readers: dict[str, list[LoopNode]],
              outputs: set[str]) -> Optional[tuple[LoopNode, ViewRef]]:
    """(the add node, the addend) when `mm` is a 2-D matmul whose product only that add reads, and the
    add runs as a kernel of its own over exactly the product's elements; else None."""
    if mm.kind != "extern" or mm.extern.target != MM or mm.result_slots or mm.extra_outputs:
        return None
    out = mm.output
    if len(out.layout.size) != 2 or not out.layout.is_dense() or out.name in outputs:
        return None
    if not out.dtype.is_floating_point:
        return None
    users = readers.get(out.name, ())
    if len(users) != 1:
        return None
    add = users[0]
    if add.kind != "pointwise" or tuple(add.ranges) != tuple(out.layout.size) or add.output.dtype != out.dtype:
        return None
    group = sched.group_of(add.name)
    if group.nodes != (add.name,) or group.segments:
        return None  # the add shares a kernel with other work: it reads both tensors there anyway
    if add.output.layout != out.layout:
        return None  # the library writes a dense row-major result, as the product's
    names = [f"x{d}" for d in range(len(add.ranges))]
    ranges = dict(zip(names, add.ranges))
    own = linear_index(names, out.layout.stride, out.layout.offset)
    if add.store_index is None or add.store_index.simplify(ranges) != own.simplify(ranges):
        return None
    operands = _sum_of_two_loads(add.body, out.dtype)
    if operands is None:
        return None
    product = [ld for ld in operands if ld.buffer == out.name]
    addend = [ld for ld in operands if ld.buffer != out.name]
    if len(product) != 1 or len(addend) != 1 or product[0].index.simplify(ranges) != own.simplify(ranges):
        return None
    other = addend[0]
    layout = _buffer_layout(graph, other.buffer)
    if layout is None or layout.size != out.layout.size or layout != out.layout:
        return None  # the addend must be a whole tensor laid out as the product (no broadcast, no view)
    if other.index.simplify(ranges) != own.simplify(ranges) or other.dtype != out.dtype:
        return None
    mats = [a for a in mm.extern.args if isinstance(a, ViewRef)]
    if any(a.buffer == other.buffer for a in mats):
        return None  # the library would read the tensor it accumulates into as a factor
    return add, ViewRef(other.buffer, layout, other.dtype)


def _sum_of_two_loads(body: Value, dtype: torch.dtype) -> Optional[tuple[Load, Load]]:
    """The two plain loads of `a + b` (in the storage dtype, or both cast up and the sum cast back)."""
    if isinstance(body, Cast) and body.dtype == dtype:
        body = body.arg
    if not isinstance(body, Op) or body.op != "add" or len(body.args) != 2:
        return None
    loads = []
    for arg in body.args:
        if isinstance(arg, Cast) and arg.dtype == body.dtype:
            arg = arg.arg
        if not isinstance(arg, Load) or arg.mask is not None or arg.indirect or arg.dtype != dtype:
            return None
        loads.append(arg)
    return loads[0], loads[1]


def _buffer_layout(graph: LoopGraph, name: str):
    for b in graph.inputs:
        if b.name == name:
            return b.layout
    try:
        node = next(n for n in graph.nodes if name in (n.output.name, *(b.name for b in n.extra_outputs)))
    except StopIteration:
        return None
    return next(b.layout for b in (node.output, *node.extra_outputs) if b.name == name)


def _addmm(add: LoopNode, mm: LoopNode, addend: ViewRef) -> LoopNode:
    mat1, mat2 = mm.extern.args
    call = ExternCall(target=ADDMM, op=torch.ops.aten.addmm.default, args=(addend, mat1, mat2), kwargs=(),
                      reason=REASON)
    inputs = tuple(dict.fromkeys((addend.buffer, *mm.extern_inputs)))
    return LoopNode(name=add.name, kind="extern", output=dataclasses.replace(add.output, kind="extern"),
                    origins=tuple(dict.fromkeys(mm.origins + add.origins)), extern=call, extern_inputs=inputs,
                    source_fn=add.source_fn or mm.source_fn)


def _decision(mm: LoopNode, add_name: str, addend: ViewRef) -> FusionDecision:
    saved = 2 * mm.output.nbytes  # the product written and read back; the addend is read either way
    reason = (f"accumulate: {mm.name} and {add_name} become one addmm adding into {addend.buffer} (the add "
              f"would have been a kernel of its own)")
    return FusionDecision((mm.name,), (add_name,), True, True, reason, saved)
