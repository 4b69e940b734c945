"""The joint graph: which nodes are forward, which backward, and how far each forward node is from
the backward.

    joint = joint_graph(joint_module, num_fwd_outputs)    # -> JointGraph (the artifact)
    facts = analyse(joint_module, num_fwd_outputs)       # -> JointFacts (what the partitioner needs)

AOTAutograd names the joint graph's inputs `primals_*` (the graph's inputs and parameters) and
`tangents_*` (the gradients of its outputs); its output is the forward's results followed by the
gradients. We classify by data flow rather than by AOTAutograd's node tags, so the classification
is the one the min-cut actually works with.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch

from compiler_core import _compat
from compiler_core.autodiff.artifacts import BACKWARD, FORWARD, OUTPUT, PRIMAL, TANGENT, JointGraph

Node = torch.fx.Node
FAR = 10**9  # distance of a node with no path to the backward


def is_primal(node: Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("primals")


def is_tangent(node: Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("tangents")


@dataclass(frozen=True)
class JointFacts:
    """Data-flow facts about one joint graph (internal to the autodiff stage)."""

    graph_module: torch.fx.GraphModule
    num_fwd_outputs: int
    primals: tuple[Node, ...]
    forward_outputs: tuple[Node, ...]
    gradients: tuple[Node, ...]  # backward outputs that are nodes (a None gradient is left out)
    forward: frozenset[Node]  # nodes the forward's outputs need (primals included)
    tangent_closure: frozenset[Node]  # tangents and everything computed from them: backward only
    mutated_primals: frozenset[Node]  # primals the forward updates in place (BatchNorm's running stats)
    dist_from_backward: dict[Node, int]  # forward node -> fewest edges to a node outside the forward

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph


def analyse(gm: torch.fx.GraphModule, num_fwd_outputs: int) -> JointFacts:
    graph = gm.graph
    outputs = _flatten(list(next(iter(graph.find_nodes(op="output"))).args[0]))
    forward_outputs = tuple(forward_output_nodes(gm, num_fwd_outputs))
    gradients = tuple(o for o in outputs[num_fwd_outputs:] if isinstance(o, Node))

    tangent_closure: set[Node] = set()
    for node in graph.nodes:
        if is_tangent(node) or any(i in tangent_closure for i in node.all_input_nodes):
            if node.op != "output":
                tangent_closure.add(node)

    forward: set[Node] = set()
    stack = list(forward_outputs)
    while stack:
        node = stack.pop()
        if node not in forward:
            forward.add(node)
            stack.extend(node.all_input_nodes)
    primals = tuple(n for n in graph.nodes if is_primal(n))
    forward.update(primals)

    mutated = frozenset(primals[i] for i in _compat.mutated_primal_indices(gm) if i < len(primals))
    return JointFacts(gm, num_fwd_outputs, primals, forward_outputs, gradients, frozenset(forward),
                      frozenset(tangent_closure), mutated, _distances(graph, forward))


def forward_output_nodes(gm: torch.fx.GraphModule, num_fwd_outputs: int) -> list[Node]:
    """The nodes a joint graph returns as the forward's results (its output lists them first)."""
    outputs = _flatten(list(next(iter(gm.graph.find_nodes(op="output"))).args[0]))
    return [o for o in outputs[:num_fwd_outputs] if isinstance(o, Node)]


def _flatten(values: list) -> list:
    out = []
    for v in values:
        out.extend(_flatten(list(v)) if isinstance(v, (list, tuple)) else [v])
    return out


def _distances(graph: torch.fx.Graph, forward: set[Node]) -> dict[Node, int]:
    """Fewest data edges from each forward node to a node outside the forward (a backward node)."""
    dist: dict[Node, int] = {}
    for node in reversed(graph.nodes):
        if node in forward:
            dist[node] = min((1 if user not in forward else dist.get(user, FAR) + 1 for user in node.users
                              if user.op != "output"), default=FAR)
    return dist


def joint_graph(gm: torch.fx.GraphModule, num_fwd_outputs: int) -> JointGraph:
    """The JointGraph artifact: every node with its role (primal, tangent, forward, backward)."""
    facts = analyse(gm, num_fwd_outputs)
    roles: dict[str, str] = {}
    for node in gm.graph.nodes:
        if is_primal(node):
            roles[node.name] = PRIMAL
        elif is_tangent(node):
            roles[node.name] = TANGENT
        elif node.op == "output":
            roles[node.name] = OUTPUT
        else:
            roles[node.name] = FORWARD if node in facts.forward else BACKWARD
    return JointGraph(gm, num_fwd_outputs, MappingProxyType(roles))
