"""Helpers shared by the loop-graph rewrites that run before scheduling (gather_inline.py,
index_inline.py): a node's loop variables with their sizes, and dropping nodes nothing reads."""

from __future__ import annotations

from compiler_core.ir.graph import LoopNode


def loop_ranges(node: LoopNode) -> dict[str, int]:
    """The node's loop variables (x0.., then r0..) and their sizes."""
    names = [f"x{i}" for i in range(len(node.ranges))] + [f"r{i}" for i in range(len(node.reduction_ranges))]
    return dict(zip(names, (*node.ranges, *node.reduction_ranges)))


def without_dead(nodes: list[LoopNode], candidates: set[str], outputs: set[str]) -> tuple[list[LoopNode], set[str]]:
    """Drop the inlined producers (and producers only they read) that nothing reads any more."""
    removed: set[str] = set()
    while True:
        read = {b for n in nodes for b in n.input_buffers}
        dead = {n.output.name for n in nodes if n.output.name in candidates and n.output.name not in read
                and n.output.name not in outputs and n.kind == "pointwise"}
        if not dead:
            return nodes, removed
        removed |= dead
        freed_inputs = {b for n in nodes if n.output.name in dead for b in n.input_buffers}
        nodes = [n for n in nodes if n.output.name not in dead]
        candidates = (candidates - dead) | freed_inputs
