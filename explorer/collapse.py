"""Collapsed drawings of large graphs: one box per module (Graph tab), or per module and then per kernel
(Fusion tab), and the boxes a reader chose to expand drawn node by node.

    boxes = module_boxes(graph, expanded=overview_expansion(graph))  # GPT-2: a box per block
    dot = boxes.dot(graph, "captured graph 0")
    boxes = module_boxes(graph, expanded={"transformer.h.0.attn"})     # that module's nodes, its parents open
    drawing.dot(expanded={"transformer.h.0"})                          # Fusion: that block's kernels as boxes
    drawing.dot(expanded={"fused_gelu_3"})                             # that kernel's ops, its modules open

A module is expanded when it, or a module inside it, is in `expanded`: expanding
`transformer.h.0.attn` opens `transformer` and `transformer.h.0` too; expanding a kernel opens the
modules it sits in. Graph inputs (parameters, primals) whose users all sit in one box go into that box,
so a collapsed drawing is not a row of forty weights.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Collection, Iterable, Optional

import torch

from compiler_core.analysis.dot import fx_graph_to_dot
from explorer.hierarchy import Stack, common_stack, module_stack, recorded_stack
from explorer.render.html import plural

OVERVIEW_LIMIT = 40  # the overview opens modules while it draws at most this many boxes and nodes
COLLAPSE_ABOVE = 60  # graphs of more nodes are drawn collapsed first; smaller ones are read whole


@dataclass(frozen=True)
class Boxes:
    """Which nodes are drawn inside which box; nodes in no box are drawn as themselves."""

    box_of: dict[str, str]  # node name -> box name (a module path or a kernel name)
    labels: dict[str, str]  # box name -> its label in the drawing
    expanded: frozenset[str] = frozenset()
    module_types: dict[str, str] = field(default_factory=dict)  # the boxes that are modules -> type name

    def members(self, box: str) -> list[str]:
        return [n for n, b in self.box_of.items() if b == box]

    def drawn_count(self, graph: torch.fx.Graph) -> int:
        """Shapes in the drawing: boxes plus the nodes drawn one by one."""
        return len(set(self.box_of.values())) + sum(1 for n in graph.nodes if n.name not in self.box_of)

    def dot(self, graph: torch.fx.Graph, title: str, marked: Collection[str] = (), **style) -> str:
        colors = style.pop("colors", None)
        return fx_graph_to_dot(graph, title, collapsed=self.box_of, box_labels=self.labels, marked=marked,
                               colors=self._box_colors(colors) if colors else None, **style)

    def _box_colors(self, colors: dict[str, str]) -> dict[str, str]:
        """A box is filled like its first member: every member of a kernel's box gets the kernel's colour
        (the first may be an input or a view, which have none); a module's box holds kernels of many
        colours and none of theirs."""
        of_box: dict[str, str] = {}
        for name, box in self.box_of.items():
            if name in colors and box not in self.module_types:
                of_box.setdefault(box, colors[name])
        loose = {name: color for name, color in colors.items() if name not in self.box_of}
        return loose | {name: of_box[box] for name, box in self.box_of.items() if box in of_box}


def node_stacks(graph: torch.fx.Graph) -> dict[str, Stack]:
    """Node name -> its module stack, read once per graph (the overview tries dozens of expansions)."""
    return {node.name: module_stack(node) for node in graph.nodes}


def opened_modules(expanded: Iterable[str]) -> set[str]:
    """Every module an expansion opens: `transformer.h.0.attn` opens `transformer`, `transformer.h`,
    `transformer.h.0` and itself."""
    opened = set()
    for path in expanded:
        parts = path.split(".")
        opened.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return opened


def module_boxes(graph: torch.fx.Graph, expanded: Collection[str] = (),
                 stacks: Optional[dict[str, Stack]] = None) -> Boxes:
    """A node goes into the outermost module on its stack that is not expanded."""
    stacks = node_stacks(graph) if stacks is None else stacks
    opened = opened_modules(expanded)
    box_of, types, ops = {}, {}, Counter()
    for node in graph.nodes:
        for path, type_name in stacks[node.name]:
            if path not in opened:
                box_of[node.name] = path
                types[path] = type_name
                ops[path] += 1
                break
    box_of = _with_inputs(graph, box_of)
    labels = {path: f"{path} ({types[path]})\n{plural(ops[path], 'op')}" for path in types}
    return Boxes(box_of, labels, frozenset(expanded), types)


def overview_expansion(graph: torch.fx.Graph, limit: int = OVERVIEW_LIMIT) -> frozenset[str]:
    """The modules the Graph tab's first drawing opens (see `open_largest`): for GPT-2, `transformer`
    opens and its blocks stay boxes."""
    stacks = node_stacks(graph)
    return open_largest(graph, lambda expanded: module_boxes(graph, expanded, stacks), limit)


def open_largest(graph: torch.fx.Graph, boxes_for: Callable[[frozenset[str]], Boxes],
                 limit: int = OVERVIEW_LIMIT) -> frozenset[str]:
    """Open the largest collapsed module while the drawing stays within `limit` shapes. Modules that
    repeat (`transformer.h.0` ... `transformer.h.11`, every GPT2Block) open together or not at all,
    so the layers of a stack look alike: twelve blocks as twelve boxes, not two opened and ten shut."""
    expanded: frozenset[str] = frozenset()
    tried: set[str] = set()
    while True:
        boxes = boxes_for(expanded)
        sizes = Counter(box for box in boxes.box_of.values() if box in boxes.module_types)
        repeats: dict[str, list[str]] = {}
        for path in sorted(sizes, key=lambda p: -sizes[p]):  # groups in the order of their largest module
            repeats.setdefault(_repeat_key(path, boxes.module_types[path]), []).append(path)
        for key, paths in repeats.items():
            if key in tried:
                continue
            tried.add(key)
            if boxes_for(expanded | set(paths)).drawn_count(graph) <= limit:
                expanded = expanded | set(paths)
                break
        else:
            return expanded


_INDEX = re.compile(r"(?<![^.])\d+(?![^.])")  # a numbered part of a module path: the 0 of transformer.h.0.attn


def _repeat_key(path: str, type_name: str) -> str:
    """`transformer.h.#.attn (GPT2Attention)` for every block's attention."""
    return f"{_INDEX.sub('#', path)} ({type_name})"


def modules_of(graph: torch.fx.Graph) -> list[str]:
    """Every module path the graph's nodes ran in, in the order they first ran."""
    return list(dict.fromkeys(path for node in graph.nodes for path, _ in module_stack(node)))


def _with_inputs(graph: torch.fx.Graph, box_of: dict[str, str]) -> dict[str, str]:
    """Inputs and constants used by one box only join it."""
    joined = dict(box_of)
    for node in graph.nodes:
        if node.op not in ("placeholder", "get_attr") or node.name in joined:
            continue
        boxes = _reading_boxes(node, box_of)
        box: Optional[str] = next(iter(boxes)) if len(boxes) == 1 else None
        if box is not None:
            joined[node.name] = box
    return joined


def _reading_boxes(node: torch.fx.Node, box_of: dict[str, str]) -> set[Optional[str]]:
    """The boxes of a node's readers (None: one drawn by itself). The graph's output does not count: a
    training forward returns the weights and activations it saves, and each would stay out of its box."""
    return {box_of.get(user.name) for user in node.users if user.op != "output"}


# ---- kernels, by module (the Fusion tab) ----------------------------------------------------------------

# A backward's saved activations and weights are read by its recomputing kernels and by each block's
# gradient kernels: drawn one by one they outnumber the boxes, so they share one box.
SHARED_INPUTS = "(inputs read by several boxes)"


def kernel_stacks(graph: torch.fx.Graph, kernel_of: dict[str, str]) -> dict[str, Stack]:
    """Kernel -> the modules it sits in: the deepest module common to those of its ops that record one
    (in a backward graph, the module whose forward the op differentiates)."""
    nodes = {node.name: node for node in graph.nodes}
    ops: dict[str, list[torch.fx.Node]] = {}
    for name, kernel in kernel_of.items():
        ops.setdefault(kernel, []).append(nodes[name])
    return {kernel: common_stack(recorded_stack(node) for node in members) for kernel, members in ops.items()}


def kernel_boxes(graph: torch.fx.Graph, kernel_of: dict[str, str], stacks: dict[str, Stack],
                 expanded: Collection[str] = ()) -> Boxes:
    """A kernel goes into the outermost module on its stack that is not expanded, and is a box of its
    own where every module it sits in is open; an expanded kernel is drawn op by op. A module that
    would hold a single kernel is drawn as that kernel (one box either way, and it names the kernel).

        boxes = kernel_boxes(graph, kernel_of, kernel_stacks(graph, kernel_of), {"transformer"})
        boxes.labels["transformer.h.0"]   # "transformer.h.0 (GPT2Block)\\n31 kernels"
    """
    kernels = set(expanded) & set(stacks)
    opened = opened_modules(set(expanded) - kernels) | {path for k in kernels for path, _ in stacks[k]}
    place: dict[str, str] = {}  # kernel -> the box drawing it
    types: dict[str, str] = {}
    for kernel, stack in stacks.items():
        closed = [(path, type_name) for path, type_name in stack if path not in opened]
        if closed:
            path, type_name = closed[0]  # the outermost
            place[kernel], types[path] = path, type_name
        elif kernel not in kernels:
            place[kernel] = kernel
    held = Counter(place.values())
    place = {kernel: kernel if box in types and held[box] == 1 else box for kernel, box in place.items()}
    types = {path: type_name for path, type_name in types.items() if held[path] > 1}
    ops = Counter(kernel_of.values())
    labels = {box: f"{box} ({types[box]})\n{plural(held[box], 'kernel')}" if box in types
              else f"{box}\n{plural(ops[box], 'op')}" for box in set(place.values())}
    box_of = _with_views_and_inputs(graph, {name: place[kernel] for name, kernel in kernel_of.items()
                                            if kernel in place}, kernel_of)
    shared = sum(1 for node in graph.nodes if box_of.get(node.name) == SHARED_INPUTS and node.op == "placeholder")
    if shared:
        labels[SHARED_INPUTS] = f"{plural(shared, 'graph input')}\neach read by several boxes"
    return Boxes(box_of, labels, frozenset(expanded), types)


def _with_views_and_inputs(graph: torch.fx.Graph, box_of: dict[str, str], kernel_of: dict[str, str]) -> dict[str, str]:
    """Views and getitems compute nothing: one of a single box's output goes in that box, and one (or an
    input) read by a single box goes in the reader's. Inputs read by several boxes share a box of their
    own (where there are several). Ops of an expanded kernel stay as they are."""
    box_of = dict(box_of)
    _join_sources(graph, box_of, kernel_of)
    # Readers are looked for through the nodes left outside: a weight that its block reads, and that a
    # view outside any kernel transposes for the backward, still joins its block (and the view with it).
    readers: dict[str, set[Optional[str]]] = {}  # a node left outside -> the boxes reading it
    for node in reversed(graph.nodes):
        if node.name in box_of or node.op == "output" or node.name in kernel_of:
            continue
        found: set[Optional[str]] = set()
        for user in node.users:
            if user.name in box_of:
                found.add(box_of[user.name])
            elif user.op != "output":  # the output does not count: a training forward returns what it saves
                found |= readers.get(user.name, {None})
        if len(found) == 1 and None not in found:
            box_of[node.name] = found.pop()
        else:
            readers[node.name] = found
    shared = [node.name for node in graph.nodes
              if node.op == "placeholder" and len(readers.get(node.name, set()) - {None}) > 1]
    if len(shared) > 1:
        box_of.update(dict.fromkeys(shared, SHARED_INPUTS))
    _join_sources(graph, box_of, kernel_of)
    return box_of


def _join_sources(graph: torch.fx.Graph, box_of: dict[str, str], kernel_of: dict[str, str]) -> None:
    """A view (or getitem) of a single box's values goes in that box."""
    for node in graph.nodes:
        if node.name not in box_of and node.name not in kernel_of and node.op == "call_function":
            sources = {box_of.get(i.name) for i in node.all_input_nodes}
            if len(sources) == 1 and None not in sources:
                box_of[node.name] = sources.pop()


@dataclass(frozen=True)
class Drawing:
    """One graph's drawing, collapsed or not, as the Graph and Fusion tabs and their widgets draw it.

        drawing.dot()                                   # the overview: modules (and kernels) as boxes
        drawing.dot(expanded={"transformer.h.0.attn"})  # that module node by node (Fusion: kernel by kernel)
        drawing.dot(every_node=True, marked={"gelu"})   # the full graph, search hits outlined red
    """

    title: str
    graph: torch.fx.Graph
    choices: tuple[str, ...]  # what a reader can expand: module paths, and (kind "kernel") kernel names
    overview: frozenset[str]  # expanded in the first drawing
    kind: str  # "module" (boxes are modules) or "kernel" (boxes are modules of kernels, or kernels)
    style: tuple[tuple[str, dict], ...] = ()  # fx_graph_to_dot's labels / clusters / colors
    kernel_stacks: dict[str, Stack] = field(default_factory=dict)  # kernel -> the modules it sits in

    @property
    def collapses(self) -> bool:
        """Whether the graph is large and its overview draws fewer shapes than it has nodes."""
        nodes = len(self.graph.nodes)
        return nodes > COLLAPSE_ABOVE and self.overview_boxes.drawn_count(self.graph) < nodes

    @cached_property
    def overview_boxes(self) -> Boxes:
        return self.boxes()

    @cached_property
    def _node_stacks(self) -> dict[str, Stack]:
        return node_stacks(self.graph)

    def boxes(self, expanded: Collection[str] = ()) -> Boxes:
        expanded = self.overview | set(expanded)
        if self.kind == "module":
            return module_boxes(self.graph, expanded, self._node_stacks)
        return kernel_boxes(self.graph, dict(self.style).get("clusters", {}), self.kernel_stacks, expanded)

    def options(self) -> list[tuple[str, str]]:
        """(label, choice) for the widget's expand list: a kernel says which module it sits in."""
        types = {path: type_name for stack in self.kernel_stacks.values() for path, type_name in stack}

        def label(choice: str) -> str:
            if choice in types:
                return f"{choice} ({types[choice]})"
            stack = self.kernel_stacks.get(choice)
            return f"{choice}  (in {stack[-1][0]})" if stack else choice

        return [(label(choice), choice) for choice in self.choices]

    def dot(self, expanded: Collection[str] = (), every_node: bool = False, marked: Collection[str] = ()) -> str:
        style = dict(self.style)
        if every_node or not self.collapses:
            boxed = f"; boxes: {self.kind}s" if style.get("clusters") else ""
            return fx_graph_to_dot(self.graph, self.title + boxed, marked=marked, **style)
        boxes = self.boxes(expanded)
        by_module = " by module" if self.kind == "kernel" and boxes.module_types else ""
        title = f"{self.title}: {self.kind}s collapsed{by_module}" + (f", {len(expanded)} expanded" if expanded else "")
        return boxes.dot(self.graph, title, marked=marked, **style)
