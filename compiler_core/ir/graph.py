"""Loop-level IR artifacts: Layout, Buffer, MemoryDep, LoopNode, LoopGraph.

A LoopNode computes one buffer.  Its loop variables are `x0, x1, ...` over `ranges` and, for a
reduction, `r0, r1, ...` over `reduction_ranges`.  `body` is the value at one point (for a
reduction: the value fed to the combine), `store_index` the flat offset written at one `x` point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from math import prod
from typing import Optional

import torch

from compiler_core.ir.index import Index
from compiler_core.ir.symbolic import as_size, decide, hint, is_symbolic, known
from compiler_core.ir.values import IndirectIndex, Value, format_position, format_value, format_values, loads


@dataclass(frozen=True)
class Layout:
    size: tuple[int, ...]  # an entry may be a sympy expression of symbolic sizes (ir/symbolic.py)
    stride: tuple[int, ...]
    offset: int = 0  # in elements, from the buffer's data pointer

    def __post_init__(self) -> None:
        # torch's SymInts become sympy expressions (hashable, printable); plain sizes stay ints.
        object.__setattr__(self, "size", tuple(as_size(s) for s in self.size))
        object.__setattr__(self, "stride", tuple(as_size(s) for s in self.stride))
        object.__setattr__(self, "offset", as_size(self.offset))

    @staticmethod
    def contiguous(size: tuple[int, ...]) -> "Layout":
        size = tuple(as_size(s) for s in size)
        stride, running = [], 1
        for s in reversed(size):
            stride.append(running)
            running *= s if decide(s >= 1) else 1  # max(s, 1), a symbolic size's answer kept as a guard
        return Layout(tuple(size), tuple(reversed(stride)), 0)

    # Remembered per layout (it is frozen): the scheduler asks for buffers' bytes tens of thousands of
    # times a graph, and over symbolic sizes each answer was sympy arithmetic (T5's training step:
    # 38,000 calls, ~3 s of its compile under the profiler).
    @cached_property
    def numel(self) -> int:
        return prod(self.size)

    @property
    def symbolic(self) -> bool:
        return any(is_symbolic(v) for v in (*self.size, *self.stride, self.offset))

    @cached_property
    def storage_numel(self) -> int:
        """Elements of storage needed to hold every addressed element."""
        if self.numel == 0:
            return 0
        return self.offset + 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))

    def is_dense(self) -> bool:
        """Non-overlapping and dense: a permutation of a contiguous layout."""
        # Sorted by the example sizes' strides: the structural check below holds for every size or fails.
        dims = sorted(((st, s) for s, st in zip(self.size, self.stride) if s != 1),
                      key=lambda d: (hint(d[0]), hint(d[1])))
        expected = 1
        for st, s in dims:
            if st != expected:
                return False
            expected *= s
        return True

    def __str__(self) -> str:
        off = f", offset={self.offset}" if self.offset != 0 else ""
        return f"size={list(self.size)}, stride={list(self.stride)}{off}"


BUFFER_KINDS = ("input", "constant", "kernel", "extern")


@dataclass(frozen=True)
class Buffer:
    """A tensor the program names.  `kind` says where its storage comes from: a graph input, a
    constant of the graph module, a kernel's output (allocated by the host program) or an extern
    call's output (allocated by PyTorch; it may alias an input, see LoopNode.may_alias)."""

    name: str
    dtype: torch.dtype
    layout: Layout  # the layout the buffer is allocated with
    device: str = "cpu"
    kind: str = "kernel"

    @property
    def nbytes(self) -> int:
        # dtype.itemsize, not an empty tensor's element_size(): under the compile's fake mode each such
        # tensor went through FakeTensor dispatch, a quarter of gpt_block's scheduling time.
        return self.layout.storage_numel * self.dtype.itemsize


@dataclass(frozen=True)
class MemoryDep:
    buffer: str
    index: Index

    def __str__(self) -> str:
        return f"{self.buffer}[{self.index}]"


@dataclass(frozen=True)
class ExternCall:
    """An op that runs in PyTorch: `target(*args)` where tensor args name buffers/views."""

    target: str  # printable name, e.g. "aten.mm.default"
    op: object  # the torch OpOverload (kept for the runtime; not part of equality)
    args: tuple  # nested structure of ViewRef and Python constants
    kwargs: tuple  # sorted (key, value) pairs
    reason: str  # why it is an extern call

    def __hash__(self) -> int:
        return hash((self.target, self.reason))

    @property
    def host_function(self) -> Optional[str]:
        """The name under which the host program calls this op's Python implementation directly, for
        custom ops of ours that carry one (`op.fcompile_host_function`: decomp/complex_calls.py), or
        None: the dispatcher's round trip to a Python custom op costs tens of µs per call."""
        if getattr(self.op, "fcompile_host_function", None) is None:
            return None
        return "host_" + self.target.replace(".", "_")


@dataclass(frozen=True)
class ViewRef:
    """A tensor argument of an extern call or a graph output: a layout over a buffer."""

    buffer: str
    layout: Layout
    dtype: torch.dtype


@dataclass(frozen=True)
class LoopNode:
    name: str
    kind: str  # "pointwise" | "reduction" | "extern" | "scatter"
    output: Buffer
    origins: tuple[str, ...]
    ranges: tuple[int, ...] = ()
    reduction_ranges: tuple[int, ...] = ()
    reduction_type: Optional[str] = None
    body: Optional[Value] = None
    store_index: Optional[Index] = None
    extern: Optional[ExternCall] = None
    extern_inputs: tuple[str, ...] = ()
    # For a reduction: the input's full shape and which of its dims are reduced, so the scheduler
    # can place pointwise nodes of that shape into the same kernel.
    full_shape: tuple[int, ...] = ()
    reduced_dims: tuple[int, ...] = ()
    extra_outputs: tuple[Buffer, ...] = ()  # extern calls returning several tensors
    # Extern calls returning a list or tuple: for each flattened element, the buffer holding it, or
    # None where the op returned no tensor (convolution_backward with an output_mask entry off).
    # Empty when the op returns one tensor.
    result_slots: tuple[Optional[str], ...] = ()
    # Extern calls: input buffers whose storage the outputs may share (from the op's schema;
    # every tensor input when the schema does not say).  The memory planner keeps them together.
    may_alias: tuple[str, ...] = ()
    source_fn: str = ""  # the user-level function it came from ("layer_norm", "gelu", "add"...)
    # A scatter (kind "scatter"): for each x point of `ranges`, `body` is added (`accumulate` "add", an
    # atomic add) or stored ("overwrite", a plain store) into output[store_index + sum(position * stride)],
    # the positions read from index tensors and range-checked like an indirect load's. The output is
    # `destination`'s storage (a copy of the scatter's `self` made by the node before it), updated in
    # place: `may_alias` names it, so the memory planner keeps the two in one storage, and the scatter
    # reads it, so the scheduler orders it after the copy.
    scatter_positions: tuple[IndirectIndex, ...] = ()
    destination: str = ""
    accumulate: str = ""

    def __post_init__(self) -> None:
        for name in ("ranges", "reduction_ranges", "full_shape"):
            object.__setattr__(self, name, tuple(as_size(s) for s in getattr(self, name)))

    # Derived from the frozen fields and asked for in the scheduler's loops: computed once per node.
    @cached_property
    def reads(self) -> tuple[MemoryDep, ...]:
        if self.kind == "extern":
            return tuple(MemoryDep(b, Index.of(0)) for b in self.extern_inputs)
        values = (self.body, *(t.value for t in self.scatter_positions))
        deps = [MemoryDep(ld.buffer, ld.index) for v in values for ld in loads(v)]
        if self.destination:  # read-modify-write of every element the positions reach
            deps.append(MemoryDep(self.destination, Index.of(0)))
        return tuple(dict.fromkeys(deps))

    @property
    def writes(self) -> tuple[MemoryDep, ...]:
        if self.kind == "extern":
            return tuple(MemoryDep(b.name, Index.of(0)) for b in (self.output, *self.extra_outputs))
        return (MemoryDep(self.output.name, self.store_index),)

    @cached_property
    def input_buffers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.buffer for d in self.reads))


    def pretty(self) -> str:
        head = f"{self.name}: {self.output.dtype} [{self.output.layout}]  # from {', '.join(self.origins)}"
        if self.kind == "extern":
            alias = f"; may alias {', '.join(self.may_alias)}" if self.may_alias else ""
            return f"{head}\n    extern {self.extern.target}  ({self.extern.reason}{alias})"
        loop = f"for x in {list(self.ranges)}"
        if self.kind == "scatter":
            target = f"{self.name}[{self.store_index}{format_position(self.scatter_positions)}]"
            return (f"{head}\n    {self.name} = {self.destination}  (same storage, updated in place)\n    {loop}"
                    f"\n    {target} {'+=' if self.accumulate == 'add' else '='} {format_value(self.body)}"
                    f"  ({'atomic' if self.accumulate == 'add' else 'overwrite'})")
        if self.kind == "reduction":
            loop += f", r in {list(self.reduction_ranges)}: {self.reduction_type}"
        bindings, (body,) = format_values([self.body])  # a long subtree read twice: named, printed once
        lets = "".join(f"\n    {name} = {text}" for name, text in bindings)
        return f"{head}\n    {loop}{lets}\n    {self.name}[{self.store_index}] = {body}"


@dataclass(frozen=True)
class LoopGraph:
    inputs: tuple[Buffer, ...]  # graph inputs in placeholder order
    nodes: tuple[LoopNode, ...]  # topological order
    outputs: tuple[object, ...]  # ViewRef per graph output, or a Python constant
    constants: dict = field(default_factory=dict, compare=False)  # get_attr tensors by buffer name
    device: str = "cpu"
    # FX node name -> its value: a ViewRef, a tuple of them, or a Python scalar.  Kept so the
    # runtime's kernel check (runtime/check.py) can find each FX node's tensor in the host program.
    values: dict = field(default_factory=dict, compare=False)
    # Graph inputs nobody else holds (a backward's saved activations and its incoming gradients): once
    # the host program drops them after their last use, their memory is free. Every other input (a
    # parameter, the user's tensor) is held by the caller whatever we do. The memory order reads this.
    released_inputs: frozenset = field(default_factory=frozenset, compare=False)
    # A graph with symbolic sizes (ir/symbolic.py): its arguments in order (tensor inputs and size
    # inputs; empty when they are just `inputs`), and where each size symbol is read at every call:
    # (symbol, argument, "value" | "size" | "stride", dim).
    arg_names: tuple[str, ...] = ()
    size_bindings: tuple[tuple[str, str, str, int], ...] = ()
    # Each symbol's value in the example call: the figures the explorer shows (bytes, traffic) use them.
    size_hints: dict = field(default_factory=dict, compare=False)

    def node(self, name: str) -> LoopNode:
        return self._node_by_name[name]

    @cached_property
    def _node_by_name(self) -> dict[str, LoopNode]:
        # A lookup per name, not a scan: the scheduler and codegen ask for nodes by name in loops.
        return {n.name: n for n in self.nodes}

    @cached_property
    def element_spans(self) -> dict[str, tuple[int, int]]:
        """Buffer -> the lowest and highest element offsets its layout addresses (buffers with no
        element, or a symbolic span of unknown sign, are left out). Asked for by every candidate kernel
        plan: computed once per graph."""
        out = {}
        for b in (*self.inputs, *(o for n in self.nodes for o in (n.output, *n.extra_outputs))):
            lay = b.layout
            if any(size == 0 for size in lay.size):
                continue
            reach = [(size - 1) * stride for size, stride in zip(lay.size, lay.stride)]
            below = [known(r < 0) for r in reach]
            if any(not neg and not known(r >= 0) for r, neg in zip(reach, below)):
                continue  # a stride whose sign the ShapeEnv cannot tell: no span, so no load of it is
                # taken as in bounds (the kernel keeps its masks)
            out[b.name] = (lay.offset + sum(r for r, neg in zip(reach, below) if neg),
                           lay.offset + sum(r for r, neg in zip(reach, below) if not neg))
        return out

    def producers(self) -> dict[str, LoopNode]:
        out = {}
        for n in self.nodes:
            out[n.output.name] = n
            for b in n.extra_outputs:
                out[b.name] = n
        return out


    def storage_of(self) -> dict[str, str]:
        """Buffer name -> the storage it lives in, named by the earliest buffer of that storage.

        Views never make buffers (they are layouts over their base's buffer), so only extern calls
        that may alias their inputs put two buffers into one storage."""
        order = [b.name for b in self.inputs] + [b.name for n in self.nodes for b in (n.output, *n.extra_outputs)]
        rank = {name: i for i, name in enumerate(order)}
        parent = {name: name for name in order}

        def find(name: str) -> str:
            while parent[name] != name:
                parent[name] = parent[parent[name]]
                name = parent[name]
            return name

        for n in self.nodes:
            for out in (n.output, *n.extra_outputs):
                for other in n.may_alias:
                    a, b = find(out.name), find(other)
                    if a != b:
                        first, second = sorted((a, b), key=rank.get)
                        parent[second] = first
        return {name: find(name) for name in order}

    def output_buffers(self) -> set[str]:
        return {o.buffer for o in self.outputs if isinstance(o, ViewRef)}

    def to_dot(self, kernel_of: dict[str, str] | None = None) -> str:
        """DOT text: input buffers and loop nodes, an edge per buffer read; `kernel_of` (node -> kernel
        name, e.g. from a Schedule) draws each kernel as a cluster."""
        def quote(text: str) -> str:
            return '"' + text.replace('"', r'\"') + '"'

        lines = ["digraph loops {", "  rankdir=TB; node [fontname=Helvetica, fontsize=10];"]
        newline = "\\n"  # DOT's line break inside a label
        for b in self.inputs:
            label = quote(b.name + newline + str(list(b.layout.size)))
            lines.append(f"  {quote(b.name)} [shape=ellipse, label={label}];")
        clusters: dict[str, list[LoopNode]] = {}
        for n in self.nodes:
            clusters.setdefault((kernel_of or {}).get(n.name, ""), []).append(n)
        for kernel, members in clusters.items():
            indent = "  "
            if kernel:
                lines.append(f"  subgraph {quote('cluster_' + kernel)} {{ label={quote(kernel)}; style=dashed;")
                indent = "    "
            for n in members:
                what = (n.extern.target if n.kind == "extern" else f"scatter ({n.accumulate})" if n.kind == "scatter"
                        else (n.reduction_type or "pointwise"))
                label = newline.join((n.name, what, str(list(n.output.layout.size))))
                lines.append(f"{indent}{quote(n.output.name)} [shape=box, style=rounded, label={quote(label)}];")
            if kernel:
                lines.append("  }")
        drawn = {b: node.output.name for b, node in self.producers().items()}  # extra outputs: their node
        for n in self.nodes:
            for b in n.input_buffers:
                lines.append(f"  {quote(drawn.get(b, b))} -> {quote(n.output.name)};")
        lines.append("}")
        return "\n".join(lines)

    def pretty(self) -> str:
        lines = ["# inputs"]
        lines += [f"{b.name}: {b.dtype} [{b.layout}]" for b in self.inputs]
        lines.append("# loop nodes")
        lines += [n.pretty() for n in self.nodes]
        outs = [f"{o.buffer}[{o.layout}]" if isinstance(o, ViewRef) else repr(o) for o in self.outputs]
        lines.append(f"# outputs: {', '.join(outs)}")
        return "\n".join(lines)
