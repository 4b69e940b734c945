"""Matmul epilogues: an `addmm` stays one extern call unless its bias add can join a kernel.

Lowering keeps `aten.addmm` (a Linear layer) as one extern call: the library adds the bias while it
writes the product, one pass over memory as in eager.  When pointwise ops read the result (a bias
then GELU, ReLU, a residual add...), splitting it into `mm` plus a pointwise bias add lets the bias
add and those ops run as one kernel after the matmul:

    addmm(b, x, w) -> gelu        becomes        mm(x, w) -> [bias add + gelu: one kernel]

On the GPU a convolution with a bias is split the same way (`conv(x, w, b) -> relu` becomes
`conv(x, w) -> [bias add + relu]`): ATen would add the bias in a pass of its own after cuDNN's kernel.

The split is kept only where the bias add actually shares a kernel with a consumer of its result;
an addmm whose bias add would run as a kernel of its own is left whole.  Both outcomes are written
into the schedule's decision log.

    graph, sched = schedule_with_epilogues(loops)    # `graph` is `loops` with the kept splits
"""

from __future__ import annotations

import dataclasses

import torch

from compiler_core.gc_pause import with_gc_paused
from compiler_core.ir.graph import Buffer, ExternCall, Layout, LoopGraph, LoopNode, ViewRef
from compiler_core.ir.index import linear_index
from compiler_core.ir.lowering import broadcast_index, compute_dtype
from compiler_core.ir.values import Cast, Load, Op, Value
from compiler_core.schedule.accumulate import fold_matmul_adds
from compiler_core.schedule.artifacts import FusionDecision, Schedule
from compiler_core.schedule.fusion import schedule
from compiler_core.schedule.reader_recompute import recompute_for_readers
from compiler_core.stack_room import with_stack_room

ADDMM = "aten.addmm.default"
CONVOLUTION = "aten.convolution.default"
MM_REASON = "matmul runs in cuBLAS/oneDNN (extern call); its bias add runs in the kernel after it"
CONV_REASON = "convolution runs in cuDNN (extern call); its bias add runs in the kernel after it"
CONV_BIAS_SPLIT_DEVICES = ("cuda",)  # where a convolution's bias may move into the kernel after it (see below)


@with_gc_paused
@with_stack_room
def schedule_with_epilogues(graph: LoopGraph, fusion: bool = True) -> tuple[LoopGraph, Schedule]:
    """Split each addmm whose bias add can fuse with its consumers; schedule the result; then fold
    each matmul whose product only a lone add reads into an addmm (schedule/accumulate.py), and let
    readers in other kernels recompute cheap values the schedule stored for them (reader_recompute.py). Without
    fusion no bias add can join a kernel, so every addmm stays whole, and nothing is folded."""
    if not fusion:
        return graph, schedule(graph, fusion=False)
    split, sched, split_notes = _split_and_schedule(graph)
    folded, fold_notes = fold_matmul_adds(split, sched)
    if fold_notes:
        sched = schedule(folded)  # the log of the schedule that runs: the first one names removed matmuls
    # Values this schedule stores only for readers in other kernels, where recomputing them is cheaper.
    recomputed, recompute_notes = recompute_for_readers(folded, sched)
    if recompute_notes:
        folded, sched = recomputed, schedule(recomputed)
    return folded, dataclasses.replace(sched, decisions=split_notes + fold_notes + recompute_notes + sched.decisions)


def _split_and_schedule(graph: LoopGraph) -> tuple[LoopGraph, Schedule, tuple[FusionDecision, ...]]:
    """The graph with the kept addmm splits, its schedule, and the split decisions (not yet in the log)."""
    readers: dict[str, list[LoopNode]] = {}  # buffer -> nodes reading it
    for n in graph.nodes:
        for b in n.input_buffers:
            readers.setdefault(b, []).append(n)
    candidates = [n.name for n in graph.nodes if _splittable(n, readers.get(n.output.name, ()))]
    if not candidates:
        return graph, schedule(graph), ()
    trial = split_addmm(graph, candidates)
    trial_sched = schedule(trial)
    kept = [name for name in candidates if _bias_add_fused(trial, trial_sched, name)]
    final = split_addmm(graph, kept) if kept != candidates else trial
    sched = trial_sched if kept == candidates else schedule(final)
    notes = tuple(_decision(graph.node(name), readers.get(graph.node(name).output.name, ()), name in kept)
                  for name in candidates)
    return final, sched, notes


def split_addmm(graph: LoopGraph, names: list[str]) -> LoopGraph:
    """`graph` with each named addmm node replaced by an extern mm and a pointwise bias add (a named
    convolution: by the convolution without its bias, and the add).

    The bias add keeps the addmm's node and buffer name, so every reader, graph output and FX value
    (LoopGraph.values) still finds its result there."""
    taken = {b.name for b in graph.inputs} | {b.name for n in graph.nodes for b in (n.output, *n.extra_outputs)}
    nodes: list[LoopNode] = []
    for node in graph.nodes:
        if node.name not in names:
            nodes.append(node)
            continue
        mm_name = node.name + ("_conv" if node.extern.target == CONVOLUTION else "_mm")
        while mm_name in taken:
            mm_name += "_"
        taken.add(mm_name)
        nodes += _split(node, mm_name)
    return dataclasses.replace(graph, nodes=tuple(nodes))


def _splittable(node: LoopNode, readers: list[LoopNode]) -> bool:
    """An addmm computing bias + x @ w exactly (beta = alpha = 1), into a dense 2-D buffer, or a CUDA
    convolution with a bias, whose result a pointwise or reduction node reads."""
    if node.kind == "extern" and node.extern.target == CONVOLUTION:
        return _conv_splittable(node, readers)
    if node.kind != "extern" or node.extern.target != ADDMM or len(node.extern.args) != 3:
        return False
    if any(value != 1 for key, value in node.extern.kwargs if key in ("beta", "alpha")):
        return False
    bias, mat1, mat2 = node.extern.args
    if not all(isinstance(a, ViewRef) for a in (bias, mat1, mat2)) or len(node.output.layout.size) != 2:
        return False
    if not node.output.layout.is_dense() or node.output.dtype != bias.dtype:
        return False
    return any(n.kind != "extern" for n in readers)


def _conv_splittable(node: LoopNode, readers: list[LoopNode]) -> bool:
    """On the GPU ATen runs a biased convolution as cuDNN's convolution and then a separate add of the
    bias over the whole output (SegFormer's depthwise convolution: 40 us of add on the H200, where
    Inductor adds the bias in the kernel after the convolution). On the CPU oneDNN adds it while it
    writes the output, for nothing: the split would only move work, so it is not made there."""
    args = node.extern.args
    if node.output.device not in CONV_BIAS_SPLIT_DEVICES or len(args) != 9 or node.extern.kwargs:
        return False
    bias = args[2]
    if not isinstance(bias, ViewRef) or len(bias.layout.size) != 1 or bias.dtype != node.output.dtype:
        return False
    if len(node.output.layout.size) < 3 or bias.layout.size[0] != node.output.layout.size[1]:
        return False
    return node.output.layout.is_dense() and any(n.kind != "extern" for n in readers)


def _split(node: LoopNode, mm_name: str) -> list[LoopNode]:
    out = node.output
    mm_buffer = Buffer(mm_name, out.dtype, out.layout, out.device, kind="extern")
    if node.extern.target == CONVOLUTION:
        # The same convolution without its bias; the bias, one value per output channel (dim 1), is
        # read as a [1, C, 1, ...] broadcast by the add below.
        args = node.extern.args
        bias = args[2]
        mm = LoopNode(name=mm_name, kind="extern", output=mm_buffer, origins=node.origins,
                      extern=ExternCall(target=CONVOLUTION, op=node.extern.op, args=(*args[:2], None, *args[3:]),
                                        kwargs=(), reason=CONV_REASON),
                      extern_inputs=tuple(dict.fromkeys((args[0].buffer, args[1].buffer))), source_fn=node.source_fn)
        rank = len(out.layout.size)
        bias = ViewRef(bias.buffer, Layout((1, bias.layout.size[0]) + (1,) * (rank - 2),
                                           (0, bias.layout.stride[0]) + (0,) * (rank - 2), bias.layout.offset),
                       bias.dtype)
    else:
        bias, mat1, mat2 = node.extern.args
        mm = LoopNode(name=mm_name, kind="extern", output=mm_buffer, origins=node.origins,
                      extern=ExternCall(target="aten.mm.default", op=torch.ops.aten.mm.default, args=(mat1, mat2),
                                        kwargs=(), reason=MM_REASON),
                      extern_inputs=tuple(dict.fromkeys((mat1.buffer, mat2.buffer))), source_fn=node.source_fn)
    shape = tuple(out.layout.size)
    names = [f"x{i}" for i in range(len(shape))]
    cdt = compute_dtype(out.dtype)

    def load(view: ViewRef) -> Value:
        value = Load(view.buffer, broadcast_index(view.layout, shape, names), view.dtype)
        return value if view.dtype == cdt else Cast(value, cdt)

    body: Value = Op("add", (load(ViewRef(mm_name, out.layout, out.dtype)), load(bias)), cdt)
    if body.dtype != out.dtype:
        body = Cast(body, out.dtype)
    bias_add = LoopNode(name=node.name, kind="pointwise", output=dataclasses.replace(out, kind="kernel"),
                        origins=node.origins, ranges=shape, body=body,
                        store_index=linear_index(names, out.layout.stride, out.layout.offset),
                        source_fn=node.source_fn)
    return [mm, bias_add]


def _bias_add_fused(graph: LoopGraph, sched: Schedule, name: str) -> bool:
    """Whether the bias add shares its kernel with a node that reads its result, and that result then
    stays in registers. When it must be written anyway (a graph output, a tensor saved for the
    backward, a read by another kernel or extern), the split writes the product and the sum both: one
    more full-size buffer and pass than the whole addmm, for nothing."""
    group = sched.group_of(name)
    buffer = graph.node(name).output.name
    fused = any(buffer in graph.node(m).input_buffers for m in group.nodes if m != name)
    return fused and buffer not in group.materialized


def _decision(node: LoopNode, reader_nodes: list[LoopNode], split: bool) -> FusionDecision:
    name, readers = node.name, tuple(n.name for n in reader_nodes)
    conv = node.extern.target == CONVOLUTION
    op, bare = ("convolution", "a convolution without it") if conv else ("addmm", "an extern mm")
    if split:
        reason = f"epilogue: {op} split into {bare} and a bias add that runs in the kernel of its readers"
    elif conv:
        reason = ("extern: convolution keeps its bias (ATen adds it after cuDNN's kernel): its bias add would "
                  "run as a kernel of its own, or its result must be written to memory anyway")
    else:
        reason = ("extern: addmm stays one extern call (the library adds the bias): its bias add would run as "
                  "a kernel of its own, or its result must be written to memory anyway")
    return FusionDecision((name,), readers, split, split, reason, 0)
