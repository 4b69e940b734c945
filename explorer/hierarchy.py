"""The module hierarchy of an FX graph, from `node.meta["nn_module_stack"]`: how large graphs are read.

    tree = module_tree(captured.graph_module.graph)
    tree.children[0].path, tree.children[0].type_name     # "transformer", "GPT2Model"
    [n.name for n in tree.find("attn")]                    # nodes whose name, op or module path matches

Dynamo records, for every node it captures, the stack of modules the call ran in (outermost first);
AOTAutograd copies it onto the ATen nodes, and gives a backward node the stack of the forward op it
differentiates (as `fwd_nn_module_stack`). A node lands in its innermost module; items can be any
value with a name (FX nodes for the graph view, kernels for the fusion view).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import torch

from compiler_core.analysis.dot import describe_value

# Dynamo's names for the root module: L['self'], G['model'], L['fn'] ... (the user's own variable).
_ROOT = re.compile(r"^[LG]\['[^']*'\]\.?")
Stack = tuple[tuple[str, str], ...]  # ((path, type name), ...), outermost first


@dataclass(frozen=True)
class NodeRow:
    name: str
    op: str  # the operation, as the graph picture labels it
    shape: str  # f32[1, 16, 64]
    module: str  # innermost module path ("" at the top level)
    kernel: str = ""  # the kernel computing it, where known

    def matches(self, query: str) -> bool:
        q = query.lower()
        return any(q in text.lower() for text in (self.name, self.op, self.module, self.kernel))


@dataclass
class ModuleGroup:
    path: str  # "transformer.h.0.attn"; "" for the root
    type_name: str  # "GPT2Attention"
    items: list = field(default_factory=list)  # NodeRows (or other items) directly in this module
    children: list["ModuleGroup"] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1] if self.path else "(top level)"

    def count(self) -> int:
        """Items in this module and every module below it."""
        return len(self.items) + sum(c.count() for c in self.children)

    def walk(self) -> Iterator["ModuleGroup"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, query: str) -> list:
        """Items (of this module and below) whose name, op, module path or kernel contains `query`."""
        if not query.strip():
            return []
        return [item for group in self.walk() for item in group.items
                if item.matches(query.strip()) or query.strip().lower() in group.path.lower()]

    def child(self, path: str, type_name: str) -> "ModuleGroup":
        for c in self.children:
            if c.path == path:
                return c
        made = ModuleGroup(path, type_name)
        self.children.append(made)
        return made


def module_stack(node: torch.fx.Node) -> Stack:
    """((path, type name), ...) outermost first, the root module left out; () outside any module.
    A backward node is placed in the module whose forward op it differentiates."""
    return recorded_stack(node) or ()


def recorded_stack(node: torch.fx.Node) -> Optional[Stack]:
    """module_stack, or None where the node records no module at all (a gradient accumulation, or a
    graph captured outside any module): unknown, which is not the same as the top level."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    out = []
    for value in stack.values():
        path, cls = value if isinstance(value, tuple) else (str(value), "")
        path = _ROOT.sub("", str(path))
        if not path:
            continue  # the root module itself: every node is in it
        out.append((path, getattr(cls, "__name__", str(cls))))
    return tuple(out)


def common_stack(stacks: Iterable[Optional[Stack]]) -> Stack:
    """The deepest module every recorded stack shares, unknown ones (None) left out: where a kernel
    of these nodes sits.

        common_stack([(("h.0", "Block"), ("h.0.mlp", "MLP")), (("h.0", "Block"),), None])  # (("h.0", "Block"),)
    """
    common: Optional[Stack] = None
    for stack in stacks:
        if stack is None:
            continue
        if common is None:
            common = stack
            continue
        size = 0
        while size < min(len(common), len(stack)) and common[size] == stack[size]:
            size += 1
        common = common[:size]
    return common or ()


def module_tree(items: Iterable[tuple[Any, tuple[tuple[str, str], ...]]]) -> ModuleGroup:
    """Build the tree from (item, module stack) pairs, keeping the order items come in."""
    root = ModuleGroup("", "")
    for item, stack in items:
        group = root
        for path, type_name in stack:
            group = group.child(path, type_name)
        group.items.append(item)
    return root


def node_rows(graph: torch.fx.Graph, kernel_of: Optional[dict[str, str]] = None,
              labels: Optional[dict[str, str]] = None) -> list[tuple[NodeRow, tuple[tuple[str, str], ...]]]:
    """The graph's computing nodes (inputs and outputs left out) with their module stacks."""
    from compiler_core.analysis.dot import _operation  # the same operation text as the picture

    kernel_of, labels = kernel_of or {}, labels or {}
    rows = []
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        stack = module_stack(node)
        rows.append((NodeRow(name=node.name, op=labels.get(node.name) or _operation(node),
                             shape=describe_value(node.meta.get("val", node.meta.get("example_value"))),
                             module=stack[-1][0] if stack else "", kernel=kernel_of.get(node.name, "")), stack))
    return rows


def graph_tree(graph: torch.fx.Graph, kernel_of: Optional[dict[str, str]] = None,
               labels: Optional[dict[str, str]] = None) -> ModuleGroup:
    return module_tree(node_rows(graph, kernel_of, labels))


def module_clusters(graph: torch.fx.Graph, depth: int = 4) -> dict[str, str]:
    """Node name -> module path cut to `depth` parts (for boxing the picture by module)."""
    clusters = {}
    for node in graph.nodes:
        stack = module_stack(node)
        if stack:
            clusters[node.name] = ".".join(stack[-1][0].split(".")[:depth])
    return clusters
