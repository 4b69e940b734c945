"""Fusion view: the primitive graph with its nodes boxed and coloured by the kernel that computes them.
A large graph is drawn collapsed: its kernels in boxes of the modules they sit in (a GPT-2 training
step's forward and backward: a box per block); the widget opens a module to its kernels, a kernel to
its ops (explorer/collapse.py).

Provenance: every FusionGroup lists `origins`, the FX node names of the primitive (ATen) graph it
computes, so each kernel can be drawn as a cluster around its source ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler_core.session import GraphRecord
from explorer.collapse import COLLAPSE_ABOVE, Drawing, kernel_boxes, kernel_stacks, open_largest
from explorer.decisions import decision_rows, decision_table, fx_names
from explorer.exploration import Exploration
from explorer.hierarchy import ModuleGroup, NodeRow, common_stack, module_tree, node_rows, recorded_stack
from explorer.printed import printed
from explorer.profiling import is_copy
from explorer.render.html import Markup, details, esc, message, plural, table
from explorer.views.graph import drawing_html
from explorer.why import refusals

# Light fills (the tab10 palette's pastel half), so labels stay readable on top.
PALETTE = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
           "#9edae5", "#c7c7c7")
EXTERN_COLOR = "#e0e0e0"


def render(exp: Exploration) -> str:
    parts = []
    for record in exp.session.all_records():
        title = f"graph {record.captured.index}" + (" (backward)" if _is_backward(exp, record) else "")
        parts.append(f"<h3>Kernels of {esc(title)}</h3>")
        parts.append(render_record(record, title))
    return "".join(parts) or '<p class="fxe-note">Nothing was captured.</p>'


def render_record(record: GraphRecord, title: str) -> str:
    if record.prims is None or record.schedule is None:
        why = record.fallback_reason or "the compiler did not reach the fusion stage"
        return message(f"No fusion to show: {why}")
    drawing = kernel_drawing(record, title)
    schedule = record.schedule
    names = fx_names(record.loops)
    rows = [(Markup(f"<code>{esc(g.name)}</code>"), group_kind(record, g), len(g.nodes), ", ".join(g.origins),
             _names(g.materialized, names), _names(g.internal, names)) for g in schedule.groups]
    copies = sum(1 for g in schedule.groups if is_copy(record.loops, g))
    copy_note = f" ({plural(copies, 'kernel')} of them only copy: no arithmetic)" if copies else ""
    parts = [
        f"<p>{plural(schedule.kernel_count, 'kernel')}{copy_note} from {plural(len(record.loops.nodes), 'loop node')}. "
        "Ops in one box run in one kernel: their intermediate values stay in registers.</p>",
    ]
    if record.part == "backward" and any(drawing.kernel_stacks.values()):
        parts.append('<p class="fxe-note">A backward kernel sits in the module whose forward ops it differentiates '
                     "(AOTAutograd records their module on each gradient op; sums of gradients record none and "
                     "go with the rest of their kernel).</p>")
    parts.append(drawing_html(drawing))
    tree = kernel_tree(record)
    if tree.children:
        parts.append(details(f"kernels by module ({plural(len(schedule.groups), 'kernel')}; expand a module, then a "
                             "kernel, to see its ops)", kernel_outline_html(tree), open_=True))
    parts += [
        table(["kernel", "kind", "loop nodes", "computes (FX nodes)", "writes to memory", "kept in registers"],
              rows, numeric=(2,)),
    ]
    if schedule.decisions:
        # Every row, in the scheduler's order: the widget filters and sorts them (explorer/decisions.py).
        parts.append(details(f"{len(schedule.decisions)} fusion decisions (every pair considered, with the reason; "
                             "the widget filters and sorts them)", decision_table(decision_rows(record))))
    refused = refusals(record)
    if refused:
        rows = [(Markup(f"<code>{esc(r.a)}</code>"), Markup(f"<code>{esc(r.b)}</code>"), ", ".join(r.kernels_a),
                 ", ".join(r.kernels_b), r.reason) for r in refused]
        parts.append(details(f"why not in one kernel: {plural(len(refused), 'pair')} of FX nodes the scheduler "
                             "refused to fuse (view.why_fused(a, b) answers for any two)",
                             table(["FX node", "FX node", "its kernel", "the other's kernel", "refused because"],
                                   rows)))
    if record.loops is not None:
        parts.append(details("loop IR (one loop nest per node)", f"<pre>{esc(printed(record.loops))}</pre>"))
    if record.memory is not None:
        memory = record.memory
        parts.append(details(f"memory plan: peak {memory.peak_bytes_planned:,} bytes planned, "
                             f"{memory.peak_bytes_unplanned:,} without reuse", f"<pre>{esc(memory.pretty())}</pre>"))
    return "".join(parts)


def kernel_drawing(record: GraphRecord, title: str) -> Drawing:
    """The primitive graph boxed (and coloured) by kernel. A large graph collapses to a box per kernel,
    and its kernels to a box per module while there are too many to draw: GPT-2 a box per block."""
    graph = record.prims.graph_module.graph
    clusters, colors = kernel_clusters(record)
    stacks = kernel_stacks(graph, clusters)
    modules = tuple(dict.fromkeys(path for stack in stacks.values() for path, _ in stack))
    kernels = tuple(dict.fromkeys(clusters.values()))
    overview = (open_largest(graph, lambda expanded: kernel_boxes(graph, clusters, stacks, expanded))
                if len(graph.nodes) > COLLAPSE_ABOVE else frozenset())
    style = (("labels", record.prims.node_prims), ("clusters", clusters), ("colors", colors))
    return Drawing(title, graph, modules + kernels, overview, "kernel", style, stacks)


@dataclass(frozen=True)
class KernelItem:
    """One kernel (fusion group) in the module outline, with the primitive ops it computes."""

    name: str
    kind: str
    ops: tuple[NodeRow, ...]

    def matches(self, query: str) -> bool:
        return query.lower() in self.name.lower() or any(op.matches(query) for op in self.ops)


def kernel_tree(record: GraphRecord) -> ModuleGroup:
    """Kernels placed in the innermost module that holds every op they compute (as the drawing places
    them: ops that record no module, such as a backward's gradient sums, left out)."""
    graph = record.prims.graph_module.graph
    clusters, _ = kernel_clusters(record)
    rows = {row.name: row for row, _ in node_rows(graph, clusters, record.prims.node_prims)}
    nodes = {node.name: node for node in graph.nodes}
    items = []
    for group in record.schedule.groups:
        ops = [o for o in group.origins if o in rows]
        items.append((KernelItem(group.name, group_kind(record, group), tuple(rows[o] for o in ops)),
                      common_stack(recorded_stack(nodes[o]) for o in ops)))
    return module_tree(items)


def kernel_outline_html(tree: ModuleGroup) -> str:
    parts = []
    for item in tree.items:
        ops = table(["op", "primitive", "shape", "module"],
                    [(Markup(f"<code>{esc(o.name)}</code>"), o.op, o.shape, o.module or "-") for o in item.ops])
        parts.append(details(f"{item.name} ({item.kind}): {plural(len(item.ops), 'op')}", ops))
    for child in tree.children:
        parts.append(details(f"{child.path} ({child.type_name}): {plural(child.count(), 'kernel')}",
                             f'<div style="margin-left:14px">{kernel_outline_html(child)}</div>',
                             open_=tree.count() < 12))
    return "".join(parts)


def _names(buffers, names: dict[str, str]) -> str:
    return ", ".join(names.get(b, b) for b in buffers) or "-"


def group_kind(record: GraphRecord, group) -> str:
    if not is_copy(record.loops, group):
        return group.kind
    constants = {b.name for b in record.loops.inputs if b.kind == "constant"}
    reads = {b for n in group.nodes for b in record.loops.node(n).input_buffers}
    return "copy of a constant" if reads and reads <= constants else "copy (no arithmetic)"


def kernel_clusters(record: GraphRecord) -> tuple[dict[str, str], dict[str, str]]:
    """FX node name -> kernel name, and -> colour; a node computed by several kernels goes with the first."""
    clusters: dict[str, str] = {}
    colors: dict[str, str] = {}
    kernel_index = 0
    for group in record.schedule.groups:
        if group.kind == "extern":
            # Repeated calls of one op are numbered in their names ("extern_aten.mm.default#2"): one box each.
            label, color = f"extern: {group.name}", EXTERN_COLOR
        else:
            label, color = group.name, PALETTE[kernel_index % len(PALETTE)]
            kernel_index += 1
        for origin in group.origins:
            if origin not in clusters:
                clusters[origin] = label
                colors[origin] = color
    return clusters, colors


def _is_backward(exp: Exploration, record: GraphRecord) -> bool:
    return all(record is not g for g in exp.session.graphs)
