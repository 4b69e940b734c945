"""PrimGraph: the ATen graph after decomposition, each node classified into the primitive set; and
LayoutDecision: the activation layout chosen for a convolution graph (conv_layout.py); ComplexPairs:
how a graph with complex tensors was rewritten into real ones (complex_pairs.py)."""

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


@dataclass(frozen=True)
class LayoutDecision:
    """What the pass decided for one graph, and why (GraphRecord.layout shows `pretty()`)."""

    channels_last: bool
    reason: str
    convolutions: int = 0
    conversions: tuple[str, ...] = ()  # FX names of the clones the pass inserted

    def pretty(self) -> str:
        if not self.channels_last:
            return f"layout: as traced ({self.reason})"
        made = ", ".join(self.conversions) or "none"
        return (f"layout: channels-last activations for {self.convolutions} convolution(s) ({self.reason}); "
                f"conversions inserted: {made}")


@dataclass(frozen=True)
class ComplexPairs:
    """What the rewrite did to one graph: which inputs and outputs the host program reinterprets, and
    which complex ops became real ones."""

    complex_inputs: tuple[int, ...]  # placeholder positions given as view_as_real pairs
    complex_outputs: tuple[int, ...]  # output positions returned as pairs, viewed as complex after
    rewritten: tuple[str, ...]  # "node: op" for each complex op rewritten into real ops

    def pretty(self) -> str:
        lines = [f"complex values as real pairs: inputs {list(self.complex_inputs)} are viewed as real pairs, "
                 f"outputs {list(self.complex_outputs)} as complex again; {len(self.rewritten)} ops rewritten"]
        lines += [f"  {r}" for r in self.rewritten]
        return "\n".join(lines)
