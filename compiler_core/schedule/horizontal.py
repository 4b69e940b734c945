"""Horizontal fusion: Schedule -> Schedule with independent pointwise kernels sharing one launch.

An optimizer step (SGD, Adam, AdamW with torch's foreach implementation) is one chain of pointwise
ops per parameter: no data flows between the chains, so vertical fusion leaves one kernel per
parameter (and one per parameter's step counter). Here such kernels are put into one launch:

- kernels of one iteration space become one ordinary kernel (one loop, all their stores);
- kernels of different spaces become the *segments* of a horizontal kernel: one launch whose
  work items are split between the segments (C++: one loop per segment, one after the other;
  Triton: each program finds its segment from its program id, `if pid < end_of_segment_0: ...`).
  Both backends print the segments' plans as they print any pointwise plan, so nothing new is
  needed in the loop bodies, and no work item evaluates another segment's code under a mask.

Which kernels may share a launch: pointwise kernels at the same *level* of the kernel graph (the
longest chain of kernels before them). Two kernels of one level never depend on each other, and
every edge between merged kernels still goes from a lower level to a higher one, so merging all of a
level cannot create a cycle. Only kernels all of whose writes are graph outputs take part: those
buffers live to the end of the program anyway, so running their kernels together cannot raise the
memory peak by holding temporaries longer (an optimizer step writes nothing else).
"""

from __future__ import annotations

import heapq

from compiler_core.ir.graph import LoopGraph
from compiler_core.ir.symbolic import hint
from compiler_core.schedule.artifacts import FusionDecision, FusionGroup, Schedule
from compiler_core.schedule.kernel_plan import Space, plan_refusal

# Pointer arguments of one horizontal kernel at most: 256 pointers are 2 KB of the 4 KB CUDA passes
# kernel parameters in, and each segment is one more branch for Triton to compile (Adam on 24
# parameters takes 216). A larger level is split into several kernels.
MAX_ARGUMENTS = 256
# Bytes of buffers that are not graph outputs one kernel may write and still take part.
MAX_TEMPORARY_BYTES = 1 << 16


def fuse_horizontally(graph: LoopGraph, sched: Schedule, kernel_name) -> Schedule:
    """Merge independent pointwise kernels of one level (see the module docstring).

        sched = fuse_horizontally(loops, vertical_schedule, kernel_name)
        [g.segments for g in sched.groups]   # ((nodes, x_ranges), ...) of each horizontal kernel
    """
    groups = list(sched.groups)
    outputs = graph.output_buffers()
    level = _levels(graph, groups)
    by_level: dict[int, list[FusionGroup]] = {}
    buffer_bytes = {n.output.name: hint(n.output.nbytes) for n in graph.nodes}  # a size cap: speed only
    for g in groups:
        temporary = sum(buffer_bytes.get(b, 0) for b in g.materialized if b not in outputs)
        if g.kind == "pointwise" and g.materialized and temporary <= MAX_TEMPORARY_BYTES:
            by_level.setdefault(level[id(g)], []).append(g)
    replaced: dict[int, FusionGroup] = {}  # id of an old group -> the group that now computes it
    decisions = list(sched.decisions)
    for members in by_level.values():
        for batch in _batches(graph, members):
            if len(batch) < 2:
                continue
            merged, why = _merge(graph, batch)
            for g in batch:
                replaced[id(g)] = merged
            decisions += [FusionDecision(batch[0].nodes, g.nodes, True, True, why, 0) for g in batch[1:]]
    if not replaced:
        return sched
    kept = [g for g in groups if id(g) not in replaced]
    kept += list({id(g): g for g in replaced.values()}.values())
    ordered = _topological(graph, kept)
    renamed = tuple(renumbered(g, i, graph, kernel_name) for i, g in enumerate(ordered))
    return Schedule.numbered(renamed, tuple(decisions))


def _levels(graph: LoopGraph, groups: list[FusionGroup]) -> dict[int, int]:
    """id(group) -> length of the longest chain of groups before it (groups come in execution order).
    Keyed by identity, not name: a level keyed by a name two extern calls shared was overwritten by
    the shallower call, and a kernel then merged with one it depends on."""
    producers = graph.producers()
    group_of = {n: id(g) for g in groups for n in g.nodes}
    level: dict[int, int] = {}
    for g in groups:
        before = {group_of[producers[b].name] for n in g.nodes for b in graph.node(n).input_buffers
                  if b in producers} - {id(g)}
        level[id(g)] = 1 + max((level[p] for p in before), default=-1)
    return level


def _arguments(graph: LoopGraph, g: FusionGroup) -> set[str]:
    inside = {graph.node(n).output.name for n in g.nodes}
    reads = {b for n in g.nodes for b in graph.node(n).input_buffers if b not in inside}
    return reads | set(g.materialized)


def _batches(graph: LoopGraph, members: list[FusionGroup]) -> list[list[FusionGroup]]:
    """Consecutive runs of `members` whose kernels take at most MAX_ARGUMENTS pointers together."""
    batches: list[list[FusionGroup]] = [[]]
    arguments: set[str] = set()
    for g in members:
        mine = _arguments(graph, g)
        if batches[-1] and len(arguments | mine) > MAX_ARGUMENTS:
            batches.append([])
            arguments = set()
        batches[-1].append(g)
        arguments |= mine
    return batches


def _merge(graph: LoopGraph, batch: list[FusionGroup]) -> tuple[FusionGroup, str]:
    """One group for `batch`: groups of one space share a segment when their plan builds."""
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    by_space: dict[tuple[int, ...], list[FusionGroup]] = {}
    for g in batch:
        by_space.setdefault(g.x_ranges, []).append(g)
    segments: list[tuple[tuple[str, ...], tuple[int, ...]]] = []
    for x, same in by_space.items():
        nodes = tuple(sorted((n for g in same for n in g.nodes), key=order.get))
        materialized = {b for g in same for b in g.materialized}
        if plan_refusal(graph, list(nodes), materialized, Space(x)) is None:
            segments.append((nodes, x))
        else:  # should not happen for independent pointwise nodes; keep them apart then
            segments += [(g.nodes, x) for g in same]
    nodes = tuple(sorted((n for g in batch for n in g.nodes), key=order.get))
    materialized = tuple(b for g in batch for b in g.materialized)
    internal = tuple(b for g in batch for b in g.internal)
    origins = tuple(dict.fromkeys(o for g in batch for o in g.origins))
    sizes = ", ".join(str(_numel(x)) for _, x in segments)
    if len(segments) == 1:
        why = (f"horizontal: {len(batch)} independent pointwise kernels of one iteration space "
               f"(x={list(segments[0][1])}) share one loop")
        group = FusionGroup("horizontal", "pointwise", nodes, segments[0][1], (), materialized, internal, origins)
    else:
        why = (f"horizontal: {len(batch)} independent pointwise kernels (no data path between them) share "
               f"one launch as {len(segments)} segments of {sizes} elements")
        total = (sum(_numel(x) for _, x in segments),)
        group = FusionGroup("horizontal", "pointwise", nodes, total, (), materialized, internal, origins,
                            segments=tuple(segments))
    return group, why


def _numel(x: tuple[int, ...]) -> int:
    total = 1
    for s in x:
        total *= s
    return total


def _topological(graph: LoopGraph, groups: list[FusionGroup]) -> list[FusionGroup]:
    """Groups in an order that respects data dependencies; of those ready, the earliest node first."""
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    producers = graph.producers()
    index = {n: i for i, g in enumerate(groups) for n in g.nodes}
    waiting = [set() for _ in groups]
    feeds: list[list[int]] = [[] for _ in groups]
    for i, g in enumerate(groups):
        for n in g.nodes:
            for b in graph.node(n).input_buffers:
                if b in producers and index[producers[b].name] != i and index[producers[b].name] not in waiting[i]:
                    waiting[i].add(index[producers[b].name])
                    feeds[index[producers[b].name]].append(i)
    first = [min(order[n] for n in g.nodes) for g in groups]
    ready = [(first[i], i) for i in range(len(groups)) if not waiting[i]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(groups[i])
        for j in feeds[i]:
            waiting[j].discard(i)
            if not waiting[j]:
                heapq.heappush(ready, (first[j], j))
    if len(out) != len(groups):
        raise RuntimeError("horizontal fusion produced a cycle between kernels")
    return out


def renumbered(g: FusionGroup, index: int, graph: LoopGraph, kernel_name) -> FusionGroup:
    """`g` named by `kernel_name` (fusion.py's) for its position `index` in the schedule."""
    if g.kind == "extern":
        return g
    name = kernel_name([graph.node(n) for n in g.nodes], index)
    if g.segments:  # torch's word for one op over a list of tensors
        name = "foreach_" + name.removeprefix("fused_")
    return FusionGroup(name, g.kind, g.nodes, g.x_ranges, g.r_ranges, g.materialized, g.internal, g.origins,
                       g.segments)
