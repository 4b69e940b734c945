"""Code generation driver: one kernel per fusion group, plus the host program that runs them.

The host program is built as statements (allocate, reuse, launch, extern call, free, return) and
printed as Python defining `call(args)`.  The printed text is exactly what runs: the runtime execs
it with these names in scope and no others it relies on:

    rt      runtime helpers (compiler_core.runtime.host): view, ensure_layout, poison...
    alloc   alloc(size, stride, dtype): a new tensor on the graph's device (host.allocator says why)
    k       the loaded kernels, by kernel name
    consts  the graph's constant tensors, by buffer name
    torch, DEVICE, NTHREADS
    checker the kernel checker (runtime/check.py), only when the check mode is on

Every local is a buffer name with the prefix `v_`, so no FX name (a saved tensor called `view`, an
input called `rt` or `torch`) can shadow a helper, a kernel or another local.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Union

import sympy
import torch

from compiler_core.codegen.artifacts import KernelSource, WrapperProgram
from compiler_core.codegen.cpp.kernel import generate_cpp_kernel
from compiler_core.codegen.triton.kernel import generate_triton_kernel, launch_sites
from compiler_core.ir.graph import Buffer, LoopGraph, ViewRef
from compiler_core.ir.symbolic import NotSymbolic, python_expr, python_number
from compiler_core.schedule.artifacts import FusionGroup, MemoryPlan, Schedule
from compiler_core.schedule.kernel_plan import (
    KernelPlan,
    Space,
    build_kernel_plan,
    group_plan,
    segmented_plan,
    write_over,
)
from compiler_core.schedule.memory import OUT_VARIANTS
from compiler_core.schedule.plan_passes import (
    PassRecord,
    choose_index_width,
    choose_loop_order,
    choose_reduction_layout,
    choose_reduction_split,
    common_subexpressions,
    merge_reductions,
    online_softmax,
    prove_positions,
    run_plan_passes,
    scatter_order,
    simplify_plan,
    welford,
)


def is_dead(group: FusionGroup) -> bool:
    """A kernel that writes nothing (its values are read by no one: an `empty_like` whose result is
    never used, a clone overwritten by `zero_`) computes nothing anyone sees: it gets no kernel."""
    return group.kind != "extern" and not group.materialized


def kernel_plans(graph: LoopGraph, sched: Schedule, memory: Optional[MemoryPlan] = None,
                 backend: str = "cpp") -> list[KernelPlan]:
    """Each group's KernelPlan, after the plan passes (`kernel_plans_with_passes`)."""
    return [plan for plan, _ in kernel_plans_with_passes(graph, sched, memory, backend)]


def kernel_plans_with_passes(graph: LoopGraph, sched: Schedule, memory: Optional[MemoryPlan] = None,
                             backend: str = "cpp") -> list[tuple[KernelPlan, tuple[PassRecord, ...]]]:
    """Each group's KernelPlan after the plan passes, with the record of each pass: simplification
    and the index width on both backends; with `memory`, outputs the plan writes over a dying input
    read through one pointer; the reduction layout (rows or columns) on both; on Triton only, the
    split of reductions with few, long rows or columns (the C++ backend runs a row on one thread anyway)
    and the one-pass rewrites of rows too long for registers (online softmax, Welford)."""
    over: dict[str, list[tuple[str, str]]] = {}
    if memory is not None:
        group_of = {n: g.name for g in sched.groups for n in g.materialized}
        for out, donor in memory.written_over:
            over.setdefault(group_of[out], []).append((out, donor))
    plans = []
    for group in sched.groups:
        if group.kind == "extern" or is_dead(group):
            continue
        if group.segments:
            written = set(group.materialized)
            parts = [choose_index_width(build_kernel_plan(graph, f"{group.name}_segment{i}", list(nodes),
                                                          {graph.node(n).output.name for n in nodes} & written,
                                                          Space(x)))
                     for i, (nodes, x) in enumerate(group.segments)]
            plans.append(run_plan_passes(segmented_plan(group.name, parts), [("simplify", simplify_plan),
                                                                                  ("bounds", prove_positions)]))
            continue
        passes = [("merge reductions", merge_reductions), ("simplify", simplify_plan), ("bounds", prove_positions),
                  ("common subexpressions", common_subexpressions),
                  ("loop order", choose_loop_order), ("index width", choose_index_width)]
        if group.name in over:
            passes.append(("write over dying inputs", lambda plan, pairs=over[group.name]: _written_over(plan, pairs)))
        passes.append(("reduction layout", choose_reduction_layout))
        if group.kind == "scatter":
            passes.append(("scatter order", scatter_order))
        if backend == "triton":
            passes += [("reduction split", choose_reduction_split), ("online softmax", online_softmax),
                       ("welford", welford)]
        plans.append(run_plan_passes(group_plan(graph, group), passes))
    return plans


def _written_over(plan: KernelPlan, pairs: list[tuple[str, str]]) -> KernelPlan:
    """The memory plan's decisions (MemoryPlan.written_over) applied to the plan, each with a note."""
    for out, donor in pairs:
        plan = write_over(plan, donor, out)
        plan = dataclasses.replace(plan, notes=plan.notes + (
            f"written over: {out} is stored into {donor}'s memory, which this kernel reads last",))
    return plan


def generate_program(graph: LoopGraph, sched: Schedule, memory: MemoryPlan, backend: str,
                     check_memory: bool = False, check_kernels: bool = False
                     ) -> tuple[tuple[KernelSource, ...], WrapperProgram]:
    planned = {p.name: (p, records) for p, records in kernel_plans_with_passes(graph, sched, memory, backend)}
    plans = {name: p for name, (p, _) in planned.items()}
    interpret = graph.device != "cuda"

    def generate(plan: KernelPlan) -> KernelSource:
        # Parameters of a kernel that overwrites an input it reads: they point at the same storage.
        both = {b for pair in memory.inplace if set(pair) <= set(plan.arguments) for b in pair}
        aliased = frozenset(p for p, b in zip([n for n, _ in plan.inputs + plan.outputs], plan.arguments)
                            if b in both)
        kernel = (generate_cpp_kernel(plan, aliased=aliased) if backend == "cpp"
                  else generate_triton_kernel(plan, interpret=interpret, aliased=aliased))
        comment = "//" if backend == "cpp" else "#"
        code = [ln.split(comment)[0] for ln in kernel.source.splitlines()]
        powers = [ln.strip() for ln in code if "**" in ln]
        if kernel.size_args and powers:  # a power of sizes printed by sympy's str(): not C++, nor Triton's
            raise NotSymbolic(f"{kernel.name} prints a power of symbolic sizes: {powers[0]}")
        return kernel

    kernels = tuple(dataclasses.replace(generate(plans[g.name]), plan=plans[g.name], passes=planned[g.name][1])
                    for g in sched.groups if g.name in plans)
    return kernels, host_program(graph, sched, memory, backend, kernels, check_memory=check_memory,
                                 check_kernels=check_kernels)


# ---- statements ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Unpack:
    """Bind the graph inputs (from `args`) and constants (from `consts`) to locals."""

    inputs: tuple[str, ...]
    constants: tuple[str, ...]
    # Empty the boxed argument list once bound, so that an input dropped after its last use is freed
    # (AOTAutograd hands the list over; a backward's saved activations are held by nothing else).
    clear_args: bool = False
    # Symbolic sizes read from the inputs at every call: (symbol, input, "value" | "size" | "stride", dim).
    sizes: tuple[tuple[str, str, str, int], ...] = ()


@dataclass(frozen=True)
class Allocate:
    buffer: Buffer


@dataclass(frozen=True)
class Reuse:
    buffer: Buffer
    donor: str  # a dead buffer whose storage is handed on


@dataclass(frozen=True)
class WriteOver:
    """The kernel about to run writes `buffer` over `donor`, an input of it that dies in it (in place)."""

    buffer: Buffer
    donor: str


@dataclass(frozen=True)
class WriteInPlace:
    """`buffer` is written into graph input `target` (MemoryPlan.inplace): the kernel overwrites it."""

    buffer: Buffer
    target: str


@dataclass(frozen=True)
class AddInto:
    """`buffer` is a scatter's result: the kernel about to run adds into `destination` (the scatter's own
    copy of its input, LoopNode.destination) in place, so `buffer` is that tensor under its own name."""

    buffer: Buffer
    destination: str


@dataclass(frozen=True)
class Launch:
    kernel: KernelSource
    config: dict


@dataclass(frozen=True)
class CallExtern:
    target: str  # e.g. "aten.mm.default"
    args: tuple
    kwargs: tuple
    slots: tuple[Optional[Buffer], ...]  # the buffer per flattened result (None: not a tensor)
    sequence: bool = False  # the op returns a list or tuple (even of one tensor)
    out_target: str = ""  # its out= overload, writing into slots[0] (already bound by a Reuse)
    host_function: str = ""  # a Python function the host program calls instead (ExternCall.host_function)


@dataclass(frozen=True)
class CheckFresh:
    """Memory checking mode: `buffer` was just made; only `same_storage` may share its storage."""

    buffer: str
    same_storage: tuple[str, ...]


@dataclass(frozen=True)
class CheckKernel:
    """Check mode: compare the kernel just launched with its FX nodes run in eager PyTorch."""

    kernel: str


@dataclass(frozen=True)
class Free:
    buffers: tuple[str, ...]
    poison: tuple[str, ...] = ()  # memory checking mode: storages filled before they are dropped


@dataclass(frozen=True)
class Return:
    outputs: tuple  # ViewRef, or a Python constant


Statement = Union[Comment, Unpack, Allocate, Reuse, WriteOver, WriteInPlace, AddInto, Launch, CallExtern,
                  CheckFresh, CheckKernel, Free, Return]


def host_program(graph: LoopGraph, sched: Schedule, memory: MemoryPlan, backend: str,
                 kernel_list: tuple[KernelSource, ...], configs: dict[str, dict] | None = None,
                 check_memory: bool = False, check_kernels: bool = False) -> WrapperProgram:
    """The host program; `configs` (kernel -> launch config) overrides each kernel's first candidate."""
    statements = host_statements(graph, sched, memory, kernel_list, configs or {}, check_memory, check_kernels)
    return WrapperProgram(source=_Printer(graph, backend, check_memory).program(statements), backend=backend,
                          statements=tuple(statements))


def host_statements(graph: LoopGraph, sched: Schedule, memory: MemoryPlan, kernel_list: tuple[KernelSource, ...],
                    configs: dict[str, dict], check_memory: bool, check_kernels: bool = False) -> list[Statement]:
    kernels = {k.name: k for k in kernel_list}
    buffers = {b.name: b for n in graph.nodes for b in (n.output, *n.extra_outputs)}
    storage_of = graph.storage_of()
    members: dict[str, list[str]] = {}
    for name, storage in storage_of.items():
        members.setdefault(storage, []).append(name)

    def same_storage(name: str) -> tuple[str, ...]:
        return tuple(m for m in members[storage_of[name]] if m != name)

    inputs = tuple(b.name for b in graph.inputs if b.kind == "input")
    # A symbolic graph's arguments include its size inputs (ints) where Dynamo placed them.
    constants = tuple(b.name for b in graph.inputs if b.kind == "constant")
    out: list[Statement] = [Unpack(graph.arg_names or inputs, constants, clear_args=not check_kernels,
                                   sizes=graph.size_bindings)]
    reuse = dict(memory.reuse)
    in_place = dict(memory.inplace)
    donors = set(reuse.values())  # kept until their storage is handed on
    over = dict(memory.written_over)
    over_donors = set(over.values())  # their storage lives on in the output written over them
    frees = dict(memory.frees)
    scattered_into = {n.output.name: n.destination for n in graph.nodes if n.kind == "scatter"}
    for step, group in enumerate(sched.groups):
        if is_dead(group):
            out.append(Comment(f"{group.name}: {', '.join(group.origins)}: nothing reads its result, no kernel"))
        elif group.kind == "extern":
            out.append(Comment(f"{group.name}: {', '.join(group.origins)}"))
            node = graph.node(group.nodes[0])
            if node.result_slots:
                slots = tuple(None if s is None else buffers[s] for s in node.result_slots)
            else:
                slots = (node.output,)
            out_target = ""
            if node.output.name in reuse:  # a storage handed on: the op's out= overload writes into it
                out.append(Reuse(node.output, reuse[node.output.name]))
                out_target = OUT_VARIANTS[node.extern.target]
            elif node.output.name in over:  # an addmm accumulating into its dying addend (in place)
                out.append(WriteOver(node.output, over[node.output.name]))
                out_target = OUT_VARIANTS[node.extern.target]
            out.append(CallExtern(node.extern.target, node.extern.args, node.extern.kwargs, slots,
                                  sequence=bool(node.result_slots), out_target=out_target,
                                  host_function=node.extern.host_function or ""))
            if check_memory:
                # Written over a storage: every buffer of it may share it (a scatter's result lives in its
                # destination's storage, and an addmm may accumulate into that result).
                out += [CheckFresh(b.name, same_storage(b.name) + (tuple(members[storage_of[over[b.name]]])
                                                                   if b.name in over else ()))
                        for b in slots if b is not None]
        else:
            out.append(Comment(f"{group.name}: {', '.join(group.origins)}"))
            for name in group.materialized:
                if name in in_place:  # shares the input's storage on purpose: no freshness check
                    out.append(WriteInPlace(buffers[name], in_place[name]))
                    continue
                if name in scattered_into:
                    out.append(AddInto(buffers[name], scattered_into[name]))
                    if check_memory:
                        out.append(CheckFresh(name, (scattered_into[name],)))
                    continue
                if name in over:
                    out.append(WriteOver(buffers[name], over[name]))
                else:
                    out.append(Reuse(buffers[name], reuse[name]) if name in reuse else Allocate(buffers[name]))
                if check_memory:
                    out.append(CheckFresh(name, (over[name],) if name in over else ()))
            kernel = kernels[group.name]
            out.append(Launch(kernel, configs.get(kernel.name, kernel.config_space[0] if kernel.config_space else {})))
            if check_kernels:  # before any Free: the check reads the kernel's inputs
                out.append(CheckKernel(kernel.name))
        dying = frees.get(step, ())
        if dying:
            # Never poison an input (the caller may hold it) nor a storage an output was written over.
            kept = {storage_of[n] for n in inputs} | {storage_of[d] for d in over_donors}
            poisoned = (tuple(dict.fromkeys(storage_of[n] for n in dying if storage_of[n] not in kept))
                        if check_memory else ())
            out.append(Free(tuple(n for n in dying if n not in donors), poisoned))
    out.append(Return(graph.outputs))
    return out


# ---- printing -----------------------------------------------------------------------------
# Extern ops printed as torch's own Python function (`torch.mm(a, b, out=c)`) rather than the overload
# (`torch.ops.aten.mm.out(...)`): the same ATen op through torch's generated argument parser, about 1 µs a
# call less than an OpOverload on the CPU machine, and the call a user would write. Only ops whose
# function resolves to exactly the overload we hold for the arguments we print (positional as in
# the schema, keywords by schema name; `out=` picks the out overload): tests/test_trust.py records
# the dispatched overload of each one that runs on the CPU.
PUBLIC_FUNCTIONS = frozenset({
    "aten.mm.default", "aten.mm.out", "aten.bmm.default", "aten.bmm.out", "aten.addmm.default", "aten.addmm.out",
    "aten.baddbmm.default", "aten.baddbmm.out", "aten.convolution.default",
    "aten.embedding.default", "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_flash_attention.default", "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
})


def callable_of(target: str) -> str:
    """How the host program calls extern op `target` ("aten.mm.default"): torch's function where it is
    that overload, else the overload itself."""
    if target in PUBLIC_FUNCTIONS:
        name = target.split(".")[1]
        if getattr(torch, name, None) is getattr(torch._C._VariableFunctions, name, False):
            return f"torch.{name}"
    return f"torch.ops.{target}"


def sizes(values: tuple) -> str:
    """A tuple of sizes as Python source: `(8, 128)`, or with symbols `(s0, 128*s1)` (ir/symbolic.py)."""
    items = [python_expr(v) for v in values]
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def local(buffer: str) -> str:
    """The host program's local for a buffer: prefixed, so it cannot shadow rt, k, consts or torch."""
    return f"v_{buffer}"


class _Printer:
    def __init__(self, graph: LoopGraph, backend: str, check_memory: bool = False):
        self.backend = backend
        # Views of our buffers: `rt.reinterpret` makes them without as_strided's bounds check (half the
        # host time of a view; the memory plan keeps them in bounds), `rt.view` with it, in the memory
        # checking mode, where a view outside its storage then raises.
        self.view_fn = "rt.view" if check_memory else "rt.reinterpret"
        self.layouts = {b.name: b.layout for b in graph.inputs}
        self.inputs = frozenset(self.layouts)
        self.layouts.update({b.name: b.layout for n in graph.nodes for b in (n.output, *n.extra_outputs)})

    def program(self, statements: list[Statement]) -> str:
        lines = [f"# host program ({self.backend}): allocate, launch, free, return", "def call(args):"]
        for s in statements:
            lines += ["    " + ln for ln in self.statement(s)]
        return "\n".join(lines) + "\n"

    def statement(self, s: Statement) -> list[str]:
        if isinstance(s, Comment):
            return [f"# {s.text}"]
        if isinstance(s, Unpack):
            lines = [f"{', '.join(local(n) for n in s.inputs)}, = args"] if s.inputs else []
            lines += ["args.clear()"] if s.clear_args and s.inputs else []
            lines += [f"{symbol} = {local(arg)}" + ("" if kind == "value" else f".{kind}({dim})")
                      for symbol, arg, kind, dim in s.sizes]
            return lines + [f"{local(n)} = consts[{n!r}]" for n in s.constants]
        if isinstance(s, Allocate):
            b = s.buffer
            return [f"{local(b.name)} = alloc({sizes(b.layout.size)}, {sizes(b.layout.stride)}, {b.dtype})"]
        if isinstance(s, Reuse):
            b = s.buffer
            if self.layouts.get(s.donor) == b.layout and s.donor not in self.inputs:
                # The donor's tensor already has this layout: the same object serves (a view costs ~0.6 µs
                # of host time). Never an input's: a caller's tensor is not handed on as another value.
                return [f"{local(b.name)} = {local(s.donor)}  # reuses the storage of {s.donor}, as laid out",
                        f"del {local(s.donor)}"]
            return [f"{local(b.name)} = {self.view_fn}({local(s.donor)}, {sizes(b.layout.size)}, "
                    f"{sizes(b.layout.stride)}, 0)  "
                    f"# reuses the storage of {s.donor}", f"del {local(s.donor)}"]
        if isinstance(s, WriteOver):
            b = s.buffer
            return [f"{local(b.name)} = {self.view_fn}({local(s.donor)}, {sizes(b.layout.size)}, "
                    f"{sizes(b.layout.stride)}, 0)  "
                    f"# written over {s.donor} by the next kernel or call (in place)"]
        if isinstance(s, WriteInPlace):
            return [f"{local(s.buffer.name)} = {local(s.target)}  # written in place: the caller copies it into "
                    f"{s.target} afterwards, a copy onto itself"]
        if isinstance(s, AddInto):
            return [f"{local(s.buffer.name)} = {local(s.destination)}  # the next kernel adds into {s.destination} "
                    "in place (a scatter)"]
        if isinstance(s, Launch):
            return self.launch(s.kernel, s.config)
        if isinstance(s, CallExtern):
            return self.extern(s)
        if isinstance(s, CheckFresh):
            same = "".join(f"{local(n)!r}, " for n in s.same_storage)
            return [f"rt.check_fresh({local(s.buffer)!r}, {local(s.buffer)}, locals(), ({same}))"]
        if isinstance(s, CheckKernel):
            return [f"rt.check_kernel(checker, {s.kernel!r}, locals())"]
        if isinstance(s, Free):
            lines = [f"rt.poison({local(n)})" for n in s.poison]
            return lines + ([f"del {', '.join(local(n) for n in s.buffers)}"] if s.buffers else [])
        if isinstance(s, Return):
            outs = [self.value(o) if isinstance(o, ViewRef) else python_number(o) for o in s.outputs]
            return [f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})"]
        raise TypeError(f"unknown host statement {s!r}")

    def launch(self, kernel: KernelSource, config: dict) -> list[str]:
        if self.backend == "cpp":
            ptrs = "".join(f"{local(a)}.data_ptr(), " for a in kernel.signature)
            sizes = "".join(f"{s}, " for s in kernel.size_args)
            return [f"k.{kernel.name}({ptrs}{sizes}NTHREADS)"]
        args = ", ".join([local(a) for a in kernel.signature] + list(kernel.size_args))
        # A split reduction: workspaces (locals `w_<kernel>_<i>`: kernel names are ours, and no buffer's
        # local starts with `w_`), its kernels in order, then the workspaces die.
        spaces = [f"w_{kernel.name}_{i}" for i in range(len(kernel.split.workspaces))] if kernel.split else []
        lines = [f"{w} = torch.empty(({n},), dtype={dt}, device=DEVICE)  # workspace of {kernel.name}"
                 for w, (n, dt) in zip(spaces, kernel.split.workspaces)] if kernel.split else []
        for site in launch_sites(kernel, config):
            meta = ", ".join(f"{key}={v}" for key, v in site.meta)
            more = f", {', '.join(spaces)}" if site.workspaces else ""
            lines.append(f"k.{site.function}[{site.grid}]({args}{more}, {meta})")
        if spaces:
            lines.append(f"del {', '.join(spaces)}")
        return lines

    def extern(self, s: CallExtern) -> list[str]:
        args = ", ".join(self.arg(a) for a in s.args)
        kwargs = "".join(f", {key}={self.arg(v)}" for key, v in s.kwargs)
        if s.out_target:
            return [f"{callable_of(s.out_target)}({args}{kwargs}, out={local(s.slots[0].name)})"]
        call = f"{s.host_function or callable_of(s.target)}({args}{kwargs})"
        if not s.sequence:
            lines = [f"{local(s.slots[0].name)} = {call}"]
        else:
            lines = [f"_results = rt.flatten({call})"]
            lines += [f"{local(b.name)} = _results[{i}]" for i, b in enumerate(s.slots) if b is not None]
            lines.append("del _results")
        for b in s.slots:
            if b is not None:
                lines.append(f"{local(b.name)} = rt.ensure_layout({local(b.name)}, {sizes(b.layout.size)}, "
                             f"{sizes(b.layout.stride)}, "
                             f"{b.dtype})")
        return lines

    def value(self, v: ViewRef) -> str:
        # The whole buffer as allocated needs no view (saves an as_strided per call).
        if self.layouts.get(v.buffer) == v.layout:
            return local(v.buffer)
        return (f"{self.view_fn}({local(v.buffer)}, {sizes(v.layout.size)}, {sizes(v.layout.stride)}, "
                f"{python_expr(v.layout.offset)})")

    def arg(self, a: Any) -> str:
        if isinstance(a, ViewRef):
            return self.value(a)
        if isinstance(a, (list, tuple)):
            inner = ", ".join(self.arg(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
        if isinstance(a, torch.dtype):
            return str(a)
        if isinstance(a, torch.device):
            return f"torch.device({str(a)!r})"
        if isinstance(a, (torch.memory_format, torch.layout)):
            return f"torch.{str(a).replace('torch.', '')}"
        if isinstance(a, float) and (a != a or a in (float("inf"), float("-inf"))):
            return f"float({str(a)!r})"
        if isinstance(a, sympy.Expr):  # a symbolic size passed to an extern op (a view's shape)
            return python_expr(a)
        if isinstance(a, torch._ops.OpOverload):  # an operand of a higher-order op (with_effects)
            return f"torch.ops.{a.namespace}.{a._opname}.{a._overloadname}"
        return repr(a)
