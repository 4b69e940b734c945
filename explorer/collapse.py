"""Collapsed drawings of large graphs: one box per module (Graph tab) or per kernel (Fusion tab), and
the boxes a reader chose to expand drawn node by node.

    boxes = module_boxes(graph, expanded=overview_expansion(graph))  # GPT-2: a box per block
    dot = boxes.dot(graph, "captured graph 0")
    boxes = module_boxes(graph, expanded={"transformer.h.0.attn"})     # that module's nodes, its parents open
    drawing.dot(expanded={"fused_gelu_3"})                             # Fusion: kernels as boxes but one

A module is expanded when it, or a module inside it, is in `expanded`: expanding
`transformer.h.0.attn` opens `transformer` and `transformer.h.0` too. Graph inputs (parameters,
primals) whose users all sit in one box go into that box, so a collapsed drawing is not a row of
forty weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional

import torch

from compiler_core.analysis.dot import fx_graph_to_dot
from explorer.hierarchy import module_stack
from explorer.render.html import plural

OVERVIEW_LIMIT = 40  # the overview opens modules while it draws at most this many boxes and nodes
COLLAPSE_ABOVE = 60  # graphs of more nodes are drawn collapsed first; smaller ones are read whole


@dataclass(frozen=True)
class Boxes:
    """Which nodes are drawn inside which box; nodes in no box are drawn as themselves."""

    box_of: dict[str, str]  # node name -> box name (a module path or a kernel name)
    labels: dict[str, str]  # box name -> its label in the drawing
    expanded: frozenset[str] = frozenset()

    def members(self, box: str) -> list[str]:
        return [n for n, b in self.box_of.items() if b == box]

    def drawn_count(self, graph: torch.fx.Graph) -> int:
        """Shapes in the drawing: boxes plus the nodes drawn one by one."""
        return len(set(self.box_of.values())) + sum(1 for n in graph.nodes if n.name not in self.box_of)

    def dot(self, graph: torch.fx.Graph, title: str, marked: Collection[str] = (), **style) -> str:
        return fx_graph_to_dot(graph, title, collapsed=self.box_of, box_labels=self.labels, marked=marked, **style)


def is_expanded(path: str, expanded: Collection[str]) -> bool:
    return any(e == path or e.startswith(path + ".") for e in expanded)


def module_boxes(graph: torch.fx.Graph, expanded: Collection[str] = ()) -> Boxes:
    """A node goes into the outermost module on its stack that is not expanded."""
    box_of, types, ops = {}, {}, {}
    for node in graph.nodes:
        for path, type_name in module_stack(node):
            if not is_expanded(path, expanded):
                box_of[node.name] = path
                types[path] = type_name
                ops[path] = ops.get(path, 0) + 1
                break
    box_of = _with_inputs(graph, box_of)
    labels = {path: f"{path} ({types[path]})\n{plural(ops[path], 'op')}" for path in types}
    return Boxes(box_of, labels, frozenset(expanded))


def overview_expansion(graph: torch.fx.Graph, limit: int = OVERVIEW_LIMIT) -> frozenset[str]:
    """Open the largest collapsed module while the drawing stays within `limit` shapes: for GPT-2,
    `transformer` opens and its blocks stay boxes."""
    expanded: frozenset[str] = frozenset()
    tried: set[str] = set()
    while True:
        boxes = module_boxes(graph, expanded)
        sizes: dict[str, int] = {}
        for box in boxes.box_of.values():
            sizes[box] = sizes.get(box, 0) + 1
        candidates = sorted((p for p in sizes if p not in tried), key=lambda p: -sizes[p])
        for path in candidates:
            tried.add(path)
            if module_boxes(graph, expanded | {path}).drawn_count(graph) <= limit:
                expanded = expanded | {path}
                break
        else:
            return expanded


def modules_of(graph: torch.fx.Graph) -> list[str]:
    """Every module path the graph's nodes ran in, in the order they first ran."""
    return list(dict.fromkeys(path for node in graph.nodes for path, _ in module_stack(node)))


def _with_inputs(graph: torch.fx.Graph, box_of: dict[str, str]) -> dict[str, str]:
    """Inputs and constants used by one box only join it."""
    joined = dict(box_of)
    for node in graph.nodes:
        if node.op not in ("placeholder", "get_attr") or node.name in joined:
            continue
        boxes = {box_of.get(user.name) for user in node.users}
        box: Optional[str] = next(iter(boxes)) if len(boxes) == 1 else None
        if box is not None:
            joined[node.name] = box
    return joined


@dataclass(frozen=True)
class Drawing:
    """One graph's drawing, collapsed or not, as the Graph and Fusion tabs and their widgets draw it.

        drawing.picture()                                   # the overview: modules (or kernels) as boxes
        drawing.picture(expanded={"transformer.h.0.attn"})  # that module node by node
        drawing.picture(every_node=True, marked={"gelu"})   # the full graph, search hits outlined red
    """

    title: str
    graph: torch.fx.Graph
    choices: tuple[str, ...]  # what a reader can expand: module paths, or kernel names
    overview: frozenset[str]  # expanded in the first drawing
    kind: str  # "module" or "kernel"
    style: tuple[tuple[str, dict], ...] = ()  # fx_graph_to_dot's labels / clusters / colors

    @property
    def collapses(self) -> bool:
        """Whether the graph is large and its overview draws fewer shapes than it has nodes."""
        nodes = len(self.graph.nodes)
        return nodes > COLLAPSE_ABOVE and self.boxes().drawn_count(self.graph) < nodes

    def boxes(self, expanded: Collection[str] = ()) -> Boxes:
        if self.kind == "module":
            return module_boxes(self.graph, self.overview | set(expanded))
        style = dict(self.style)
        return _kernel_boxes(self.graph, style.get("clusters", {}), set(expanded))

    def dot(self, expanded: Collection[str] = (), every_node: bool = False, marked: Collection[str] = ()) -> str:
        style = dict(self.style)
        if every_node or not self.collapses:
            boxed = f"; boxes: {self.kind}s" if style.get("clusters") else ""
            return fx_graph_to_dot(self.graph, self.title + boxed, marked=marked, **style)
        title = f"{self.title}: {self.kind}s collapsed" + (f", {len(expanded)} expanded" if expanded else "")
        return self.boxes(expanded).dot(self.graph, title, marked=marked, **style)


def _kernel_boxes(graph: torch.fx.Graph, kernel_of: dict[str, str], expanded: Collection[str]) -> Boxes:
    box_of = {n: k for n, k in kernel_of.items() if k not in expanded}
    counts: dict[str, int] = {}
    for kernel in box_of.values():
        counts[kernel] = counts.get(kernel, 0) + 1
    labels = {k: f"{k}\n{plural(c, 'op')}" for k, c in counts.items()}
    # Views and getitems compute nothing: one of a single box's output goes in that box, and one
    # (or an input) read by a single box goes in the reader's.
    open_kernels = set(expanded)
    for node in graph.nodes:
        if node.name not in kernel_of and node.op == "call_function":
            sources = {box_of.get(i.name) for i in node.all_input_nodes}
            if len(sources) == 1 and None not in sources:
                box_of[node.name] = sources.pop()
    for node in reversed(graph.nodes):
        if node.name in box_of or node.op == "output" or kernel_of.get(node.name) in open_kernels:
            continue
        readers = {box_of.get(user.name) for user in node.users}
        if len(readers) == 1 and None not in readers:
            box_of[node.name] = readers.pop()
    return Boxes(box_of, labels, frozenset(expanded))
