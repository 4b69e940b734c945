"""Where the backward recomputes: each recomputed forward value just before its first use, and a
gradient formula's own copy of the cheap values it shares with a recomputation.

    names = own_copies_for_gradients(backward, recomputed)   # the copies' names
    place_recomputation_late(backward, recomputed | set(names))

Both rewrite the backward graph module in place, after the min-cut has decided what is saved; they
change no value, only when and in which kernel it is computed, so the memory the backward holds.
"""

from __future__ import annotations

import operator

import torch

from compiler_core.autodiff.rules import is_view

Node = torch.fx.Node


def own_copies_for_gradients(backward: torch.fx.GraphModule, recomputed: set[str]) -> tuple[str, ...]:
    """Give gradient formulas their own copies of the pointwise recomputations they read (in place);
    returns the copies' names.

    The joint graph's duplicates were merged before the cut (cse.py), so GELU's gradient reads the
    very `erf` node whose result the recomputed GELU output is also made from. Shared, the two can
    only be fused into one kernel or have the `erf` stored between them; fused, the recomputed output
    is born when the gradient's other input (the incoming gradient, a matmul's result) is already
    alive. With a copy each, the scheduler may run the recomputation, and the weight-gradient matmul
    reading it, first, or fuse the two anyway (a kernel computes one expression once) where memory
    does not suffer (schedule/fusion.py's memory check). Copies are made of pointwise ops, dtype
    conversions and views only: a recomputed reduction stays shared."""
    graph = backward.graph
    shared = {n for n in graph.nodes if n.op == "call_function" and n.name in recomputed}
    copies: dict[Node, Node] = {}

    def copy_of(node: Node) -> Node:
        if node not in shared or not _copyable(node):
            return node
        if node not in copies:
            args = torch.fx.map_arg(node.args, copy_of)
            kwargs = torch.fx.map_arg(node.kwargs, copy_of)
            with graph.inserting_after(node):
                twin = graph.create_node("call_function", node.target, args, kwargs)
            twin.meta = dict(node.meta)
            copies[node] = twin
        return copies[node]

    for node in list(graph.nodes):
        if node not in shared or not _copyable(node):
            continue
        gradient_users = [u for u in node.users if u not in shared and u.op != "output"]
        if gradient_users and any(u in shared for u in node.users):
            twin = copy_of(node)
            for user in gradient_users:
                user.replace_input_with(node, twin)
    if copies:
        graph.lint()
        backward.recompile()
    return tuple(c.name for c in copies.values())


# Dtype conversions are elementwise too (a bf16 GELU computes in float32: both chains read one upcast
# of the saved pre-activation), though PyTorch does not tag them pointwise.
_CONVERSIONS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _copyable(node: Node) -> bool:
    return node.target is not operator.getitem and (
        is_view(node) or torch.Tag.pointwise in getattr(node.target, "tags", ()) or node.target in _CONVERSIONS)


def place_recomputation_late(backward: torch.fx.GraphModule, recomputed: set[str]) -> None:
    """Move each recomputed forward node to just before its first use in the backward (in place).

    The extracted backward keeps the joint graph's order, where every forward node comes before every
    backward node: recomputations would all run first and their results would stay alive through the
    whole backward, though the gradient that needs them may come last. Placed just in time, a
    recomputed activation lives from its recomputation to its last reader, as it would in the
    autograd engine's own order. The scheduler orders kernels by this graph's order among the ones
    ready, so this is where the lifetime is decided."""
    graph = backward.graph
    pending = [n for n in graph.nodes if n.op == "call_function" and n.name in recomputed]
    if not pending:
        return
    moving = set(pending)
    # A getitem of a recomputed multi-output node moves with it.
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is operator.getitem and n.args[0] in moving:
            moving.add(n)
    order = [n for n in graph.nodes if n not in moving]
    placed: set[Node] = set()
    result: list[Node] = []

    def place(node: Node) -> None:
        # Iterative depth-first placement of `node`'s recomputed inputs, then the node itself.
        stack = [(node, False)]
        while stack:
            n, inputs_done = stack.pop()
            if n in placed:
                continue
            if inputs_done:
                placed.add(n)
                result.append(n)
                continue
            stack.append((n, True))
            for arg in reversed(n.all_input_nodes):
                if arg in moving and arg not in placed:
                    stack.append((arg, False))

    for n in order:
        for arg in n.all_input_nodes:
            if arg in moving and arg not in placed:
                place(arg)
        placed.add(n)
        result.append(n)
    for n in graph.nodes:  # recomputed values nothing reads (dead code AOTAutograd removes later)
        if n not in placed:
            result.append(n)
    output = next(iter(graph.find_nodes(op="output")))
    for n in result:
        if n is not output:
            output.prepend(n)
    graph.lint()
    backward.recompile()
