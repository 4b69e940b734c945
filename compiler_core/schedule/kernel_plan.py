"""KernelPlan: what one fused kernel computes, in the kernel's own loop variables.

A fused group's nodes are placed into one iteration space: rows `x0, x1, ...` and, for reduction
kernels, per-row reduction variables `r0, r1, ...`.  Pointwise producers are inlined into their
consumers (recomputed instead of stored and re-read); a reduction's result becomes a per-row local
(`ReductionResult`).  The plan is a list of steps in order; both code generators print it.

Building a plan is also the scheduler's final legality check: if any load cannot be resolved
(a consumer would need a reduction result of another row, say) fusion is refused with that reason.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from math import prod
from typing import Optional

import torch

from compiler_core.ir.graph import Layout, LoopGraph, LoopNode
from compiler_core.ir.index import Index, Var, bounds_static, floordiv, linear_index, mod
from compiler_core.ir.symbolic import decide, hint, is_symbolic, known, memo_of_env
from compiler_core.ir.values import (
    Constant,
    IndexValue,
    IndirectIndex,
    Load,
    Op,
    ReductionResult,
    Value,
    children,
    format_position,
    format_values,
    loads,
    rebuild,
    subs_index,
    walk,
    with_origins,
)


class PlanError(Exception):
    """This set of nodes cannot form one kernel; the message is the reason shown to users."""


@dataclass(frozen=True)
class Space:
    """A kernel's iteration space.  `full`/`roles` say how a reduction's input shape maps onto it."""

    x: tuple[int, ...]
    r: tuple[int, ...] = ()
    full: Optional[tuple[int, ...]] = None  # reduction input shape
    roles: Optional[tuple[tuple[str, int], ...]] = None  # per full dim: ("x", k) or ("r", k)

    @staticmethod
    def of(node: LoopNode) -> "Space":
        if node.kind != "reduction":
            return Space(tuple(node.ranges))
        roles, kx, kr = [], 0, 0
        for d in range(len(node.full_shape)):
            if d in node.reduced_dims:
                roles.append(("r", kr))
                kr += 1
            else:
                roles.append(("x", kx))
                kx += 1
        return Space(tuple(node.ranges), tuple(node.reduction_ranges), tuple(node.full_shape), tuple(roles))

    @property
    def is_reduction(self) -> bool:
        return self.full is not None

    def ranges(self) -> dict[str, int]:
        out = {f"x{i}": s for i, s in enumerate(self.x)}
        out.update({f"r{i}": s for i, s in enumerate(self.r)})
        return out

    def describe(self) -> str:
        return f"x={list(self.x)}" + (f", r={list(self.r)}" if self.is_reduction else "")


def placement(node: LoopNode, space: Space) -> Optional[tuple[dict[str, Index], str]]:
    """Map a node's loop variables into `space`: (mapping, "full" | "row"), or None if it does not fit."""
    if node.kind == "reduction":
        mine = Space.of(node)
        if space.is_reduction and mine.full == space.full and mine.roles == space.roles:
            return {}, "full"
        return None
    shape = tuple(node.ranges)
    names = [f"x{i}" for i in range(len(shape))]
    if node.kind == "scatter":
        # Only its own loop: placing by index arithmetic inverts the output's layout, and a scatter's loop
        # runs over its source elements, not over its output's.
        return ({}, "row") if not space.is_reduction and shape == space.x else None
    if not space.is_reduction:
        if shape == space.x:
            return {}, "row"
        if _same_numel(shape, space.x):
            return _in_storage_order(node, linear_index(_names("x", space.x), _contiguous(space.x)), space), "row"
        return None
    full_names = [f"{role}{k}" for role, k in space.roles]
    if shape == space.full:
        return {n: Index.var(v) for n, v in zip(names, full_names)}, "full"
    keepdim = tuple(1 if role == "r" else s for s, (role, _) in zip(space.full, space.roles))
    if shape == keepdim:
        mapping = {n: (Index.var(f"x{k}") if role == "x" else Index.of(0)) for n, (role, k) in zip(names, space.roles)}
        return mapping, "row"
    if shape == space.x:
        return {}, "row"
    # A reshape (view, flatten, transpose...) between this node and the kernel's shape: same elements,
    # other dims.  Place it by index arithmetic instead of refusing.
    if _same_numel(shape, space.full):
        return _in_storage_order(node, linear_index(full_names, _contiguous(space.full)), space), "full"
    if _same_numel(shape, space.x):
        return _in_storage_order(node, linear_index(_names("x", space.x), _contiguous(space.x)), space), "row"
    return None


def misfit_reason(node: LoopNode, space: Space, needed_outside: bool) -> str:
    """Why `node` cannot be placed into `space`, starting with the kind of reason: size (element
    counts differ), shape (same elements, dims that do not line up with a reduction's rows) or
    reduction axis (a reduction over the same input, other dims reduced)."""
    where = f"the kernel's space {space.describe()}"
    if node.kind == "reduction":
        mine = Space.of(node)
        if space.is_reduction and mine.full == space.full:
            reduced = [d for d, (role, _) in enumerate(space.roles) if role == "r"]
            return (f"reduction axis: {node.name} reduces dims {list(node.reduced_dims)} of {list(mine.full)}, "
                    f"the kernel reduces dims {reduced}")
        if space.is_reduction and prod(mine.full) == prod(space.full):
            return (f"shape: {node.name} is a reduction over {list(mine.full)}, {where} reduces "
                    f"{list(space.full)}: same elements, rows that do not line up")
        return f"size: {node.name} is a reduction over {mine.describe()}, a different iteration space than {where}"
    count = prod(node.ranges)
    total = prod(space.full) if space.is_reduction else prod(space.x)
    tail = " and its result is needed outside the kernel" if needed_outside else ""
    if count != total and not (space.is_reduction and count == prod(space.x)):
        return (f"size: {node.name} (ranges {list(node.ranges)}) has {count} elements, {where} has {total}, "
                f"so it does not fit{tail}")
    return f"shape: {node.name} (ranges {list(node.ranges)}) does not fit {where}{tail}"


def _names(prefix: str, sizes: tuple[int, ...]) -> list[str]:
    return [f"{prefix}{i}" for i in range(len(sizes))]


def _contiguous(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return Layout.contiguous(sizes).stride


def _same_numel(shape: tuple[int, ...], other: tuple[int, ...]) -> bool:
    return prod(shape) == prod(other) and known(prod(shape) > 0)


def _in_storage_order(node: LoopNode, flat: Index, space: Space) -> dict[str, Index]:
    """The node's loop variables at the kernel's flat position `flat`, walking the node's output in
    storage order: its stores are then contiguous in the kernel, and a transposed or reshaped read of
    an in-kernel producer becomes index arithmetic on the producer's layout (invert_layout)."""
    return invert_layout(node, flat + node.output.layout.offset, space.ranges())


@dataclass(frozen=True)
class Step:
    node: str
    scope: str  # "full": runs for every (x, r) point; "row": once per x point
    value: Value  # in kernel variables, loads of in-kernel producers resolved
    reduction_type: Optional[str] = None  # set for reductions
    store_buffer: Optional[str] = None  # buffer written (None: result stays in registers)
    store_index: Optional[Index] = None
    store_dtype: Optional[torch.dtype] = None
    origins: tuple[str, ...] = ()  # the FX nodes of the step's own node (its loads and store, its reduction)
    # reduction_type "sumexp" (plan_passes.online_softmax): sum(exp(value - M)) over the row, M the row's
    # max of the same value, computed by step `online_max` in the same pass (running max and rescaled sum)
    online_max: Optional[str] = None
    # reduction_type "welford" (plan_passes.welford): sum((value - centre)**2) over the row, `centre` a row
    # value made of earlier reductions' results (the mean: sum(value) / n), in the pass that computes
    # those: per lane a running count, mean and M2 (Welford), centred on `centre` once the pass is over
    centre: Optional[Value] = None
    # A scatter's step (LoopNode kind "scatter"): `value` is added ("add") into store_buffer[store_index +
    # sum(position * stride)] with an atomic add, the positions range-checked like an indirect load's.
    accumulate: str = ""
    store_positions: tuple[IndirectIndex, ...] = ()

    def values(self) -> tuple[Value, ...]:
        """Every value tree of the step: what it computes and the positions its store reads."""
        return (self.value, *(t.value for t in self.store_positions))

    def map_values(self, fn) -> "Step":
        """The step with `fn` applied to its value and to each store position's value."""
        positions = tuple(dataclasses.replace(t, value=fn(t.value)) for t in self.store_positions)
        return dataclasses.replace(self, value=fn(self.value), store_positions=positions)


INTEGER_DIVISION_OPS = ("floordiv", "truncdiv", "remainder", "fmod")


@dataclass(frozen=True)
class KernelPlan:
    name: str
    space: Space
    steps: tuple[Step, ...]
    inputs: tuple[tuple[str, torch.dtype], ...]  # (parameter, dtype) of each buffer read from memory
    outputs: tuple[tuple[str, torch.dtype], ...]  # (parameter, dtype) of each buffer written to memory
    origins: tuple[str, ...]
    arguments: tuple[str, ...] = ()  # the buffers passed for the parameters, inputs then outputs
    # A horizontal kernel (schedule/horizontal.py): `steps` is empty and each segment is a pointwise plan
    # of its own space, its parameters named as this kernel's. Both code generators print each segment
    # as they print any pointwise plan, over its own share of the launch.
    segments: tuple["KernelPlan", ...] = ()
    # Set by the plan passes (schedule/plan_passes.py), each with its reason in `notes`:
    index_dtype: str = "int32"  # "int32" | "int64": the type of every index computation of the kernel
    largest_offset: int = 0  # the largest magnitude any index computation of the kernel reaches
    split: int = 1  # a reduction split across this many programs per row, then a second kernel (1: not split)
    columns: bool = False  # a reduction over the outer dimension: memory runs along x, programs take many columns
    notes: tuple[str, ...] = ()  # the passes' decisions, one line each, printed at the top of every kernel

    @property
    def is_reduction(self) -> bool:
        return bool(self.space.r)

    @property
    def xnumel(self) -> int:
        return prod(self.space.x)

    @property
    def rnumel(self) -> int:
        return prod(self.space.r)

    def divides_integers(self) -> bool:
        """Whether some step divides integers (floordiv, truncdiv, remainder, fmod): such a kernel can meet a
        zero divisor, on which eager PyTorch on the CPU raises."""
        return any(isinstance(v, Op) and v.op in INTEGER_DIVISION_OPS and not v.dtype.is_floating_point
                   for step in self.all_steps() for v in walk(step.value))

    def reads_positions(self) -> bool:
        """Whether some load takes positions from an index tensor (gather, index, embedding): such a
        kernel can meet a position out of range, on which eager PyTorch raises."""
        return any(step.store_positions or any(isinstance(v, Load) and v.indirect for v in walk(step.value))
                   for step in self.all_steps())

    @property
    def scatters(self) -> bool:
        """Whether some step adds or stores into positions read from memory (a scatter kernel: codegen
        prints its loop without vector pragmas, with atomic adds or plain stores)."""
        return any(step.accumulate for step in self.all_steps())

    def all_steps(self) -> tuple[Step, ...]:
        """The steps of this plan, or of all its segments."""
        return self.steps + tuple(s for seg in self.segments for s in seg.steps)

    def may_flag_errors(self) -> bool:
        """Whether a kernel can set the error flag the runtime turns into eager's exception."""
        return self.divides_integers() or self.reads_positions()

    def pretty(self) -> str:
        """The kernel IR both code generators print: iteration space, the passes' decisions, the
        parameters and the buffers behind them, then each pass over memory with its steps."""
        head = f"# kernel plan {self.name}: {self.space.describe()}; index {self.index_dtype}"
        head += "; reduces columns" if self.columns else ""
        if self.split > 1:
            head += f"; split across {self.split} programs per {'column' if self.columns else 'row'}"
        lines = [head, *(f"# {note}" for note in self.notes)]
        params = [n for n, _ in self.inputs] + [n for n, _ in self.outputs]
        lines += [f"# {p} = {b}" for p, b in zip(params, self.arguments)]
        for seg in self.segments:
            lines += [f"segment {seg.name}:"] + ["    " + ln for ln in seg.pretty().splitlines()]
        passes = self.phases() if self.is_reduction else ([("loop", list(self.steps))] if self.steps else [])
        for kind, steps in passes:
            where = ("for each x:" if not self.is_reduction else
                     "for each x, one pass over r:" if kind == "loop" else "for each x, after the pass:")
            lines.append(where)
            # Subtrees the steps share (a common subexpression, a recurrence's last step) print once.
            values = [v for step in steps for v in (step.value, step.centre) if v is not None]
            bindings, texts = format_values(values)
            text_of = {id(v): t for v, t in zip(values, texts)}
            lines += [f"    {name} = {text}" for name, text in bindings]
            for step in steps:
                value = text_of[id(step.value)]
                if step.online_max:
                    value = f"sum(exp({value} - {step.online_max}))  [online: rescaled as {step.online_max} grows]"
                elif step.centre is not None:
                    centre = text_of[id(step.centre)]
                    value = (f"sum(({value} - {centre})**2)  [welford: running count, mean and M2 per lane, "
                             "centred after the pass]")
                elif step.reduction_type:
                    value = f"{step.reduction_type}({value})"
                target = f"{step.store_buffer}[{step.store_index}]" if step.store_buffer else f"{step.node} (kept)"
                if step.accumulate:
                    target = f"{step.store_buffer}[{step.store_index}{format_position(step.store_positions)}]"
                    op, how = ("+=", f"atomic {step.accumulate}") if step.accumulate == "add" else ("=", "overwrite")
                    lines.append(f"    {target} {op} {value}    # {step.node} ({how})")
                    continue
                lines.append(f"    {target} = {value}    # {step.node}")
        return "\n".join(lines)

    def phases(self) -> list[tuple[str, list[Step]]]:
        """Steps grouped into ("loop", full steps sharing one pass over r) and ("row", [step]) items,
        so that nothing reads a reduction before the pass that finishes it."""
        items: list[tuple[str, list[Step]]] = []
        open_loop: list[Step] = []
        open_reductions: set[str] = set()
        for step in self.steps:
            deps = {v.node for v in walk(step.value) if isinstance(v, ReductionResult)}
            if step.scope == "full":
                if deps & open_reductions:
                    items.append(("loop", open_loop))
                    open_loop, open_reductions = [], set()
                open_loop.append(step)
                if step.reduction_type:
                    open_reductions.add(step.node)
            else:
                if open_loop:
                    items.append(("loop", open_loop))
                    open_loop, open_reductions = [], set()
                items.append(("row", [step]))
        if open_loop:
            items.append(("loop", open_loop))
        return items


def plan_refusal(graph: LoopGraph, members: list[str], materialized: set[str], space: Space,
                 recomputed: Optional[dict] = None) -> Optional[str]:
    """Why build_kernel_plan would refuse these members in this space (PlanError's text), or None.

    The scheduler asks this of every candidate group and never prints the plan: the same placements,
    checks and inlining, in the same order, but walking the inlined trees instead of building them
    (building was most of a 1,000-node graph's scheduling time). A masked read whose mask itself
    reads a member (rare: a cat of computed conditions) changes with inlining: that plan is built."""
    try:
        inliner = _place_members(graph, members, materialized, space, recomputed)
        for n in members:
            node = inliner.nodes[n]
            if node.kind in ("pointwise", "scatter") and node.output.name not in materialized:
                continue  # as build_kernel_plan: inlined where read, or a scatter nobody reads
            inliner.check(inliner.body_in_space(n))
            if node.kind == "scatter":
                mapping = inliner.placed[n][0]
                for t in node.scatter_positions:
                    inliner.check(subs_index(with_origins(t.value, node.origins), mapping, inliner.ranges))
        return None
    except PlanError as why:
        return str(why)
    except _BuildToTell:
        try:
            build_kernel_plan(graph, "candidate", members, materialized, space, recomputed, parameters=False)
            return None
        except PlanError as why:
            return str(why)


def _place_members(graph: LoopGraph, members: list[str], materialized: set[str], space: Space,
                   recomputed: Optional[dict]) -> "_Inliner":
    nodes = {n: graph.node(n) for n in members}
    inliner = _Inliner(graph, nodes, space, recomputed if recomputed is not None else {})
    for n in members:
        p = inliner.place(n)
        if p is None and (nodes[n].output.name in materialized or nodes[n].kind != "pointwise"):
            raise PlanError(misfit_reason(nodes[n], space, nodes[n].output.name in materialized))
        if p is not None:
            inliner.placed[n] = p
    _check_scatters(list(nodes.values()), inliner.by_buffer, space)
    return inliner


def build_kernel_plan(graph: LoopGraph, name: str, members: list[str], materialized: set[str],
                      space: Space, recomputed: Optional[dict] = None, parameters: bool = True) -> KernelPlan:
    """Place `members` (topological order) into `space`; store only `materialized` buffers.

    `recomputed`: a cache shared by the plans one scheduler builds for one graph (`_Inliner` says what
    it holds), so the scheduler's many candidate plans compute each placement and recomputation once.
    `parameters=False`: buffers keep their names (a candidate plan, built only to see whether it
    raises PlanError, is never printed)."""
    inliner = _place_members(graph, members, materialized, space, recomputed)
    nodes, ranges, placed, resolve = inliner.nodes, inliner.ranges, inliner.placed, inliner.resolve

    steps = []
    for n in members:
        node = nodes[n]
        is_stored = node.output.name in materialized
        if node.kind in ("pointwise", "scatter") and not is_stored:
            continue  # a pointwise node not stored is inlined into its consumers; a scatter not stored, read by none
        mapping, scope = placed[n]
        value = resolve(inliner.body_in_space(n))
        store_index = _store_in_space(node, mapping, ranges) if is_stored else None
        if node.kind == "scatter":
            if is_stored:
                positions = tuple(dataclasses.replace(t, value=resolve(subs_index(with_origins(t.value, node.origins),
                                                                                   mapping, ranges)))
                                  for t in node.scatter_positions)
                steps.append(Step(node=n, scope=scope, value=value, store_buffer=node.output.name,
                                  store_index=store_index, store_dtype=node.output.dtype, origins=node.origins,
                                  accumulate=node.accumulate, store_positions=positions))
            continue
        # Two reductions of one value (layer norm's decomposition sums x twice) both stay here; the plan
        # pass merge_reductions (schedule/plan_passes.py) computes the second no more, and says so.
        steps.append(Step(node=n, scope=scope if node.kind == "pointwise" else "full", value=value,
                          reduction_type=node.reduction_type,
                          store_buffer=node.output.name if is_stored else None, store_index=store_index,
                          store_dtype=node.output.dtype, origins=node.origins))
    origins = tuple(dict.fromkeys(o for n in members for o in nodes[n].origins))
    plan = KernelPlan(name=name, space=space, steps=tuple(steps), inputs=(), outputs=(), origins=origins)
    return _with_parameters(plan) if parameters else plan


class _BuildToTell(Exception):
    """plan_refusal cannot tell without building the plan (see _Inliner.check)."""


class _Inliner:
    """Producers of one plan's members inlined into their readers: a load of a pointwise member becomes
    that member's body at the element the load asks for, a load of a reduction member its row's result.

    A class, not closures in build_kernel_plan: a nested function that calls itself is a reference
    cycle, which left every candidate plan's trees to the cyclic collector (232,000 objects for a
    1,000-node graph, collected in one 0.3 s pause).

    `cache` is shared by the plans one scheduler builds for one graph (keys tagged by kind): where a
    node sits in a space and its body there, a pointwise producer's body at the element a load asks
    for, and the buffers a tree reads depend on the node, the index and the space alone, not on the
    other members, so the scheduler's many candidate plans compute each once."""

    def __init__(self, graph: LoopGraph, nodes: dict[str, LoopNode], space: Space, cache: dict):
        self.graph, self.nodes, self.space, self.cache = graph, nodes, space, cache
        self.ranges = space.ranges()
        self.by_buffer = {node.output.name: node for node in nodes.values()}
        self.placed: dict[str, tuple[dict[str, Index], str]] = {}
        self.resolved: dict[Load, Value] = {}  # each (buffer, index) is inlined once, however often it is read

    def place(self, n: str) -> Optional[tuple[dict[str, Index], str]]:
        key = ("placed", n, self.space)
        if key not in self.cache:
            self.cache[key] = placement(self.nodes[n], self.space)
        return self.cache[key]

    def body_in_space(self, n: str) -> Value:
        """Member `n`'s body at its placement in the space (a placed member)."""
        key = ("body", n, self.space)
        if key not in self.cache:
            node = self.nodes[n]
            self.cache[key] = subs_index(with_origins(node.body, node.origins), self.placed[n][0], self.ranges)
        return self.cache[key]

    def reads(self, value: Value) -> frozenset[str]:
        """The buffers a tree loads, kept beside the tree (so its id stays its own) for the next plan."""
        key = ("reads", id(value))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not value:
            hit = self.cache[key] = (value, frozenset(load.buffer for load in loads(value)))
        return hit[1]

    def in_bounds(self, load: Load) -> bool:
        """Whether `load` reads only elements its buffer's layout holds, at every point of the space."""
        reach, span = self._bounds(load.index), self.graph.element_spans.get(load.buffer)
        return (reach is not None and span is not None and known(span[0] <= reach[0])
                and known(reach[1] <= span[1]))  # for every size (a symbolic bound not shown: no)

    def _bounds(self, index: Index) -> Optional[tuple]:
        if index.is_static and all(type(r) is int for r in self.ranges.values()):
            key = self.cache.get("ranges key")
            if key is None:
                key = self.cache["ranges key"] = tuple(sorted(self.ranges.items()))
            return bounds_static(index, key)
        return index.bounds(self.ranges)

    def resolve(self, value: Value, depth: int = 0) -> Value:
        if depth > 120:
            raise PlanError("size: producer chain too long to inline into one kernel")
        if self.by_buffer.keys().isdisjoint(self.reads(value)):
            return value  # reads no member: nothing to inline (most candidate pairs' producers)
        by_buffer, resolved = self.by_buffer, self.resolved

        def leaf(v: Value) -> Value:
            if not isinstance(v, Load) or v.buffer not in by_buffer:
                return v
            if v not in resolved:
                resolved[v] = self.load_in_kernel(v, depth)
            return resolved[v]

        return rebuild(value, leaf)

    def check(self, value: Value, depth: int = 0) -> None:
        """resolve(value, depth) without building its result: the same loads of members meet the same
        checks in the same order (rebuild's: a load's mask and positions before the load, arguments
        in order), so the first PlanError is the one resolve would raise. Raises _BuildToTell where
        the two could differ (a member read under a mask that itself reads a member)."""
        if depth > 120:
            raise PlanError("size: producer chain too long to inline into one kernel")
        if self.by_buffer.keys().isdisjoint(self.reads(value)):
            return
        by_buffer, resolved, seen = self.by_buffer, self.resolved, set()
        stack: list[tuple[Value, bool]] = [(value, False)]
        while stack:  # post-order, children first: rebuild's order of `leaf` calls
            v, expanded = stack.pop()
            if expanded:
                if isinstance(v, Load) and v.buffer in by_buffer and v not in resolved:
                    self._check_load(v, depth)
                    resolved[v] = v  # checked; the value is never read in this mode
                continue
            if id(v) in seen:
                continue
            seen.add(id(v))
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(children(v)))

    def _check_load(self, v: Load, depth: int) -> None:
        """load_in_kernel's checks, and check() of the producer's body where it is recomputed."""
        if v.mask is not None and not self.by_buffer.keys().isdisjoint(self.reads(v.mask)):
            raise _BuildToTell  # resolve reads this load with its mask inlined: another load, maybe other checks
        producer = self.by_buffer[v.buffer]
        if producer.kind in ("scatter", "reduction") or v.indirect:
            self.load_in_kernel(v, depth)  # raises, or a ReductionResult: no inlining below it
            return
        body = self._producer_body(producer, v)
        if v.mask is None:
            self.check(body, depth + 1)
        else:
            self.check(masked_loads(body, v.mask, self.in_bounds), depth + 1)

    def _producer_body(self, producer: LoopNode, v: Load) -> Value:
        """A pointwise producer's body at the element `v` asks for (ends in a cast to its buffer's dtype,
        so rounding matches the unfused program)."""
        key = (producer.name, v.index, v.mask, self.space)
        body = self.cache.get(key)
        if body is None:
            mapping = invert_layout_masked(producer, v.index, self.ranges, v.mask)
            body = self.cache[key] = subs_index(with_origins(producer.body, producer.origins), mapping, self.ranges)
        return body

    def _store_of(self, producer: LoopNode) -> Index:
        """Where `producer` (a placed member) stores in this space: its placement decides it."""
        key = ("store", producer.name, self.space)
        store = self.cache.get(key)
        if store is None:
            store = self.cache[key] = _store_in_space(producer, self.placed[producer.name][0], self.ranges)
        return store

    def load_in_kernel(self, v: Load, depth: int) -> Value:
        producer, ranges = self.by_buffer[v.buffer], self.ranges
        if producer.kind == "scatter":
            raise PlanError(f"scatter: {producer.name} is complete only when its kernel ends (other programs "
                            "add into the same elements), so nothing in that kernel may read it")
        if v.indirect:
            raise PlanError(f"indirect read: {producer.name} is read at positions loaded from memory, which "
                            "cannot be mapped back to its loop variables: it must be stored first")
        if producer.kind == "reduction":
            store = self._store_of(producer)
            if v.index.simplify(ranges) != store:
                raise PlanError(f"reduction axis: a consumer reads reduction {producer.name} at {v.index}, not "
                                f"at this row's result {store}: the rows of the two do not line up")
            return ReductionResult(producer.name, producer.body.dtype)
        # Pointwise producer: recompute it here, at the element this load asks for.
        body = self._producer_body(producer, v)
        if v.mask is None:
            return self.resolve(body, depth + 1)
        # A masked read (cat, pad): where the mask is off the producer's element does not exist, so
        # its loads must not happen either; the value there is 0, as the masked load gives.
        body = self.resolve(masked_loads(body, v.mask, self.in_bounds), depth + 1)
        return Op("where", (v.mask, body, Constant(_zero(body.dtype), body.dtype)), body.dtype, producer.origins)


def _check_scatters(members: list[LoopNode], by_buffer: dict[str, LoopNode], space: Space) -> None:
    """A scatter ends its kernel's writes to its buffer: its destination must be complete before any of
    its adds (made by another kernel), and only a pointwise kernel's loop carries its atomic adds."""
    for node in members:
        if node.kind != "scatter":
            continue
        if space.is_reduction:
            raise PlanError(f"scatter: {node.name} adds into positions read from memory; it runs in a pointwise "
                            f"loop over its source elements, not in a reduction's space {space.describe()}")
        if node.destination in by_buffer:
            raise PlanError(f"scatter: {node.name} adds into {node.destination}, which must be complete before the "
                            "first add: another kernel writes it")


def group_plan(graph: LoopGraph, group) -> KernelPlan:
    """The plan of a scheduled (non-extern) FusionGroup: in its reduction's space if it has one."""
    reduction = next((graph.node(n) for n in group.nodes if graph.node(n).kind == "reduction"), None)
    space = Space.of(reduction) if reduction is not None else Space(group.x_ranges)
    return build_kernel_plan(graph, group.name, list(group.nodes), set(group.materialized), space)


def _with_parameters(plan: KernelPlan) -> KernelPlan:
    """Name the kernel's pointer parameters by position (`in_ptr0`, `out_ptr0`...), never by buffer:
    buffers are named after FX nodes (`view`, `exp`, `x0`...), which could shadow a helper or a loop
    variable inside the kernel.  `arguments` keeps the buffers to pass, in parameter order."""
    inputs: dict[str, torch.dtype] = {}
    for step in plan.steps:
        for v in (v for value in step.values() for v in walk(value)):
            if isinstance(v, Load):
                inputs.setdefault(v.buffer, v.dtype)
    outputs = {s.store_buffer: s.store_dtype for s in plan.steps if s.store_buffer}
    param = {b: f"in_ptr{i}" for i, b in enumerate(inputs)}
    param.update({b: f"out_ptr{i}" for i, b in enumerate(outputs)})

    def rename(v: Value) -> Value:
        return dataclasses.replace(v, buffer=param[v.buffer]) if isinstance(v, Load) else v

    steps = tuple(dataclasses.replace(s.map_values(lambda value: rebuild(value, rename)),
                                      store_buffer=param[s.store_buffer] if s.store_buffer else None)
                  for s in plan.steps)
    return dataclasses.replace(plan, steps=steps, inputs=tuple((param[b], dt) for b, dt in inputs.items()),
                               outputs=tuple((param[b], dt) for b, dt in outputs.items()),
                               arguments=(*inputs, *outputs))


def segmented_plan(name: str, segments: list[KernelPlan]) -> KernelPlan:
    """One horizontal kernel from the pointwise plans of its segments: their parameters are renamed
    to this kernel's (`in_ptr0`...), the buffers passed once each, inputs then outputs."""
    if any(p.is_reduction or p.segments for p in segments):
        raise PlanError("horizontal: only pointwise plans become segments of one kernel")
    inputs: dict[str, torch.dtype] = {}
    outputs: dict[str, torch.dtype] = {}
    for plan in segments:
        n_in = len(plan.inputs)
        for (_, dt), buf in zip(plan.inputs, plan.arguments[:n_in]):
            inputs.setdefault(buf, dt)
        for (_, dt), buf in zip(plan.outputs, plan.arguments[n_in:]):
            outputs.setdefault(buf, dt)
    if set(inputs) & set(outputs):
        raise PlanError("horizontal: a segment reads a buffer another segment writes")
    param = {b: f"in_ptr{i}" for i, b in enumerate(inputs)}
    param.update({b: f"out_ptr{i}" for i, b in enumerate(outputs)})
    renamed = []
    for plan in segments:
        local = dict(zip([p for p, _ in plan.inputs + plan.outputs], plan.arguments))

        def rename(v: Value, local: dict[str, str] = local) -> Value:
            return dataclasses.replace(v, buffer=param[local[v.buffer]]) if isinstance(v, Load) else v

        steps = tuple(dataclasses.replace(s, value=rebuild(s.value, rename),
                                          store_buffer=param[local[s.store_buffer]] if s.store_buffer else None)
                      for s in plan.steps)
        renamed.append(dataclasses.replace(plan, name=f"{name}_segment{len(renamed)}", steps=steps,
                                           inputs=tuple((param[local[p]], dt) for p, dt in plan.inputs),
                                           outputs=tuple((param[local[p]], dt) for p, dt in plan.outputs),
                                           arguments=tuple(param[local[p]] for p, _ in plan.inputs + plan.outputs)))
    origins = tuple(dict.fromkeys(o for p in segments for o in p.origins))
    total = sum(p.xnumel for p in segments)
    return KernelPlan(name=name, space=Space((total,)), steps=(),
                      inputs=tuple((param[b], dt) for b, dt in inputs.items()),
                      outputs=tuple((param[b], dt) for b, dt in outputs.items()), origins=origins,
                      arguments=(*inputs, *outputs), segments=tuple(renamed))


def masked_loads(value: Value, mask: Value, in_bounds=lambda load: False) -> Value:
    """Every load in `value` also guarded by `mask`, except plain loads `in_bounds` says are inside
    their buffer everywhere (a padded read's per-channel batch-norm scale): those read a real element
    wherever they run, the caller's `where(mask, ...)` discards it outside the mask, and the same load
    under the nine masks of a 3x3 window is one load, not nine."""
    def leaf(v: Value) -> Value:
        if not isinstance(v, Load) or (v.mask is None and not v.indirect and in_bounds(v)):
            return v
        both = mask if v.mask is None else Op("logical_and", (mask, v.mask), torch.bool)
        return dataclasses.replace(v, mask=both)

    return rebuild(value, leaf)


def _zero(dtype: torch.dtype):
    return False if dtype == torch.bool else 0.0 if dtype.is_floating_point else 0


def _store_in_space(node: LoopNode, mapping: dict[str, Index], ranges: dict[str, int]) -> Index:
    return node.store_index.subs(mapping, ranges)


def invert_layout(producer: LoopNode, offset: Index, ranges: dict[str, int]) -> dict[str, Index]:
    """Loop variables of `producer` that wrote the element at storage `offset` (dense layouts)."""
    layout = producer.output.layout
    if _static(layout, offset, ranges):
        # The scheduler asks the same inversions again for every candidate group a pair of nodes is
        # part of: Mamba's unrolled selective scan asked 19,167 of them, 980 distinct, 57 of its 85 s
        # of compile. With static sizes an inversion depends on its arguments alone.
        return dict(_inverted_static(layout, offset, tuple(sorted(ranges.items()))))
    memo = memo_of_env("inverted layouts")  # symbolic: the same questions, per shape environment
    if memo is None:
        return _inverted(layout, offset, ranges)
    key = (layout, offset, tuple(sorted(ranges.items())))
    if key not in memo:
        memo[key] = tuple(_inverted(layout, offset, ranges).items())
    return dict(memo[key])


@functools.lru_cache(maxsize=1 << 14)
def _inverted_static(layout: Layout, offset: Index, ranges: tuple) -> tuple:
    return tuple(_inverted(layout, offset, dict(ranges)).items())


def _static(layout: Layout, offset: Index, ranges: dict[str, int]) -> bool:
    """No symbolic size anywhere (a decision about symbols depends on the graph's shape environment)."""
    return (all(type(v) is int for v in ranges.values()) and type(layout.offset) is int
            and all(type(v) is int for v in layout.size + layout.stride) and offset.is_static)


def _inverted(layout: Layout, offset: Index, ranges: dict[str, int]) -> dict[str, Index]:
    mapping: dict[str, Index] = {}
    dims = sorted(range(len(layout.size)), key=lambda d: -hint(layout.stride[d]))
    # The order of symbolic strides is the example's; it holds for every size (or is guarded).
    assert all(decide(layout.stride[a] >= layout.stride[b]) for a, b in zip(dims, dims[1:]))
    for rank, d in enumerate(dims):
        size, stride = layout.size[d], layout.stride[d]
        if decide(size <= 1):  # one position; or none, and then no element is ever read (nothing to divide by)
            mapping[f"x{d}"] = Index.of(0)
            continue
        q = floordiv(offset - layout.offset, stride, ranges)
        mapping[f"x{d}"] = q if rank == 0 else mod(q, size, ranges)
    return mapping


def _divides(mapping: dict[str, Index]) -> bool:
    return any(not isinstance(atom, Var) for m in mapping.values() for atom, _ in m.terms)


def _divisions(mapping: dict[str, Index]) -> int:
    """How many floor divisions and modulos the mapping's expressions hold, nested ones included."""
    def count(index: Index) -> int:
        return sum(0 if isinstance(atom, Var) else 1 + count(atom.arg) for atom, _ in index.terms)
    return sum(count(m) for m in mapping.values())


def invert_layout_masked(producer: LoopNode, offset: Index, ranges: dict[str, int],
                         mask: Optional[Value]) -> dict[str, Index]:
    """invert_layout, with fewer divisions where the read happens only under `mask` and that allows it."""
    mapping = invert_layout(producer, offset, ranges)
    if mask is not None and _divides(mapping):
        narrowed = invert_where_masked(producer, offset, ranges, mask)
        if narrowed is not None and _divisions(narrowed) < _divisions(mapping):
            return narrowed
    return mapping


def invert_where_masked(producer: LoopNode, offset: Index, ranges: dict[str, int],
                        mask: Value) -> Optional[dict[str, Index]]:
    """invert_layout for a read that happens only where `mask` holds, affine where that makes it so.

    A padded read (max pooling's window over a zero- or -inf-padded input, a convolution's halo)
    reaches its producer at `(2*x2 - 1)*W + 2*x3 - 1`: over the loop's whole range the row and column
    parts go negative, so the producer's channel is a floor division with a carry
    (`((x1 + (x2 + 15)//16 + 15) % 16)`), printed per load. Where the mask holds (`2*x2 >= 1`,
    `2*x3 >= 1`), no part goes negative and the channel is x1. The mask's bounds on single loop
    variables shift those variables to start at 0, the layout is inverted over the narrower ranges,
    and the shift is undone; the caller uses the result if it has fewer divisions left (rotary's
    half-rotation of a grouped-query key keeps the head's `x1 // 2` and loses the rest). Exact wherever the
    mask holds, and the inlined loads read nothing where it does not (they take the mask)."""
    if any(is_symbolic(r) for r in ranges.values()):
        return None  # the bounds below are compared as numbers: symbolic ranges keep the general inverse
    low = {name: 0 for name in ranges}
    high = dict(ranges)  # exclusive
    flipped = {"ge": "le", "gt": "lt", "lt": "gt", "le": "ge"}
    for expr, op, bound in _bounds_in(mask):
        ((atom, coef),) = expr.terms
        if not isinstance(atom, Var) or atom.name not in ranges:
            continue
        limit = bound - expr.const  # coef * x (op) limit
        if coef < 0:
            coef, limit, op = -coef, -limit, flipped[op]
        n = atom.name
        if op == "ge":
            low[n] = max(low[n], -(-limit // coef))
        elif op == "gt":
            low[n] = max(low[n], limit // coef + 1)
        elif op == "lt":
            high[n] = min(high[n], -(-limit // coef))
        else:
            high[n] = min(high[n], limit // coef + 1)
    shifted = {n for n in ranges if low[n] > 0 or high[n] < ranges[n]}
    if not shifted or any(high[n] <= low[n] for n in shifted):
        return None
    narrow = {n: (high[n] - low[n] if n in shifted else r) for n, r in ranges.items()}
    there = offset.subs({n: Index.var(n) + low[n] for n in shifted if low[n]})
    mapping = invert_layout(producer, there, narrow)
    back = {n: Index.var(n) - low[n] for n in shifted if low[n]}
    return {k: m.subs(back) for k, m in mapping.items()}


def _bounds_in(mask: Value):
    """(expr, op, bound) for each `IndexValue(expr) op Constant(bound)` in a conjunction of such
    comparisons (pad and cat masks), expr with one term; other conjuncts say nothing here."""
    stack = [mask]
    while stack:
        v = stack.pop()
        if isinstance(v, Op) and v.op == "logical_and":
            stack.extend(v.args)
        elif (isinstance(v, Op) and v.op in ("ge", "gt", "lt", "le") and len(v.args) == 2
              and isinstance(v.args[0], IndexValue) and isinstance(v.args[1], Constant)
              and len(v.args[0].index.terms) == 1 and isinstance(v.args[1].value, int)):
            yield v.args[0].index, v.op, v.args[1].value


# ---- writing an output over a dying input -------------------------------------------------
def _parameter_of(plan: KernelPlan, buffer: str) -> Optional[str]:
    names = [n for n, _ in plan.inputs] + [n for n, _ in plan.outputs]
    return next((p for p, b in zip(names, plan.arguments) if b == buffer), None)


def can_write_over(plan: KernelPlan, donor: str, output: str, others_in_storage: tuple[str, ...] = ()) -> bool:
    """Whether `output` may be stored into `donor`'s memory by this very kernel.

    Safe when every element of the donor is read only by the iteration that then writes that same
    element of the output, before it writes it: each load of the donor sits at exactly the output's
    store index, in the pass over memory that stores it (`phases`), in a step no later than the store
    (or repeats a load made there). No other buffer of the donor's storage may be read at all (a view
    would see the new values)."""
    donor_param, out_param = _parameter_of(plan, donor), _parameter_of(plan, output)
    if donor_param is None or out_param is None or plan.scatters:  # a scatter's positions: reads not walked here
        return False
    other_params = {_parameter_of(plan, b) for b in others_in_storage} - {None}
    store_at: Optional[tuple[int, int, Index]] = None  # (phase, position in plan.steps, index)
    position = {id(step): i for i, step in enumerate(plan.steps)}
    # A pointwise kernel is one pass: each iteration computes every step for its elements, in order.
    phases = plan.phases() if plan.is_reduction else [("loop", list(plan.steps))]
    for p, (_, steps) in enumerate(phases):
        for step in steps:
            if step.store_buffer == out_param:
                if store_at is not None:
                    return False  # stored twice (a row value and a full one): keep it simple, refuse
                store_at = (p, position[id(step)], step.store_index)
    if store_at is None:
        return False
    # A later step may read the same element again only as a load the printers' common-subexpression
    # cache serves from the value read before the store (one loop body, identical load).
    read_before = {v for step in phases[store_at[0]][1] if position[id(step)] <= store_at[1]
                   for v in walk(step.value) if isinstance(v, Load) and v.buffer == donor_param}
    for p, (_, steps) in enumerate(phases):
        for step in steps:
            for v in walk(step.value):
                if not isinstance(v, Load):
                    continue
                if v.buffer in other_params:
                    return False
                if v.buffer != donor_param:
                    continue
                if v.indirect or p != store_at[0] or v.index != store_at[2]:
                    return False
                if position[id(step)] > store_at[1] and v not in read_before:
                    return False
    return True


def write_over(plan: KernelPlan, donor: str, output: str) -> KernelPlan:
    """The plan with the donor's loads read through the output's pointer (one pointer, both ways: no
    two `__restrict__` parameters may alias), and the donor no longer a parameter."""
    donor_param, out_param = _parameter_of(plan, donor), _parameter_of(plan, output)

    def through_output(v: Value) -> Value:
        return dataclasses.replace(v, buffer=out_param) if isinstance(v, Load) and v.buffer == donor_param else v

    steps = tuple(dataclasses.replace(s, value=rebuild(s.value, through_output)) for s in plan.steps)
    keep = [i for i, (p, _) in enumerate(plan.inputs) if p != donor_param]
    n_in = len(plan.inputs)
    arguments = tuple(plan.arguments[i] for i in keep) + plan.arguments[n_in:]
    return dataclasses.replace(plan, steps=steps, inputs=tuple(plan.inputs[i] for i in keep), arguments=arguments)
