"""Codegen artifacts: kernel sources and the host (wrapper) program."""

from __future__ import annotations

from dataclasses import dataclass


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
    # A horizontal kernel: the elements of each segment (the launch grid covers each one in turn).
    segments: tuple[int, ...] = ()

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
