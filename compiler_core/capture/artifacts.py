"""Capture artifacts: what TorchDynamo handed us, why a graph broke, why code recompiled."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class InputInfo:
    name: str
    shape: tuple[int | str, ...]  # a str where symbolic (dynamic shapes): "s0"
    stride: tuple[int | str, ...]
    dtype: str
    device: str
    requires_grad: bool

    def __str__(self) -> str:
        if self.device == "-":  # not a tensor: an int, a SymInt size, a float...
            return f"{self.name}: {self.dtype}"
        grad = ", requires_grad" if self.requires_grad else ""
        shape, stride = (", ".join(map(str, values)) for values in (self.shape, self.stride))
        return f"{self.name}: {self.dtype}[{shape}] stride=[{stride}] on {self.device}{grad}"


@dataclass(frozen=True)
class CapturedGraph:
    """One FX graph captured by TorchDynamo (torch-level ops, before AOT tracing)."""

    index: int
    graph_module: torch.fx.GraphModule = field(compare=False, repr=False)
    inputs: tuple[InputInfo, ...]
    guards: tuple[str, ...]  # readable guard lines (may be empty when Dynamo does not expose them)
    op_count: int

    def pretty(self) -> str:
        lines = [f"# captured graph {self.index}: {self.op_count} ops"]
        lines += [f"#   input {i}" for i in self.inputs]
        lines.append(self.graph_module.print_readable(print_output=False).rstrip())
        if self.guards:
            lines.append("# guards")
            lines += [f"#   {g}" for g in self.guards]
        return "\n".join(lines)

    def to_dot(self) -> str:
        from compiler_core.analysis.dot import fx_graph_to_dot

        return fx_graph_to_dot(self.graph_module.graph, title=f"captured graph {self.index}")


@dataclass(frozen=True)
class GraphBreak:
    reason: str
    filename: str
    lineno: int
    source_line: str

    @property
    def location(self) -> str:
        return f"{self.filename}:{self.lineno}"

    def pretty(self) -> str:
        src = f"\n    {self.source_line.strip()}" if self.source_line else ""
        return f"graph break at {self.location}: {self.reason}{src}"


@dataclass(frozen=True)
class Recompile:
    reason: str  # the failed guard, as Dynamo words it
    # Dynamo gave up recompiling this code (its recompile limit): it now runs in eager PyTorch.
    limit_hit: bool = False

    def pretty(self) -> str:
        return f"recompiled because: {self.reason}"
