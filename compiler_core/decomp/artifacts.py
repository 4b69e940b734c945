"""PrimGraph: the ATen graph after decomposition, each node classified into the primitive set."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class PrimGraph:
    graph_module: torch.fx.GraphModule = field(compare=False, repr=False)
    # FX node name -> primitive name ("add", "sum", "view", "extern", ...)
    node_prims: dict[str, str] = field(compare=False)
    # FX node name -> reason it is an extern call (only extern nodes)
    externs: dict[str, str] = field(compare=False)

    @property
    def histogram(self) -> dict[str, int]:
        return dict(Counter(self.node_prims.values()).most_common())

    def pretty(self) -> str:
        lines = ["# primitive histogram: " + ", ".join(f"{k}={v}" for k, v in self.histogram.items())]
        for name, reason in self.externs.items():
            lines.append(f"# extern {name}: {reason}")
        lines.append(self.graph_module.print_readable(print_output=False).rstrip())
        return "\n".join(lines)

    def to_dot(self) -> str:
        from compiler_core.analysis.dot import fx_graph_to_dot

        return fx_graph_to_dot(self.graph_module.graph, title="primitive graph", labels=self.node_prims)
