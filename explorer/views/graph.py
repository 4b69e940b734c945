"""Graph view: each FX graph TorchDynamo captured, drawn with its nodes boxed by module, and as an
outline by module hierarchy (collapsible, searchable) for graphs too large to read as a picture."""

from __future__ import annotations

from typing import Callable, Optional

from explorer.collapse import Drawing, modules_of, overview_expansion
from explorer.exploration import Exploration
from explorer.hierarchy import ModuleGroup, graph_tree, module_clusters
from explorer.printed import printed
from explorer.render.code import highlight_code
from explorer.render.html import Markup, details, esc, plural, table
from explorer.render.svg import dot_to_svg, start_layout

OPEN_BELOW = 40  # outlines of graphs with fewer nodes start open


def render(exp: Exploration) -> str:
    session = exp.session
    if not session.graphs:
        return '<p class="fxe-note">Nothing was captured: the program ran no tensor operations.</p>'
    parts = []
    if len(session.graphs) > 1:
        parts.append(f'<p class="fxe-note">Graph breaks split the program into {len(session.graphs)} graphs; '
                     "the Capture tab says where and why.</p>")
    for record in session.graphs:
        captured = record.captured
        graph = captured.graph_module.graph
        parts.append(f"<h3>Captured graph {captured.index}: {plural(captured.op_count, 'op')}</h3>")
        drawing = graph_drawing(captured)
        parts.append(drawing_html(drawing))
        tree = graph_tree(graph)
        if tree.children:
            parts.append(details(f"outline by module ({plural(tree.count(), 'op')}; expand a module to see its "
                                 "ops; your browser's find searches it)", outline_html(tree), open_=True))
        if record.prims is not None:
            # Drawn once, in the Fusion tab, boxed by kernel (unboxed, dot takes seconds on a GPT-2 block).
            parts.append(details("after decomposition into primitives (ATen; the Fusion tab draws this graph)",
                                 highlight_code(printed(record.prims), "python")))
    return "".join(parts)


def graph_drawing(captured) -> Drawing:
    """The captured graph's drawing: modules collapsed to an overview, boxed by module when expanded."""
    graph = captured.graph_module.graph
    clusters = module_clusters(graph)
    return Drawing(f"captured graph {captured.index}", graph, tuple(modules_of(graph)), overview_expansion(graph),
                   "module", (("clusters", clusters),))


# The widget replaces what lies between these markers with its own drawing, which expands.
DRAWING_START, DRAWING_END = "<!-- drawing -->", "<!-- /drawing -->"


def drawing_html(drawing: Drawing) -> str:
    """A large graph collapsed (modules or kernels as boxes), every node folded below; a small one whole."""
    graph = drawing.graph
    if not drawing.collapses:
        return DRAWING_START + picture_pane(drawing.dot(), drawing.title) + DRAWING_END
    boxes = drawing.overview_boxes
    if drawing.kind == "module":
        what = "a collapsed module (its ops counted)"
    elif boxes.module_types:
        what = "a module (its kernels counted) or one kernel (its ops counted)"
    else:
        what = "one kernel (its ops counted)"
    note = (f'<p class="fxe-note">{plural(len(graph.nodes), "node")} drawn as {boxes.drawn_count(graph)} '
            f"shapes: a double-bordered box is {what}, and the widget expands it. Every node is drawn below, "
            "folded.</p>")
    full = details(f"every node ({plural(len(graph.nodes), 'node')}, boxed by {drawing.kind}; the pane scrolls)",
                   picture_pane(drawing.dot(every_node=True), drawing.title))
    return DRAWING_START + note + picture_pane(drawing.dot(), drawing.title) + full + DRAWING_END


def start_drawing(drawing: Drawing) -> None:
    """Start Graphviz on the pictures `drawing_html` shows (every node, folded, the largest; then the first
    picture) so they are laid out while other tabs render; `drawing_html` picks them up. Laid out when the
    tab renders, a 12-layer GPT-2 training step's first pictures kept it waiting 0.14 s."""
    if drawing.collapses:
        start_layout(drawing.dot(every_node=True), drawing.title)
    start_layout(drawing.dot(), drawing.title)


def picture_pane(dot: str, alt: str) -> str:
    """The graph at its natural size, scrolling inside a pane (the widget adds a zoom control)."""
    return f'<div class="fxe-graph">{dot_to_svg(dot, alt=alt)}</div>'


def outline_html(tree: ModuleGroup, rows: Optional[Callable[[list], str]] = None, depth: int = 0) -> str:
    """Nested <details>, one per module (its type and how many items it holds), items as a table."""
    rows = rows or node_table
    parts = [rows(tree.items)] if tree.items else []
    for child in tree.children:
        summary = f"{child.path} ({child.type_name}): {plural(child.count(), 'op')}"
        parts.append(details(summary, f'<div style="margin-left:14px">{outline_html(child, rows, depth + 1)}</div>',
                             open_=tree.count() < OPEN_BELOW))
    return "".join(parts)


def node_table(items: list) -> str:
    with_kernels = any(i.kernel for i in items)
    headers = ["node", "op", "shape"] + (["kernel"] if with_kernels else [])
    body = [(Markup(f"<code>{esc(i.name)}</code>"), i.op, i.shape) + ((i.kernel or "-",) if with_kernels else ())
            for i in items]
    return table(headers, body)
