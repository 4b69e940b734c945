"""Memory planning: live ranges of the buffers kernels write, and reuse of dead ones.

A buffer is live from the step (group) that writes it to the last step that reads it; graph
outputs live past the end.  When a buffer dies its storage goes to a pool; a later buffer of the
same dtype, device and storage size takes it instead of allocating.  Extern outputs are allocated
by PyTorch, so they can donate storage but never receive it.
"""

from __future__ import annotations

from compiler_core.ir.graph import Buffer, LoopGraph
from compiler_core.schedule.artifacts import LiveRange, MemoryPlan, Schedule


def plan_memory(graph: LoopGraph, sched: Schedule) -> MemoryPlan:
    producers = graph.producers()
    buffers: dict[str, Buffer] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, group in enumerate(sched.groups):
        for name in group.materialized:
            node = producers[name]
            buf = node.output if node.output.name == name else next(b for b in node.extra_outputs if b.name == name)
            buffers[name] = buf
            first[name] = step
            last.setdefault(name, step)
        for node_name in group.nodes:
            for b in graph.node(node_name).input_buffers:
                if b in first:
                    last[b] = max(last[b], step)
    end = len(sched.groups)
    for name in graph.output_buffers():
        if name in last:
            last[name] = end
    ranges = tuple(LiveRange(n, buffers[n].nbytes, first[n], last[n]) for n in first)

    # Greedy reuse in step order.
    extern_outputs = {b.name for n in graph.nodes if n.kind == "extern" for b in (n.output, *n.extra_outputs)}
    pool: list[str] = []  # storages free for reuse
    reuse: list[tuple[str, str]] = []
    frees: list[tuple[int, tuple[str, ...]]] = []
    for step, group in enumerate(sched.groups):
        for name in group.materialized:
            donor = None
            if name not in extern_outputs:
                donor = next((d for d in pool if _fits(buffers[d], buffers[name])), None)
            if donor is not None:
                pool.remove(donor)
                reuse.append((name, donor))
        dying = tuple(n for n in first if last[n] == step)
        if dying:
            frees.append((step, dying))
            pool.extend(dying)
    # "Unplanned": every buffer allocated on its own and held until the program returns.
    unplanned = sum(r.nbytes for r in ranges)
    return MemoryPlan(live_ranges=ranges, reuse=tuple(reuse), frees=tuple(frees), inplace=(),
                      peak_bytes_planned=_peak(ranges, reuse, buffers, end), peak_bytes_unplanned=unplanned)


def _fits(donor: Buffer, buf: Buffer) -> bool:
    return (donor.dtype == buf.dtype and donor.device == buf.device
            and donor.layout.storage_numel == buf.layout.storage_numel)


def _peak(ranges: tuple[LiveRange, ...], reuse: list[tuple[str, str]], buffers: dict[str, Buffer], end: int) -> int:
    """Peak of allocated bytes when reusing buffers share one allocation."""
    taken = {new: old for new, old in reuse}

    def root(n: str) -> str:
        while n in taken:
            n = taken[n]
        return n

    span: dict[str, list[int]] = {}
    for r in ranges:
        s = span.setdefault(root(r.buffer), [r.first_step, r.last_step])
        s[0], s[1] = min(s[0], r.first_step), max(s[1], r.last_step)
    peak = 0
    for step in range(end + 1):
        peak = max(peak, sum(buffers[n].nbytes for n, (a, b) in span.items() if a <= step <= b))
    return peak
