"""CompileSession: everything one compilation produced, stage by stage, for every captured graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from compiler_core.autodiff.artifacts import JointGraph, Partition
from compiler_core.capture.artifacts import CapturedGraph, GraphBreak, Recompile
from compiler_core.codegen.artifacts import KernelSource, WrapperProgram
from compiler_core.decomp.artifacts import ComplexPairs, LayoutDecision, PrimGraph
from compiler_core.ir.graph import LoopGraph
from compiler_core.runtime.artifacts import CompiledArtifact, KernelCheck
from compiler_core.schedule.artifacts import MemoryPlan, Schedule


@dataclass
class GraphRecord:
    """The artifacts of one captured graph, filled in as the pipeline runs (None if not reached)."""

    captured: CapturedGraph
    # The ATen graph AOTAutograd handed our compiler (the forward's, or the backward's own): what runs
    # in eager PyTorch if our compiler fails. None when AOT tracing itself failed.
    aten_graph: Optional[torch.fx.GraphModule] = field(default=None, repr=False)
    joint: Optional[JointGraph] = None  # training: the joint forward+backward graph (forward record)
    partition: Optional[Partition] = None  # training: what the forward saves for the backward, and why
    # Convolution graphs: the layout chosen for their activations, and why (decomp/conv_layout.py).
    layout: Optional[LayoutDecision] = None
    # Graphs with complex tensors: how they were rewritten into real ones (decomp/complex_pairs.py).
    complex_pairs: Optional[ComplexPairs] = None
    prims: Optional[PrimGraph] = None
    loops: Optional[LoopGraph] = None
    schedule: Optional[Schedule] = None
    memory: Optional[MemoryPlan] = None
    kernels: tuple[KernelSource, ...] = ()
    wrapper: Optional[WrapperProgram] = None
    artifact: Optional[CompiledArtifact] = None
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    fallback_reason: Optional[str] = None  # set when the whole graph runs in eager PyTorch
    error_traceback: Optional[str] = None  # the compiler's traceback behind a fallback, for bug reports
    backward: Optional["GraphRecord"] = None  # the compiled backward graph, when training
    part: str = "forward"  # "backward" for the record of a backward graph
    # A graph captured with symbolic sizes is compiled per concrete size (per_size.py): which, e.g. "s0=8";
    # or, `symbolic`, once with kernels that take the sizes as arguments (ir/symbolic.py): then `sizes`
    # are the example call's, and `size_guards` the conditions on sizes our compiler added to Dynamo's
    # guards (a call that breaks one is compiled again).
    sizes: str = ""
    symbolic: bool = False
    size_guards: tuple[str, ...] = ()

    @property
    def checks(self) -> tuple[KernelCheck, ...]:
        """Check mode: the latest KernelCheck of each kernel launched, in launch order."""
        checker = self.artifact.checker if self.artifact is not None else None
        return tuple(checker.results.values()) if checker is not None else ()

    @property
    def fell_back(self) -> bool:
        return self.fallback_reason is not None

    def pretty(self) -> str:
        parts = [self.captured.pretty()]
        if self.symbolic:
            parts.append(f"# compiled once for symbolic sizes (example: {self.sizes})")
            parts += [f"# size guard: {g}" for g in self.size_guards]
        elif self.sizes:
            parts.append(f"# compiled for {self.sizes}")
        if self.fallback_reason:
            parts.append(f"# FELL BACK TO EAGER: {self.fallback_reason}")
        if self.layout is not None and self.layout.convolutions:
            parts.append(f"# {self.layout.pretty()}")
        if self.complex_pairs is not None:
            parts.append("# " + self.complex_pairs.pretty().replace("\n", "\n# "))
        for title, art in (("joint graph", self.joint), ("partition", self.partition), ("primitives", self.prims),
                           ("loop IR", self.loops), ("schedule", self.schedule), ("memory plan", self.memory),
                           ("wrapper", self.wrapper)):
            if art is not None:
                parts.append(f"# ---- {title} ----\n{art.pretty()}")
        for k in self.kernels:
            parts.append(f"# ---- kernel {k.name} ({k.backend}) ----\n{k.source}")
        if self.checks:
            parts.append("# ---- kernel checks ----\n" + "\n".join(c.pretty() for c in self.checks))
        return "\n\n".join(parts)


@dataclass
class CompileSession:
    backend: str
    mode: str
    graphs: list[GraphRecord] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # user-facing notes (fallbacks, warnings)

    def all_records(self) -> list[GraphRecord]:
        out = []
        for g in self.graphs:
            out.append(g)
            if g.backward is not None:
                out.append(g.backward)
        return out

    @property
    def kernels(self) -> list[KernelSource]:
        return [k for g in self.all_records() for k in g.kernels]

    @property
    def timings(self) -> dict[str, float]:
        """Compile seconds per stage, summed over graphs."""
        total: dict[str, float] = {}
        for g in self.all_records():
            for stage, seconds in g.timings.items():
                total[stage] = total.get(stage, 0.0) + seconds
        return total

    @property
    def stats(self) -> dict:
        fallback_ops: list[str] = []
        extern_calls = 0
        for g in self.all_records():
            if g.fell_back:  # every op of the graph that ran in eager: a backward lists its own ops
                ran = g.aten_graph if g.aten_graph is not None else g.captured.graph_module
                fallback_ops += [str(n.target) for n in ran.graph.nodes
                                 if n.op in ("call_function", "call_method", "call_module")]
            elif g.loops is not None:
                for n in g.loops.nodes:
                    if n.kind == "extern":
                        extern_calls += 1
                        if n.extern.reason.startswith("no lowering"):
                            fallback_ops.append(n.extern.target)
        return {
            "graphs": len(self.graphs),
            "graph_breaks": len(self.breaks),
            "recompiles": len(self.recompiles),
            "kernel_count": len(self.kernels),
            "extern_calls": extern_calls,
            "fallback_ops": fallback_ops,
            "fallback_graphs": sum(1 for g in self.all_records() if g.fell_back),
        }

    def pretty(self) -> str:
        head = [f"# CompileSession backend={self.backend} mode={self.mode}: {self.stats}"]
        head += [b.pretty() for b in self.breaks] + [r.pretty() for r in self.recompiles]
        head += [f"# note: {m}" for m in self.messages]
        return "\n\n".join(head + [g.pretty() for g in self.graphs])
