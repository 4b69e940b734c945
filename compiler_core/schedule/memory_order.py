"""Kernel order for a lower memory peak: which ready kernel or extern call runs next.

Any topological order of a schedule's steps computes the same values, but not with the same memory:
a backward that recomputes the GELU's output (8 MiB) just after the matmul that makes the gradient
it multiplies (8 MiB) holds both with the saved pre-activation (8 MiB); run the recomputation and the
weight-gradient matmul that reads it first, and the recomputed value is gone before the gradient is
born. Inductor reorders for the same reason (torch/_inductor/memory.py); this is our own greedy.

The model: a step allocates the storages it is first to write (views and aliases of an input or of an
earlier buffer allocate nothing) and frees every storage it is the last reader of, and graph inputs
nobody else holds (`LoopGraph.released_inputs`: a backward's saved activations, which the host program
drops after their last use). Parameters and the caller's tensors stay, and graph outputs live to the
end. A write over a dying input (schedule/memory.py's "in place") is not modelled: the greedy may
count a step as allocating what it will write over, which only makes it cautious.

The greedy: of the steps ready, take the one whose run, followed by the steps it alone unlocks that
give back at least what they take (the weight gradient's matmul after the recomputation), reaches the
lowest memory, then leaves the least allocated; ties go to the earlier step of the given order. The
result is kept only when its simulated peak is below the given order's: an order nobody asked for
must buy something.

    order, peak = memory_order(graph, steps)    # steps: [(nodes, writes)], the given order
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler_core.ir.graph import LoopGraph
from compiler_core.ir.symbolic import hint

Step = tuple[tuple[str, ...], tuple[str, ...]]  # (LoopNode names, buffers it writes to memory)


@dataclass
class _Model:
    reads: list[set[str]]  # step -> storages it reads from memory
    allocates: list[list[str]]  # step -> storages it allocates (first writer of each)
    waits: list[set[int]]  # step -> steps it depends on
    feeds: list[list[int]]  # step -> steps depending on it
    size: dict[str, int]  # storage -> bytes
    kernel: list[bool]  # step -> ours (may write over a dying input) rather than an extern call
    readers: dict[str, int]  # storage -> number of steps reading it
    readers_of: dict[str, list[int]]  # storage -> the steps reading it
    pinned: frozenset  # storages never freed here (graph outputs, inputs the caller holds)
    inputs: frozenset  # storages of graph inputs (allocated before the first step)


@dataclass(frozen=True)
class GraphMemory:
    """What the model needs of a graph, whatever its steps: made once per graph (the fusion scheduler
    models every round's groups of one graph)."""
    storage_of: dict
    size: dict
    node_by_name: dict
    inputs: frozenset
    pinned: frozenset  # storages that outlive the program: graph outputs, inputs the caller holds

    @staticmethod
    def of(graph: LoopGraph) -> "GraphMemory":
        storage_of = graph.storage_of()
        # Symbolic sizes: the example call's bytes (an order that suits it; any order is correct).
        size = {b.name: hint(b.nbytes) for b in graph.inputs}
        size.update({b.name: hint(b.nbytes) for n in graph.nodes for b in (n.output, *n.extra_outputs)})
        return GraphMemory(storage_of, size, {n.name: n for n in graph.nodes},
                           frozenset(storage_of[b.name] for b in graph.inputs),
                           frozenset(storage_of[b] for b in graph.output_buffers())
                           | frozenset(storage_of[b.name] for b in graph.inputs if b.name not in graph.released_inputs))


def _model(graph: LoopGraph | GraphMemory, steps: list[Step]) -> _Model:
    facts = graph if isinstance(graph, GraphMemory) else GraphMemory.of(graph)
    storage_of, size, node_by_name, inputs = facts.storage_of, facts.size, facts.node_by_name, facts.inputs
    producer_step: dict[str, int] = {}
    for i, (nodes, _) in enumerate(steps):
        for name in nodes:
            node = node_by_name[name]
            for b in (node.output, *node.extra_outputs):
                producer_step[b.name] = i
    reads, allocates, waits, kernel = [], [], [], []
    allocated: set[str] = set()
    for i, (nodes, writes) in enumerate(steps):
        inside = {b.name for name in nodes for b in (node_by_name[name].output, *node_by_name[name].extra_outputs)}
        read_buffers = {b for name in nodes for b in node_by_name[name].input_buffers if b not in inside}
        reads.append({storage_of[b] for b in read_buffers})
        kernel.append(all(node_by_name[name].kind != "extern" for name in nodes))
        waits.append({producer_step[b] for b in read_buffers if b in producer_step} - {i})
        mine = []
        extern_outputs = [b.name for name in nodes if node_by_name[name].kind == "extern"
                          for b in (node_by_name[name].output, *node_by_name[name].extra_outputs)]
        for b in dict.fromkeys((*writes, *extern_outputs)):
            s = storage_of[b]
            if s == b and s not in inputs and s not in allocated:  # a view or alias allocates nothing
                allocated.add(s)
                mine.append(s)
        allocates.append(mine)
    feeds: list[list[int]] = [[] for _ in steps]
    for i, w in enumerate(waits):
        for j in sorted(w):
            feeds[j].append(i)
    readers_of: dict[str, list[int]] = {}
    for i, r in enumerate(reads):
        for s in r:
            readers_of.setdefault(s, []).append(i)
    readers = {s: len(steps_reading) for s, steps_reading in readers_of.items()}
    return _Model(reads, allocates, waits, feeds, size, kernel, readers, readers_of, facts.pinned, inputs)


def _freed(model: _Model, step: int, remaining: dict[str, int], extra: dict[str, int] | None = None) -> list[str]:
    """Storages that die when `step` runs, given `remaining` readers (minus `extra` already counted)."""
    out = []
    for s in model.reads[step]:
        left = remaining.get(s, 0) - (extra.get(s, 0) if extra else 0)
        if left == 1 and s not in model.pinned:
            out.append(s)
    for s in model.allocates[step]:  # written and never read: gone at once
        if model.readers.get(s, 0) == 0 and s not in model.pinned:
            out.append(s)
    return out


def _effect(model: _Model, step: int, remaining: dict[str, int], extra: dict[str, int] | None = None
            ) -> tuple[int, int]:
    """(bytes `step` allocates, bytes it gives back after). A kernel's output the size of an input
    that dies in it is counted as written over that input (schedule/memory.py's "in place"; assumed
    possible here, the planner checks it)."""
    freed = _freed(model, step, remaining, extra)
    give = sum(model.size[s] for s in freed)
    donors = [model.size[s] for s in freed if s in model.reads[step]] if model.kernel[step] else []
    grow = 0
    for s in model.allocates[step]:
        if model.size[s] in donors:
            donors.remove(model.size[s])
            give -= model.size[s]
        else:
            grow += model.size[s]
    return grow, give


def simulated_peak(model: _Model, order: list[int]) -> int:
    """The model's peak bytes over `order` (graph inputs counted from the start)."""
    return max(_tops(model, order), default=sum(model.size[s] for s in model.inputs))


def _tops(model: _Model, order: list[int]) -> list[int]:
    """Bytes held while each step of `order` runs (its new allocations included)."""
    remaining = dict(model.readers)
    current = sum(model.size[s] for s in model.inputs)
    tops = []
    for step in order:
        grow, give = _effect(model, step, remaining)
        tops.append(current + grow)
        current += grow - give
        for s in model.reads[step]:
            remaining[s] -= 1
    return tops


# The greedy's preferences, each a key over one ready step's look-ahead (smallest first; `top` and
# `after` relative to what is held before the step): "idle" is 1 for a step that allocates while
# nothing it feeds could run after it (a recomputation whose reader also waits for a gradient not
# made yet: run now, its output would only wait, holding memory).
PREFERENCES = {
    "least left allocated": lambda top, after, idle, i: (after, top, i),
    "lowest peak": lambda top, after, idle, i: (top, after, i),
    "no idle allocation, then least left": lambda top, after, idle, i: (idle, after, top, i),
}


def _greedy(model: _Model, n: int, preference=PREFERENCES["no idle allocation, then least left"]) -> list[int]:
    remaining = dict(model.readers)
    waiting = [set(w) for w in model.waits]
    ready = [i for i in range(n) if not waiting[i]]
    order: list[int] = []
    # A step's key changes only when a storage it (or a step it may run ahead of) reads loses a
    # reader, or when a step it feeds stops waiting for another: keys are kept until then, so a
    # round costs what changed, not the whole ready list's look-ahead.
    keys: dict[int, tuple] = {}
    while ready:
        best, best_key = None, None
        for i in ready:
            key = keys.get(i)
            if key is None:
                top, after = _look_ahead(model, i, remaining, waiting)
                idle = int(bool(model.allocates[i]) and all(waiting[j] != {i} for j in model.feeds[i]))
                key = keys[i] = preference(top, after, idle, i)
            if best_key is None or key < best_key:
                best, best_key = i, key
        ready.remove(best)
        order.append(best)
        stale: set[int] = set()
        for s in model.reads[best]:
            remaining[s] -= 1
            for j in model.readers_of[s]:
                stale.add(j)
                stale.update(model.waits[j])
        for j in model.feeds[best]:
            waiting[j].discard(best)
            stale.update(waiting[j])
            if not waiting[j]:
                ready.append(j)
        for i in stale:
            keys.pop(i, None)
    return order


def _look_ahead(model: _Model, step: int, remaining: dict[str, int], waiting: list[set[int]]) -> tuple[int, int]:
    """(highest, last) bytes held above what is held now, running `step`, then the steps only it was
    holding back that free at least what they allocate."""
    grow, give = _effect(model, step, remaining)
    top = grow
    after = top - give
    used = {s: 1 for s in model.reads[step]}
    for j in model.feeds[step]:
        if waiting[j] != {step}:
            continue
        grow, give = _effect(model, j, remaining, used)
        if grow <= give:
            top = max(top, after + grow)
            after += grow - give
            for s in model.reads[j]:
                used[s] = used.get(s, 0) + 1
    return top, after


def memory_order(graph: LoopGraph, steps: list[Step]) -> tuple[list[int], int]:
    """(order of `steps` to run them in, its simulated peak): the greedy's when that is lower than the
    given order's peak, else the given order."""
    model = _model(graph, steps)
    given = list(range(len(steps)))
    best, best_peak = given, simulated_peak(model, given)
    if len(steps) < 3:
        return best, best_peak
    for preference in PREFERENCES.values():
        order = _greedy(model, len(steps), preference)
        if len(order) != len(steps):  # a cycle cannot happen in a schedule; keep what we were given
            continue
        peak = simulated_peak(model, order)
        if peak < best_peak:
            best, best_peak = order, peak
    return best, best_peak


@dataclass(frozen=True)
class MemoryProfile:
    """Where each step runs in the memory order of a set of steps, and the bytes held meanwhile."""
    position: tuple[int, ...]  # step -> its place in the order
    held: tuple[int, ...]  # step -> bytes held while it runs (its own new allocations included)
    size: dict  # storage -> bytes
    peak: int


def memory_profile(graph: LoopGraph | GraphMemory, steps: list[Step]) -> MemoryProfile:
    """The memory order of `steps` (which need not come in a topological order) and what each step
    holds: the fusion scheduler reads it to see whether a merge that delays outputs would raise the
    peak."""
    model = _model(graph, steps)
    order = _greedy(model, len(steps))
    tops = _tops(model, order)
    position, held = [0] * len(steps), [0] * len(steps)
    for place, (step, top) in enumerate(zip(order, tops)):
        position[step], held[step] = place, top
    return MemoryProfile(tuple(position), tuple(held), model.size, max(tops, default=0))


__all__ = ["GraphMemory", "MemoryProfile", "memory_order", "memory_profile", "simulated_peak"]
