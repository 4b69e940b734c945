"""Autodiff artifacts: the joint forward+backward graph, and how our partitioner split it.

    s = cc.explain(model, x, train=True)
    print(s.graphs[0].joint.pretty())       # primals, tangents, forward and backward nodes
    print(s.graphs[0].partition.pretty())   # saved tensors with bytes, recomputed nodes, bans and why
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import torch

# Node roles in a joint graph.
PRIMAL, TANGENT, FORWARD, BACKWARD, OUTPUT = "primal", "tangent", "forward", "backward", "output"
_ROLE_COLORS = {PRIMAL: "#e8f0fe", TANGENT: "#fce8e6", FORWARD: "#aec7e8", BACKWARD: "#ffbb78",
                OUTPUT: "#e6f4ea"}


@dataclass(frozen=True, eq=False)  # identity: two joint graphs are never "equal" by a summary
class JointGraph:
    """The forward and the backward traced into one FX graph by AOTAutograd.

    Inputs are the primals (the graph's inputs and parameters) and the tangents (the gradients of
    its outputs); the output lists the forward's `num_fwd_outputs` results, then the gradients.
    `roles` says, per node, whether it belongs to the forward (needed for the forward's outputs) or
    to the backward (everything else: what depends on a tangent, and what only the backward uses).
    """

    graph_module: torch.fx.GraphModule = field(compare=False, repr=False)
    num_fwd_outputs: int
    roles: Mapping[str, str] = field(compare=False)  # node name -> PRIMAL/TANGENT/FORWARD/BACKWARD/OUTPUT

    def _named(self, role: str) -> tuple[str, ...]:
        return tuple(name for name, r in self.roles.items() if r == role)

    @property
    def primals(self) -> tuple[str, ...]:
        return self._named(PRIMAL)

    @property
    def tangents(self) -> tuple[str, ...]:
        return self._named(TANGENT)

    @property
    def forward_nodes(self) -> tuple[str, ...]:
        return self._named(FORWARD)

    @property
    def backward_nodes(self) -> tuple[str, ...]:
        return self._named(BACKWARD)

    def pretty(self) -> str:
        """The joint graph as code, each statement tagged with its part (# forward / # backward)."""
        from compiler_core.analysis.dot import describe_value

        lines = [f"# joint graph: {len(self.primals)} primals, {len(self.tangents)} tangents, "
                 f"{len(self.forward_nodes)} forward nodes, {len(self.backward_nodes)} backward nodes, "
                 f"{self.num_fwd_outputs} forward outputs"]
        for node in self.graph_module.graph.nodes:
            role = self.roles.get(node.name, "")
            value = describe_value(node.meta.get("val"))
            if node.op == "placeholder":
                lines.append(f"{node.name}: {value}  # {role}")
            elif node.op == "output":
                outs = list(torch.fx.node.map_arg(node.args[0], lambda n: n.name))
                lines.append(f"return forward {outs[:self.num_fwd_outputs]}, gradients {outs[self.num_fwd_outputs:]}")
            else:
                args = ", ".join(str(a) for a in node.args)
                lines.append(f"{node.name} = {node.target}({args})  # {role} {value}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        from compiler_core.analysis.dot import fx_graph_to_dot

        colors = {name: _ROLE_COLORS[role] for name, role in self.roles.items()}
        title = "joint graph: forward (blue), backward (orange), primals, tangents (red)"
        return fx_graph_to_dot(self.graph_module.graph, title, colors=colors)


@dataclass(frozen=True)
class SavedTensor:
    """A value the forward hands to the backward."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    kind: str  # "input" (a primal or a view of one: alive anyway while the caller holds it) or "activation"

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)} {self.bytes} B ({self.kind})"


@dataclass(frozen=True)
class BudgetPoint:
    """What the min-cut would save at one activation budget, estimated on the joint graph alone."""

    budget: float
    saved_bytes: int
    recompute_flops: int  # estimated FLOPs the backward spends recomputing forward nodes
    recomputed: int  # how many forward nodes the backward recomputes
    lifted_bans: int  # heuristic bans lifted at this budget

    def __str__(self) -> str:
        return (f"budget {self.budget:.2f}: save {self.saved_bytes} B, recompute {self.recomputed} nodes "
                f"(~{self.recompute_flops} FLOPs), {self.lifted_bans} bans lifted")


@dataclass(frozen=True)
class Partition:
    """How the joint graph was split: what the forward saves, what the backward recomputes, and
    why each node that may not be recomputed is banned."""

    saved: tuple[SavedTensor, ...]
    saved_symints: tuple[str, ...]
    recomputed: tuple[str, ...]  # forward nodes the backward computes again
    banned: Mapping[str, str] = field(compare=False)  # node name -> reason it may not be recomputed
    budget: float = 1.0
    sweep: tuple[BudgetPoint, ...] = ()  # the memory/recompute curve
    notes: tuple[str, ...] = ()
    partitioner: str = "fcompile min-cut"  # or AOTAutograd's default, when ours could not split
    forward_graph: Optional[torch.fx.GraphModule] = field(default=None, compare=False, repr=False)
    backward_graph: Optional[torch.fx.GraphModule] = field(default=None, compare=False, repr=False)

    @property
    def saved_bytes(self) -> int:
        return sum(t.bytes for t in self.saved)

    @property
    def saved_activation_bytes(self) -> int:
        """Saved bytes that exist only because of training (primals are held by the caller anyway)."""
        return sum(t.bytes for t in self.saved if t.kind == "activation")

    def pretty(self) -> str:
        lines = [f"# partition ({self.partitioner}, activation_budget={self.budget}): saves {len(self.saved)} "
                 f"tensors, {self.saved_bytes} B ({self.saved_activation_bytes} B of activations); "
                 f"recomputes {len(self.recomputed)} nodes"]
        lines += [f"#   saved {t}" for t in self.saved]
        lines += [f"#   saved symint {s}" for s in self.saved_symints]
        if self.recomputed:
            lines.append(f"#   recomputed in the backward: {', '.join(self.recomputed)}")
        lines += [f"#   banned {name}: {reason}" for name, reason in self.banned.items()]
        if self.sweep:
            lines.append("# activation budget sweep (estimated on the joint graph)")
            lines += [f"#   {p}" for p in self.sweep]
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines)
