"""Memory traffic: bytes moved by eager PyTorch against bytes moved by our fused kernels.

    t = bytes_moved(cc.explain(lambda x: torch.softmax(x, -1), x))
    t["eager_bytes"], t["fused_bytes"], t["ops_fused"]

Eager PyTorch runs one kernel per op, so every op reads its inputs from memory and writes its
output back. A fused kernel reads what it needs from outside the kernel and writes only the
buffers it materializes; values kept in registers cost nothing. Forward graphs only: the eager
side is counted from the captured (torch-level) graph, which has no backward.
"""

from __future__ import annotations

from math import prod
from typing import Any

import torch

from compiler_core._compat import fake_value
from compiler_core.ir.graph import LoopGraph
from compiler_core.ir.symbolic import hint
from compiler_core.schedule.artifacts import FusionGroup, Schedule

# Ops that return a view of their input: eager PyTorch moves no data for them.
_VIEW_OPS = {
    "view", "reshape", "permute", "transpose", "t", "expand", "expand_as", "unsqueeze", "squeeze",
    "flatten", "unflatten", "getitem", "narrow", "select", "as_strided", "view_as", "split", "chunk",
    "unbind", "movedim", "detach", "alias", "size", "dim",
}


def bytes_moved(session: Any) -> dict:
    """{"eager_bytes", "fused_bytes", "ops_fused", "per_graph": [...]} for a CompileSession.

    A graph that fell back to eager PyTorch counts its eager bytes on both sides.
    """
    per_graph = []
    for record in session.graphs:
        eager = eager_graph_bytes(record.captured.graph_module.graph)
        if record.fell_back or record.loops is None or record.schedule is None:
            fused, fused_ops = eager, 0
        else:
            fused = fused_graph_bytes(record.loops, record.schedule)
            fused_ops = ops_fused(record.schedule)
        per_graph.append({"graph": record.captured.index, "eager_bytes": eager, "fused_bytes": fused,
                          "ops_fused": fused_ops})
    return {
        "eager_bytes": sum(g["eager_bytes"] for g in per_graph),
        "fused_bytes": sum(g["fused_bytes"] for g in per_graph),
        "ops_fused": sum(g["ops_fused"] for g in per_graph),
        "per_graph": per_graph,
    }


def eager_graph_bytes(graph: torch.fx.Graph) -> int:
    """Sum over the graph's ops of input + output tensor bytes (views move nothing)."""
    total = 0
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        if _op_name(node) in _VIEW_OPS:
            continue
        inputs = sum(tensor_bytes(fake_value(n)) for n in node.all_input_nodes)
        total += inputs + tensor_bytes(fake_value(node))
    return total


def fused_graph_bytes(loops: LoopGraph, schedule: Schedule) -> int:
    """Sum over kernels (and extern calls) of bytes read from outside the kernel + bytes written."""
    sizes = buffer_sizes(loops)
    return sum(group_bytes(loops, group, sizes) for group in schedule.groups)


def group_bytes(loops: LoopGraph, group: FusionGroup, sizes: dict[str, int] | None = None) -> int:
    """Bytes one kernel (or extern call) reads from outside itself plus bytes it writes.

    A scatter updates its destination in place: it reads and writes only the elements its positions
    reach, at most one per add (its iterations), not the whole destination (a 51 MB embedding
    gradient gets 3 MB of token rows added). The rest of the destination is counted where it was made.
    """
    sizes = buffer_sizes(loops) if sizes is None else sizes
    nodes = [loops.node(name) for name in group.nodes]
    produced = {n.output.name for n in nodes} | {b.name for n in nodes for b in n.extra_outputs}
    updated = {n.destination: n for n in nodes if n.kind == "scatter"}
    updated.update({n.output.name: n for n in nodes if n.kind == "scatter"})
    reads = {b for n in nodes for b in n.input_buffers if b not in produced}
    writes = set(group.materialized)
    if group.kind == "extern":  # an extern call writes all its outputs
        writes |= produced
    total = sum(sizes.get(b, 0) for b in (reads | writes) if b not in updated)
    for node in {id(n): n for n in updated.values()}.values():
        touched = min(hint(prod(node.ranges), loops.size_hints),
                      hint(node.output.layout.numel, loops.size_hints)) * node.output.dtype.itemsize
        total += 2 * touched  # each reached element read and written back
    return total


def ops_fused(schedule: Schedule) -> int:
    """Loop nodes that share a kernel with at least one other loop node."""
    return sum(len(g.nodes) for g in schedule.groups if g.kind != "extern" and len(g.nodes) > 1)


def buffer_sizes(loops: LoopGraph) -> dict[str, int]:
    """Bytes of every buffer of a loop graph: inputs, node outputs and constants."""
    sizes = {b.name: hint(b.nbytes, loops.size_hints) for b in loops.inputs}  # symbolic: the example call's
    for node in loops.nodes:
        for buffer in (node.output, *node.extra_outputs):
            sizes[buffer.name] = hint(buffer.nbytes, loops.size_hints)
    for name, tensor in loops.constants.items():
        sizes.setdefault(name, tensor_bytes(tensor))
    return sizes


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", str(target)).split(".")[0]



def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in a value (nested lists and tuples included)."""
    if isinstance(value, torch.Tensor):
        numel = value.numel()
        if isinstance(numel, torch.SymInt):  # a graph traced with symbolic sizes: the example call's
            numel = numel.node.hint or 0
        return numel * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0
