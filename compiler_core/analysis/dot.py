"""FX graph -> Graphviz DOT text (pure text: rendering to SVG is the explorer's job).

    dot = fx_graph_to_dot(gm.graph, "captured graph 0")
    dot = fx_graph_to_dot(prims.graph_module.graph, "fusion", clusters={"exp": "fused_softmax_0"})

Each node shows its FX name, its operation and the shape of the value it produces, read from
`node.meta["val"]` (AOT/FakeTensor graphs) or `node.meta["example_value"]` (Dynamo graphs).
"""

from __future__ import annotations

from typing import Any, Collection, Optional

import torch

# Short dtype names, as PyTorch prints them in graph dumps (f32[8, 16]).
_DTYPE_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}

_SHAPES = {"placeholder": "ellipse", "output": "doubleoctagon", "get_attr": "cylinder"}
_FILLS = {"placeholder": "#e8f0fe", "output": "#e6f4ea", "get_attr": "#fef7e0"}


def fx_graph_to_dot(graph: torch.fx.Graph, title: str, labels: Optional[dict[str, str]] = None,
                    clusters: Optional[dict[str, str]] = None, colors: Optional[dict[str, str]] = None,
                    collapsed: Optional[dict[str, str]] = None, box_labels: Optional[dict[str, str]] = None,
                    marked: Collection[str] = ()) -> str:
    """DOT text for an FX graph, top to bottom in execution order.

    `labels`: node name -> operation text shown instead of the node's target (e.g. its primitive).
    `clusters`: node name -> cluster name; nodes sharing a name are boxed together (one per kernel).
    `colors`: node name -> fill colour (any Graphviz colour, e.g. "#aec7e8").
    `collapsed`: node name -> box name; the nodes of a box are drawn as one node (a collapsed module
    or kernel) labelled `box_labels[box]`, its edges merged.
    `marked`: node names drawn with a thick red border (search hits; a box holding one is marked).
    """
    labels, clusters, colors = labels or {}, clusters or {}, colors or {}
    collapsed, box_labels = collapsed or {}, box_labels or {}
    if collapsed:
        return _collapsed_dot(graph, title, labels, clusters, colors, collapsed, box_labels, set(marked))
    lines = _header(title)
    nodes = list(graph.nodes)
    by_cluster: dict[str, list[str]] = {}
    unclustered: list[str] = []
    for node in nodes:
        statement = _node_statement(node, labels.get(node.name), colors.get(node.name), node.name in marked)
        if node.name in clusters:
            by_cluster.setdefault(clusters[node.name], []).append(statement)
        else:
            unclustered.append(statement)
    lines += [f"  {s}" for s in unclustered]
    lines += _clusters(by_cluster)
    for node in nodes:
        for source in node.all_input_nodes:
            lines.append(f"  {_quote(source.name)} -> {_quote(node.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _header(title: str) -> list[str]:
    return [
        "digraph G {",
        f"  label={_quote(title)}; labelloc=t; fontname=Helvetica; fontsize=14;",
        "  rankdir=TB; nodesep=0.25; ranksep=0.3;",
        '  node [shape=box, style="rounded,filled", fillcolor="#f1f3f4", fontname=Helvetica, fontsize=10];',
        "  edge [color=\"#5f6368\", arrowsize=0.6];",
    ]


def _clusters(by_cluster: dict[str, list[str]]) -> list[str]:
    lines = []
    for i, (cluster, statements) in enumerate(by_cluster.items()):
        lines.append(f"  subgraph cluster_{i} {{")
        lines.append(f'    label={_quote(cluster)}; style="rounded,dashed"; color="#5f6368"; fontsize=11;')
        lines += [f"    {s}" for s in statements]
        lines.append("  }")
    return lines


def _collapsed_dot(graph: torch.fx.Graph, title: str, labels: dict[str, str], clusters: dict[str, str],
                   colors: dict[str, str], collapsed: dict[str, str], box_labels: dict[str, str],
                   marked: set[str]) -> str:
    """One DOT node per box (at its first member's place), the other nodes as usual, edges merged."""
    def drawn(name: str) -> str:
        return f"box:{collapsed[name]}" if name in collapsed else name

    lines = _header(title)
    nodes = list(graph.nodes)
    marked_boxes = {collapsed[n] for n in marked if n in collapsed}
    by_cluster: dict[str, list[str]] = {}
    seen: set[str] = set()
    for node in nodes:
        key = drawn(node.name)
        if key in seen:
            continue
        seen.add(key)
        if node.name in collapsed:
            box = collapsed[node.name]
            attrs = [f"label={_quote(box_labels.get(box, box))}", "peripheries=2",
                     f"fillcolor={_quote(colors.get(node.name, '#e8eaed'))}"]
            if box in marked_boxes:
                attrs.append(_MARK)
            statement = f"{_quote(key)} [{', '.join(attrs)}];"
        else:
            statement = _node_statement(node, labels.get(node.name), colors.get(node.name), node.name in marked)
        # A box stands for many nodes: it goes in no cluster (a node's cluster names a part of the box).
        by_cluster.setdefault("" if node.name in collapsed else clusters.get(node.name, ""), []).append(statement)
    lines += [f"  {s}" for s in by_cluster.pop("", [])]
    lines += _clusters(by_cluster)
    edges = dict.fromkeys((drawn(source.name), drawn(node.name)) for node in nodes for source in node.all_input_nodes)
    lines += [f"  {_quote(a)} -> {_quote(b)};" for a, b in edges if a != b]
    lines.append("}")
    return "\n".join(lines) + "\n"


_MARK = 'color="#d93025", penwidth=3'


def _node_statement(node: torch.fx.Node, label: Optional[str], color: Optional[str], marked: bool = False) -> str:
    operation = label or _operation(node)
    shape = describe_value(node.meta.get("val", node.meta.get("example_value")))
    if node.op in ("placeholder", "output") and not label:
        operation = ""  # the node's shape already says it is an input or the output
    text = "\n".join(part for part in (node.name, operation if operation != node.name else "", shape) if part)
    attrs = [f"label={_quote(text)}"]
    if node.op in _SHAPES:
        attrs.append(f"shape={_SHAPES[node.op]}")
    fill = color or _FILLS.get(node.op)
    if fill:
        attrs.append(f"fillcolor={_quote(fill)}")
    if marked:
        attrs.append(_MARK)
    return f"{_quote(node.name)} [{', '.join(attrs)}];"


def _operation(node: torch.fx.Node) -> str:
    if node.op in ("placeholder", "output"):
        return node.op
    if node.op == "call_function":
        # "aten.add.Tensor" / "F.gelu" read better than "<built-in function gelu>".
        target = node.target
        module = getattr(target, "__module__", "") or ""
        name = getattr(target, "__name__", str(target))
        if module.startswith("torch._ops"):
            return str(target)
        if module.startswith(("torch.nn.functional", "torch._C._nn")):
            return f"F.{name}"
        if module == "_operator":
            return f"operator.{name}"
        if module.startswith("torch"):
            return f"torch.{name}"
        return name
    if node.op == "call_method":
        return f".{node.target}()"
    return f"{node.op} {node.target}"


def describe_value(value: Any) -> str:
    """f32[8, 16] for a tensor, a tuple of those for multiple outputs, '' when unknown."""
    if isinstance(value, torch.Tensor):
        dtype = _DTYPE_SHORT.get(value.dtype, str(value.dtype).replace("torch.", ""))
        return f"{dtype}[{', '.join(str(s) for s in value.shape)}]"
    if isinstance(value, (list, tuple)):
        parts = [describe_value(v) for v in value]
        return "(" + ", ".join(p or "-" for p in parts) + ")" if any(parts) else ""
    if isinstance(value, (int, float, bool, torch.SymInt, torch.SymFloat)):
        return str(value)
    return ""


def _quote(text: str) -> str:
    """A DOT string literal; newlines become centred line breaks."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
