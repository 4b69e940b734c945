"""Merge duplicate nodes of a joint graph before partitioning.

    merged, count = merge_duplicates(joint_module)   # a new GraphModule; the input is not changed

AOTAutograd traces the backward's formulas from scratch, so the backward often recomputes what the
forward already has (GELU's backward multiplies the same input by the same constant again). Merged,
such a value is one node: the partitioner decides once whether to save or recompute it, instead of
paying for two copies. Random and mutating ops are never merged: two draws are two values. Nor are
two forward outputs: `a = f(x); b = f(x); return a, b` gives eager two tensors, and a merged node
returned twice gave the caller one storage under two names (writing into `a` changed `b`; found by
random program 5140, 2026-12-05). Their inputs still merge: only the last op is computed twice.
"""

from __future__ import annotations

from typing import Any

import torch

from compiler_core.autodiff.joint import forward_output_nodes
from compiler_core.autodiff.rules import is_random

Node = torch.fx.Node


def merge_duplicates(gm: torch.fx.GraphModule, num_fwd_outputs: int) -> tuple[torch.fx.GraphModule, int]:
    graph = torch.fx.Graph()
    graph.set_codegen(gm.graph._codegen)  # the joint's (primals, tangents) calling convention
    env: dict[Node, Node] = {}
    seen: dict[Any, Node] = {}
    outputs = set(forward_output_nodes(gm, num_fwd_outputs))
    returned: set[Node] = set()  # nodes of the new graph that already stand for a forward output
    merged = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and _mergeable(node):
            key = (node.target, _key(node.args, env), _key(node.kwargs, env))
            if key in seen and not (node in outputs and seen[key] in returned):
                env[node] = seen[key]
                merged += 1
            else:
                env[node] = graph.node_copy(node, lambda n: env[n])
                seen.setdefault(key, env[node])
            if node in outputs:
                returned.add(env[node])
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    return torch.fx.GraphModule(gm, graph), merged


def _mergeable(node: Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return False
    return not is_random(node) and not node.is_impure()


def _key(value: Any, env: dict[Node, Node]) -> Any:
    """A hashable stand-in for an argument: nodes by identity, scalars with their type (1, 1.0 and
    True hash alike but are different arguments)."""
    if isinstance(value, Node):
        return ("node", env[value])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v, env) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _key(v, env)) for k, v in value.items()))
    if isinstance(value, float):
        return ("float", repr(value))  # 0.0 and -0.0 are equal but multiply differently
    try:
        hash(value)
        return (type(value).__name__, value)
    except TypeError:
        return (type(value).__name__, repr(value))
