"""Code generation driver: one kernel per fusion group, plus the host program that runs them.

The host program is printable Python defining `call(args)`.  It is exactly what runs: the runtime
execs this text with the loaded kernels in scope.
"""

from __future__ import annotations

import torch

from compiler_core.codegen.artifacts import KernelSource, WrapperProgram
from compiler_core.codegen.cpp.kernel import generate_cpp_kernel
from compiler_core.codegen.triton.kernel import generate_triton_kernel, launch_grid
from compiler_core.ir.graph import LoopGraph, ViewRef
from compiler_core.schedule.artifacts import MemoryPlan, Schedule
from compiler_core.schedule.kernel_plan import KernelPlan, Space, build_kernel_plan


def kernel_plans(graph: LoopGraph, sched: Schedule) -> list[KernelPlan]:
    plans = []
    for group in sched.groups:
        if group.kind == "extern":
            continue
        reduction = next((graph.node(n) for n in group.nodes if graph.node(n).kind == "reduction"), None)
        space = Space.of(reduction) if reduction is not None else Space(group.x_ranges)
        plans.append(build_kernel_plan(graph, group.name, list(group.nodes), set(group.materialized), space))
    return plans


def generate_program(graph: LoopGraph, sched: Schedule, memory: MemoryPlan,
                     backend: str) -> tuple[tuple[KernelSource, ...], WrapperProgram]:
    plans = {p.name: p for p in kernel_plans(graph, sched)}
    if backend == "cpp":
        generate = generate_cpp_kernel
    else:
        interpret = graph.device != "cuda"
        def generate(plan: KernelPlan) -> KernelSource:
            return generate_triton_kernel(plan, interpret=interpret)
    kernels = tuple(generate(plans[g.name]) for g in sched.groups if g.kind != "extern")
    return kernels, host_program(graph, sched, memory, backend, kernels)


def host_program(graph: LoopGraph, sched: Schedule, memory: MemoryPlan, backend: str,
                 kernel_list: tuple[KernelSource, ...], configs: dict[str, dict] | None = None) -> WrapperProgram:
    """The host program; `configs` (kernel -> launch config) overrides each kernel's first candidate."""
    kernels = {k.name: k for k in kernel_list}
    configs = configs or {}
    buffers = {b.name: b for n in graph.nodes for b in (n.output, *n.extra_outputs)}
    layouts = {b.name: b.layout for b in (*graph.inputs, *buffers.values())}
    lines = [f"# host program ({backend}): allocate, launch, free, return",
             "def call(args):"]
    body: list[str] = []
    names = [b.name for b in graph.inputs if not b.name.startswith("const_")]
    if names:
        body.append(f"{', '.join(names)}, = args")
    for b in graph.inputs:
        if b.name.startswith("const_"):
            body.append(f"{b.name} = constants[{b.name!r}]")
    reuse = dict(memory.reuse)
    donors = set(reuse.values())  # their storage is handed on, so they are dropped at the hand-over
    frees = dict(memory.frees)
    for step, group in enumerate(sched.groups):
        body.append(f"# {group.name}: {', '.join(group.origins)}")
        if group.kind == "extern":
            node = graph.node(group.nodes[0])
            call = node.extern
            args = ", ".join(_arg_text(a, layouts) for a in call.args)
            kwargs = "".join(f", {k}={_arg_text(v, layouts)}" for k, v in call.kwargs)
            outs = [node.output, *node.extra_outputs]
            target = f"torch.ops.{call.target}"
            if len(outs) == 1:
                body.append(f"{node.output.name} = {target}({args}{kwargs})")
            else:
                body.append(f"{', '.join(b.name for b in outs)}, *_ = {target}({args}{kwargs})")
            for b in outs:
                body.append(f"{b.name} = ensure_layout({b.name}, {b.layout.size}, {b.layout.stride})")
            continue
        for name in group.materialized:
            buf = buffers[name]
            if name in reuse:
                body.append(f"{name} = {reuse[name]}.as_strided({buf.layout.size}, {buf.layout.stride})  "
                            f"# reuses {reuse[name]}")
                body.append(f"del {reuse[name]}")
            else:
                body.append(f"{name} = empty_strided({buf.layout.size}, {buf.layout.stride}, dtype={buf.dtype}, "
                            f"device=DEVICE)")
        kernel = kernels[group.name]
        body.append(_launch(kernel, configs.get(kernel.name, kernel.config_space[0] if kernel.config_space else {}),
                            backend))
        dead = [n for n in frees.get(step, ()) if n not in graph.output_buffers() and n not in donors]
        if dead:
            body.append(f"del {', '.join(dead)}")
    outs = []
    for o in graph.outputs:
        if isinstance(o, ViewRef):
            producer_layout = buffers[o.buffer].layout if o.buffer in buffers else None
            outs.append(o.buffer if o.layout == producer_layout else _view_text(o))
        else:
            outs.append(repr(o))
    body.append(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    return WrapperProgram(source="\n".join(lines + ["    " + ln for ln in body]) + "\n", backend=backend)


def _launch(kernel: KernelSource, config: dict, backend: str) -> str:
    if backend == "cpp":
        ptrs = ", ".join(f"{a}.data_ptr()" for a in kernel.signature)
        return f"{kernel.name}({ptrs}, NTHREADS)"
    meta = ", ".join(f"{k}={v}" for k, v in config.items())
    return f"{kernel.name}[{launch_grid(kernel.xnumel, config)}]({', '.join(kernel.signature)}, {meta})"


def _view_text(v: ViewRef) -> str:
    return f"view({v.buffer}, {tuple(v.layout.size)}, {tuple(v.layout.stride)}, {v.layout.offset})"


def _arg_text(a: object, layouts: dict[str, object]) -> str:
    if isinstance(a, ViewRef):
        # The whole buffer as allocated needs no view (saves an as_strided per call).
        return a.buffer if layouts.get(a.buffer) == a.layout else _view_text(a)
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_arg_text(x, layouts) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    if isinstance(a, torch.dtype):
        return str(a)
    if isinstance(a, torch.device):
        return f"torch.device({str(a)!r})"
    if isinstance(a, (torch.memory_format, torch.layout)):
        return f"torch.{str(a).replace('torch.', '')}"
    if isinstance(a, float) and (a != a or a in (float("inf"), float("-inf"))):
        return f"float({str(a)!r})"
    return repr(a)

