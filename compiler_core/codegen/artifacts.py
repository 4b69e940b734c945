"""Codegen artifacts: kernel sources and the host (wrapper) program."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


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
    kind: str = "pointwise"  # "pointwise" | "reduction"
    xnumel: int = 0  # rows (reduction) or elements (pointwise) the launch grid covers
    # Divides integers and flags a zero divisor for the runtime to raise as eager does (only these
    # kernels' graphs pay for reading the flag after each call).
    checks_int_div: bool = False
    index_dtype: str = "int32"  # the kernel's index arithmetic (schedule/plan_passes.choose_index_width)
    split: Optional[SplitLaunch] = None  # a reduction split across programs: two kernels, one launch each

    @property
    def function_names(self) -> tuple[str, ...]:
        """The callable kernels this source defines (a split reduction has two)."""
        return (self.name,) if self.split is None else tuple(name for name, _ in self.split.stages)

    def pretty(self) -> str:
        return self.source


@dataclass(frozen=True)
class WrapperProgram:
    """The host program: allocates buffers, launches kernels, frees, returns outputs."""

    source: str  # Python, defines `call(args)`; printed from `statements`
    backend: str
    statements: tuple = ()  # the program as statements (codegen.wrapper): allocate, launch, free...

    def pretty(self) -> str:
        return self.source
