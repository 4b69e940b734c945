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

Two more ways memory is given back early, as Inductor does too:
- *In place*: a kernel may write an output over an input storage that dies in that very kernel,
  when each element is read only where and before the same element of the output is written
  (`kernel_plan.can_write_over`). A backward's `grad * gelu'(x)` then needs no second buffer.
- *Released inputs*: the host program drops its reference to a graph input after the input's last
  use (`args.clear()` once unpacked: AOTAutograd hands the boxed arguments over). Nothing is reused
  or poisoned there, since the caller may hold the tensor too; but the saved activations of a
  backward graph are held by nobody else, so their memory is freed as soon as the backward is done
  with them instead of when it returns.
"""

from __future__ import annotations

from compiler_core.ir.graph import Buffer, Layout, LoopGraph, LoopNode, ViewRef
from compiler_core.ir.symbolic import hint
from compiler_core.schedule.artifacts import LiveRange, MemoryPlan, Schedule
from compiler_core.schedule.inplace import in_place_updates
from compiler_core.schedule.kernel_plan import PlanError, can_write_over, group_plan
from compiler_core.schedule.plan_passes import merge_reductions

# Extern ops whose result may be written into a storage we hand them: op -> its out= overload. Their
# results are dense and row-major, and the out= overload writes every element.
OUT_VARIANTS = {"aten.mm.default": "aten.mm.out", "aten.bmm.default": "aten.bmm.out",
                "aten.addmm.default": "aten.addmm.out"}
# The extern op that may write its result over its first argument when that argument dies in it.
ACCUMULATING = "aten.addmm.default"


def takes_storage(node: LoopNode, buf: Buffer) -> bool:
    """Whether `buf`, made by `node`, may be placed in a storage the planner hands on. A scatter's output
    never: it is its destination's storage, updated in place (LoopNode.destination)."""
    if node.kind == "scatter":
        return False
    if buf.kind == "kernel":
        return True
    return (buf.kind == "extern" and node.kind == "extern" and node.extern.target in OUT_VARIANTS
            and not node.result_slots and buf.name == node.output.name
            and buf.layout == Layout.contiguous(tuple(buf.layout.size)))


def plan_memory(graph: LoopGraph, sched: Schedule, updates: tuple[tuple[str, int], ...] = (),
                write_over: bool = True) -> MemoryPlan:
    """Live ranges, frees and reuse; `updates` (input name, output index) names the inputs the caller
    overwrites with outputs afterwards: those outputs are written in place where it is safe.
    `write_over=False` when something reads a kernel's inputs after it ran (the check mode)."""
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
    # Bytes of the example call where sizes are symbolic (what the explorer draws).
    ranges = tuple(LiveRange(n, hint(buffers[n].nbytes), first[n], last[n], storage_of[n]) for n in first)

    # A storage lives as long as the longest-lived buffer in it; pinned ones live past the end.
    members: dict[str, list[str]] = {}
    for name in first:
        members.setdefault(storage_of[name], []).append(name)
    pinned = {storage_of[b.name] for b in graph.inputs} | {storage_of[b] for b in graph.output_buffers()}
    death = {s: (end if s in pinned else max(last[m] for m in names)) for s, names in members.items()}

    pool: list[str] = []  # dead storages whose memory may be handed on
    reuse: list[tuple[str, str]] = []  # (new buffer, buffer whose storage it takes)
    written: list[tuple[str, str]] = []  # (output, dying storage it is written over in the same kernel)
    frees: list[tuple[int, tuple[str, ...]]] = []
    released = _input_releases(graph, sched, step_of_node, pinned, storage_of, set(in_place.values()))
    dies_at: dict[int, list[str]] = {}  # step -> storages whose last reader it is (a scan per step is quadratic)
    for storage, step in death.items():
        if storage not in pinned:
            dies_at.setdefault(step, []).append(storage)
    for step, group in enumerate(sched.groups):
        dying = dies_at.get(step, [])
        # Only a storage allocated as one buffer can be handed on whole: that buffer is its name.
        whole = [s for s in dying if s in buffers and buffers[s].kind in ("kernel", "extern")]
        over = (_written_over(graph, group, whole, members, buffers, maker, set(in_place), storage_of)
                if write_over else {})
        for name in group.materialized:
            if name in in_place or not takes_storage(maker[name], buffers[name]):
                continue  # lives in its input, or allocated by PyTorch inside the extern call
            if name in over:
                written.append((name, over[name]))
                continue
            donor = next((d for d in pool if _fits(buffers[d], buffers[name])), None)
            if donor is not None:
                pool.remove(donor)
                reuse.append((name, donor))
        names = [m for s in dying for m in members[s]] + list(released.get(step, ()))
        if names:
            frees.append((step, tuple(names)))
            taken = set(over.values())
            pool.extend(s for s in whole if s not in taken)
    # "Unplanned": every storage allocated on its own and held until the program returns.
    # Symbolic sizes: both peaks are the example call's bytes.
    unplanned = sum(hint(buffers[s].nbytes) for s in members if s in first)
    allocated = {s: names for s, names in members.items() if s not in in_place}
    return MemoryPlan(live_ranges=ranges, reuse=tuple(reuse), frees=tuple(frees), inplace=inplace,
                      peak_bytes_planned=_peak(allocated, first, death, reuse + written, buffers, end),
                      peak_bytes_unplanned=unplanned, inplace_refused=refused, written_over=tuple(written))


def _written_over(graph: LoopGraph, group, dying: list[str], members: dict[str, list[str]],
                  buffers: dict[str, Buffer], maker: dict[str, LoopNode], elsewhere: set[str],
                  storage_of: dict[str, str]) -> dict[str, str]:
    """Outputs of `group` that its kernel may write over an input storage dying in it: output -> donor.
    `elsewhere`: outputs already placed (written into a graph input they update)."""
    if group.kind == "extern":
        return _accumulated_over(graph.node(group.nodes[0]), dying, buffers, elsewhere, storage_of)
    if group.segments or not dying:  # a horizontal kernel: segments are not one plan
        return {}
    read = {b for n in group.nodes for b in graph.node(n).input_buffers}
    candidates = [d for d in dying if d in read]
    outputs = [n for n in group.materialized if takes_storage(maker[n], buffers[n]) and n not in elsewhere]
    if not candidates or not any(_fits(buffers[d], buffers[o]) for d in candidates for o in outputs):
        return {}
    try:
        plan = merge_reductions(group_plan(graph, group))  # the plan's passes over memory as codegen prints them
    except PlanError:
        return {}
    chosen: dict[str, str] = {}
    for out in outputs:
        for donor in candidates:
            others = tuple(m for m in members[donor] if m != donor)
            if _fits(buffers[donor], buffers[out]) and can_write_over(plan, donor, out, others):
                chosen[out] = donor
                candidates.remove(donor)
                break
    return chosen


def _accumulated_over(node: LoopNode, dying: list[str], buffers: dict[str, Buffer], elsewhere: set[str],
                      storage_of: dict[str, str]) -> dict[str, str]:
    """An addmm whose addend dies in the call writes its result over the addend: `C = C + A @ B` in
    the library, each element of C read before it is written (schedule/accumulate.py makes these).
    Only a whole buffer laid out exactly as the result, in a storage neither factor reads."""
    if node.extern.target != ACCUMULATING or node.result_slots or node.output.name in elsewhere:
        return {}
    if not takes_storage(node, node.output) or not dying:
        return {}
    addend, *factors = node.extern.args
    if not isinstance(addend, ViewRef):
        return {}
    # The addend may be a buffer sharing its storage with the one allocated for it (a scatter's
    # result lives in its destination's storage): the storage, named by that buffer, is the donor.
    storage = storage_of.get(addend.buffer)
    if storage not in dying:
        return {}
    donor = buffers[storage]
    if addend.layout != node.output.layout or donor.layout != node.output.layout or donor.dtype != node.output.dtype:
        return {}
    if any(isinstance(f, ViewRef) and storage_of.get(f.buffer) == storage for f in factors):
        return {}
    return {node.output.name: donor.name}


def _input_releases(graph: LoopGraph, sched: Schedule, step_of_node: dict[str, int], pinned: set[str],
                    storage_of: dict[str, str], updated: set[str]) -> dict[int, list[str]]:
    """step -> graph inputs whose last reader is that step (the host program drops them after it).
    Inputs in a storage a graph output lives in stay, as do inputs an output is written into
    (`updated`): the output is returned from them."""
    last: dict[str, int] = {}
    inputs = {b.name for b in graph.inputs if b.kind == "input"}
    pinned_by_output = {storage_of[b] for b in graph.output_buffers()}
    for node in graph.nodes:
        for b in node.input_buffers:
            if b in inputs:
                last[b] = max(last.get(b, -1), step_of_node[node.name])
    out: dict[int, list[str]] = {}
    for name, step in last.items():
        if storage_of[name] not in pinned_by_output and name not in updated:
            out.setdefault(step, []).append(name)
    return out


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
        peak = max(peak, sum(hint(buffers[n].nbytes) for n, (a, b) in span.items() if a <= step <= b))
    return peak
