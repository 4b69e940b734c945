"""Codegen artifacts: kernel sources and the host (wrapper) program."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from compiler_core.schedule.kernel_plan import KernelPlan
    from compiler_core.schedule.plan_passes import PassRecord


@dataclass(frozen=True)
class SplitLaunch:
    """A reduction split across programs (schedule/plan_passes.py), launched as `stages` in order:
    "chunks" kernels on a grid (rows, programs) write partials, "rows" kernels (one program per row)
    reduce them.  Every stage gets the kernel's parameters followed by the workspaces."""

    programs: int  # programs per row
    stages: tuple[tuple[str, str], ...]  # (kernel function, "chunks" | "rows"), in launch order
    workspaces: tuple[tuple[int, torch.dtype], ...]  # (elements, dtype): partials, then results kept for a later pass
    row_config: dict  # launch config of the "rows" kernels ("chunks" kernels use the kernel's config)


@dataclass(frozen=True)
class KernelSource:
    name: str
    backend: str  # "cpp" | "triton"
    source: str
    signature: tuple[str, ...]  # the buffers passed to the kernel, in parameter order
    grid: str  # launch grid, as printable text
    config_space: tuple[dict, ...]  # candidate launch configs (Triton: block sizes, warps)
    origins: tuple[str, ...]  # FX node names computed by this kernel
    kind: str = "pointwise"  # "pointwise" | "reduction" | "scatter" (atomic adds into positions read from memory)
    xnumel: int = 0  # rows (reduction) or elements (pointwise) the launch grid covers
    # Divides integers and flags a zero divisor for the runtime to raise as eager does (only these
    # kernels' graphs pay for reading the flag after each call).
    checks_int_div: bool = False
    # Line-level provenance: (1-based line of `source`, the FX nodes it computes) for every line that
    # computes something (loads, ops, stores, reductions); loop headers and pragmas have none.
    line_origins: tuple[tuple[int, tuple[str, ...]], ...] = ()
    # A horizontal kernel: the elements of each segment (the launch grid covers each one in turn).
    segments: tuple[int, ...] = ()
    index_dtype: str = "int32"  # the kernel's index arithmetic (schedule/plan_passes.choose_index_width)
    split: Optional[SplitLaunch] = None  # a reduction split across programs: two kernels, one launch each
    # Symbolic sizes (ir/symbolic.py) the kernel takes after the buffers, by name ("s0"): the host
    # program passes each call's values.
    size_args: tuple[str, ...] = ()
    # The kernel IR this source prints (after the plan passes): `plan.pretty()` shows it.
    plan: Optional["KernelPlan"] = field(default=None, compare=False, repr=False)
    # Each plan pass over it, with the plan as printed after the pass (schedule/plan_passes.PassRecord).
    passes: tuple["PassRecord", ...] = field(default=(), compare=False, repr=False)

    @property
    def function_names(self) -> tuple[str, ...]:
        """The callable kernels this source defines (a split reduction has two)."""
        return (self.name,) if self.split is None else tuple(name for name, _ in self.split.stages)

    def pretty(self) -> str:
        return self.source

    def nodes_at(self, line: int) -> tuple[str, ...]:
        """The FX nodes line `line` (1-based) of the source computes; () for a loop header or a pragma."""
        return dict(self.line_origins).get(line, ())

    def lines_of(self, node: str) -> tuple[int, ...]:
        """The source lines (1-based) that compute FX node `node`."""
        return tuple(line for line, nodes in self.line_origins if node in nodes)

    def annotated(self) -> str:
        """The source with each line's FX nodes in a comment column on the right:

            tmp1 = tl.exp(tmp0)                     # <- exp
        """
        comment = "//" if self.backend == "cpp" else "#"
        lines = self.source.split("\n")
        width = min(max((len(line) for line in lines), default=0), 88) + 2
        nodes = dict(self.line_origins)
        return "\n".join(f"{line:<{width}}{comment} <- {', '.join(nodes[i])}" if i in nodes else line
                         for i, line in enumerate(lines, 1))


@dataclass(frozen=True)
class WrapperProgram:
    """The host program: allocates buffers, launches kernels, frees, returns outputs."""

    source: str  # Python, defines `call(args)`; printed from `statements`
    backend: str
    statements: tuple = ()  # the program as statements (codegen.wrapper): allocate, launch, free...

    def pretty(self) -> str:
        return self.source
