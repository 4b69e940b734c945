"""Memory planning on storages: live ranges, and reuse of storages nobody can see any more.

The unit is the *storage*, not the buffer name.  Views are layouts over their base buffer (they
make no buffer at all), and an extern call that may alias its inputs puts its outputs into their
storage (`LoopGraph.storage_of`).  A storage is live from the step that first writes one of its
buffers to the last step that reads any of them, and it is never freed or handed on while it holds
a graph input, a constant or a graph output.  When a storage dies it goes to a pool; a later kernel
output of the same dtype, device and size takes it instead of allocating.  Extern outputs are
allocated by PyTorch, so they can donate storage but never receive it, except the matmuls with an
`out=` variant (OUT_VARIANTS): the host program then calls e.g. `aten.mm.out(a, b, out=reused)`, as
the activations and gradients of a training step are mostly matmul results.
"""

from __future__ import annotations

from compiler_core.ir.graph import Buffer, Layout, LoopGraph, LoopNode
from compiler_core.schedule.artifacts import LiveRange, MemoryPlan, Schedule
from compiler_core.schedule.inplace import in_place_updates

# Extern ops whose result may be written into a storage we hand them: op -> its out= overload. Their
# results are dense and row-major, and the out= overload writes every element.
OUT_VARIANTS = {"aten.mm.default": "aten.mm.out", "aten.bmm.default": "aten.bmm.out",
                "aten.addmm.default": "aten.addmm.out"}


def takes_storage(node: LoopNode, buf: Buffer) -> bool:
    """Whether `buf`, made by `node`, may be placed in a storage the planner hands on."""
    if buf.kind == "kernel":
        return True
    return (buf.kind == "extern" and node.kind == "extern" and node.extern.target in OUT_VARIANTS
            and not node.result_slots and buf.name == node.output.name
            and buf.layout == Layout.contiguous(tuple(buf.layout.size)))


def plan_memory(graph: LoopGraph, sched: Schedule, updates: tuple[tuple[int, int], ...] = ()) -> MemoryPlan:
    """Live ranges, frees and reuse; `updates` (input index, output index) names the inputs the caller
    overwrites with outputs afterwards: those outputs are written in place where it is safe."""
    inplace, refused = in_place_updates(graph, sched, updates)
    in_place = dict(inplace)
    storage_of = graph.storage_of()
    buffers: dict[str, Buffer] = {b.name: b for b in graph.inputs}
    buffers.update({b.name: b for n in graph.nodes for b in (n.output, *n.extra_outputs)})
    step_of_node = {node: step for step, group in enumerate(sched.groups) for node in group.nodes}
    maker = {b.name: n for n in graph.nodes for b in (n.output, *n.extra_outputs)}

    first: dict[str, int] = {}  # buffer -> step that writes it (to memory)
    last: dict[str, int] = {}  # buffer -> last step that reads it
    for step, group in enumerate(sched.groups):
        for name in group.materialized:
            first[name] = step
            last.setdefault(name, step)
    for node in graph.nodes:
        step = step_of_node[node.name]
        for b in node.input_buffers:
            if b in last:
                last[b] = max(last[b], step)
    end = len(sched.groups)
    ranges = tuple(LiveRange(n, buffers[n].nbytes, first[n], last[n], storage_of[n]) for n in first)

    # A storage lives as long as the longest-lived buffer in it; pinned ones live past the end.
    members: dict[str, list[str]] = {}
    for name in first:
        members.setdefault(storage_of[name], []).append(name)
    pinned = {storage_of[b.name] for b in graph.inputs} | {storage_of[b] for b in graph.output_buffers()}
    death = {s: (end if s in pinned else max(last[m] for m in names)) for s, names in members.items()}

    pool: list[str] = []  # dead storages whose memory may be handed on
    reuse: list[tuple[str, str]] = []  # (new buffer, buffer whose storage it takes)
    frees: list[tuple[int, tuple[str, ...]]] = []
    for step, group in enumerate(sched.groups):
        for name in group.materialized:
            if name in in_place or not takes_storage(maker[name], buffers[name]):
                continue  # lives in its input, or allocated by PyTorch inside the extern call
            donor = next((d for d in pool if _fits(buffers[d], buffers[name])), None)
            if donor is not None:
                pool.remove(donor)
                reuse.append((name, donor))
        dying = [s for s, d in death.items() if d == step and s not in pinned]
        if dying:
            frees.append((step, tuple(m for s in dying for m in members[s])))
            # Only a storage allocated as one buffer can be handed on whole: that buffer is its name.
            pool.extend(s for s in dying if s in buffers and buffers[s].kind in ("kernel", "extern"))
    # "Unplanned": every storage allocated on its own and held until the program returns.
    unplanned = sum(buffers[s].nbytes for s in members if s in first)
    allocated = {s: names for s, names in members.items() if s not in in_place}
    return MemoryPlan(live_ranges=ranges, reuse=tuple(reuse), frees=tuple(frees), inplace=inplace,
                      peak_bytes_planned=_peak(allocated, first, death, reuse, buffers, end),
                      peak_bytes_unplanned=unplanned, inplace_refused=refused)


def _fits(donor: Buffer, buf: Buffer) -> bool:
    return (donor.dtype == buf.dtype and donor.device == buf.device
            and donor.layout.storage_numel == buf.layout.storage_numel)


def _peak(members: dict[str, list[str]], first: dict[str, int], death: dict[str, int],
          reuse: list[tuple[str, str]], buffers: dict[str, Buffer], end: int) -> int:
    """Peak of allocated bytes, counting each physical allocation once (reuse chains share one)."""
    taken = {new: old for new, old in reuse}

    def root(n: str) -> str:
        while n in taken:
            n = taken[n]
        return n

    span: dict[str, list[int]] = {}
    for storage, names in members.items():
        if storage not in first:  # lives in a graph input's storage: not allocated here
            continue
        start = min(first[m] for m in names)
        s = span.setdefault(root(storage), [start, death[storage]])
        s[0], s[1] = min(s[0], start), max(s[1], death[storage])
    peak = 0
    for step in range(end + 1):
        peak = max(peak, sum(buffers[n].nbytes for n, (a, b) in span.items() if a <= step <= b))
    return peak
