"""In-place updates: which kernel outputs are written straight into the graph input they replace.

A graph that mutates its inputs (an optimizer step updates every parameter and its state) reaches us
functional: the new values are outputs, and after the graph runs AOTAutograd copies each into its
input (`param.copy_(new_param)`: on a GPU one kernel per tensor, four per parameter for Adam). When
our kernel writes the new value into the input's own storage, that copy finds source and
destination the same and returns at once (ATen's copy_ checks for it), and no new tensor is allocated.

Writing over an input is safe only when nothing needs its old value afterwards. Refused, with the
reason, unless all of these hold:
- the output is a kernel's result (not an extern call's) with the input's dtype and exact layout, and
  the graph returns it once, with no other output in the input's storage;
- every kernel reading the input runs before the writing kernel, or is that kernel;
- inside the writing kernel every node of the writer's loop that depends on the input's old value is
  computed over the writer's elements and reads the input (and such nodes) only at its own element:
  each element's old value is then read by the very iteration that overwrites it, before it does
  (codegen puts the stores last in such kernels).
"""

from __future__ import annotations

from compiler_core.ir.graph import LoopGraph, LoopNode, ViewRef
from compiler_core.ir.index import linear_index
from compiler_core.ir.values import Load, walk
from compiler_core.schedule.artifacts import FusionGroup, Schedule


def in_place_updates(graph: LoopGraph, sched: Schedule, updates: tuple[tuple[str, int], ...]
                     ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """((output buffer, input buffer) written in place, (output buffer, why not)) for `updates`,
    the (input name, output index) pairs of the graph's mutated inputs.

        inplace, refused = in_place_updates(loops, sched, (("arg0_1", 0), ("arg1_1", 1)))
    """
    inputs = {b.name: b for b in graph.inputs if b.kind == "input"}
    producers = graph.producers()
    storage_of = graph.storage_of()
    step_of = {n: i for i, g in enumerate(sched.groups) for n in g.nodes}
    group_of = {n: g for g in sched.groups for n in g.nodes}
    output_storages = [storage_of[o.buffer] for o in graph.outputs if isinstance(o, ViewRef)]
    inplace, refused = [], []
    for name, k in updates:
        if name not in inputs or k >= len(graph.outputs) or not isinstance(graph.outputs[k], ViewRef):
            continue
        target, out = inputs[name], graph.outputs[k]
        if storage_of[out.buffer] == storage_of[target.name]:
            continue  # already made in the input's storage (a scatter stored into it, lowering/scatter.py)
        why = _refusal(graph, target, out, producers, storage_of, step_of, group_of, output_storages)
        if why:
            refused.append((out.buffer, why))
        else:
            inplace.append((out.buffer, target.name))
    # One storage written in place twice would hold whichever kernel wrote last.
    taken: set[str] = set()
    unique = []
    for pair in inplace:
        if pair[0] in taken or pair[1] in taken:
            refused.append((pair[0], f"{pair[1]} or {pair[0]} is already written in place"))
        else:
            taken |= set(pair)
            unique.append(pair)
    return tuple(unique), tuple(refused)


def _refusal(graph: LoopGraph, target, out: ViewRef, producers, storage_of, step_of, group_of,
             output_storages) -> str:
    node = producers.get(out.buffer)
    if node is None or node.kind != "pointwise" or node.output.name != out.buffer:
        return "not the result of one of our pointwise kernels"
    group = group_of[node.name]
    if group.kind != "pointwise":
        return f"written by {group.name}, a {group.kind} kernel"
    buf = node.output
    if (buf.dtype, buf.layout, out.layout) != (target.dtype, target.layout, target.layout) or target.layout.offset:
        return f"its dtype or layout differs from {target.name}'s"
    if output_storages.count(storage_of[out.buffer]) != 1:
        return "the graph returns it more than once"
    if storage_of[target.name] in output_storages:
        return f"the graph also returns {target.name} (or a view of it)"
    writer = step_of[node.name]
    for reader in graph.nodes:
        if not any(storage_of.get(b) == storage_of[target.name] for b in reader.input_buffers):
            continue
        if step_of[reader.name] > writer:
            return f"{reader.name} reads {target.name} after {group.name} would overwrite it"
        if step_of[reader.name] == writer and reader.name not in _loop_of(group, node.name):
            return f"{reader.name} reads {target.name} in another loop of {group.name}"
    # The nodes of the writer's loop that depend on the input's old value (through other nodes of the
    # loop, inlined there): each must be computed at the writer's elements and read it at its own.
    # Nodes that do not depend on it (a scalar constant broadcast into the loop) may be anything.
    tainted = {target.name}
    for name in _loop_of(group, node.name):  # topological order
        member = graph.node(name)
        if not tainted & set(member.input_buffers):
            continue
        if member.kind != "pointwise" or tuple(member.ranges) != tuple(node.ranges):
            return f"{name} depends on {target.name} but is computed over other elements than {node.name}"
        elsewhere = _read_elsewhere(member, tainted, producers, target)
        if elsewhere:
            return f"{name} reads {elsewhere} at other elements than its own"
        tainted.add(member.output.name)
    return ""


def _loop_of(group: FusionGroup, node: str) -> tuple[str, ...]:
    """The nodes sharing `node`'s loop: its segment in a horizontal kernel, else the whole group."""
    for nodes, _ in group.segments:
        if node in nodes:
            return nodes
    return group.nodes


def _read_elsewhere(member: LoopNode, buffers: set[str], producers: dict[str, LoopNode], target) -> str:
    """A buffer of `buffers` that `member` reads at an element other than its own, or ""."""
    names = [f"x{d}" for d in range(len(member.ranges))]
    ranges = dict(zip(names, member.ranges))
    layouts = {target.name: target.layout}
    for v in walk(member.body):
        if not isinstance(v, Load) or v.buffer not in buffers:
            continue
        layout = layouts.get(v.buffer) or producers[v.buffer].output.layout
        own = linear_index(names, layout.stride, layout.offset)
        if v.mask is not None or v.indirect or v.index.simplify(ranges) != own.simplify(ranges):
            return v.buffer
    return ""

