"""Autograd view: the joint forward+backward graph of a training step and where our partitioner cut it
(what the forward saves for the backward, what the backward recomputes, which nodes may not be
recomputed and why), and the memory/recompute trade-off over activation budgets.

    model = autograd_model(record)   # for a GraphRecord with a partition (training), else None
    model.placement                  # joint node -> "forward", "backward", "both" (recomputed) or "" (merged away)
    model.curve                      # one CurvePoint per partition.sweep entry, the budget in use marked

Read from the JointGraph (record.joint) and the Partition (record.partition), whose forward and
backward graph modules say where each joint node runs after the split. Names in the partition are
the joint's node names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import torch
from matplotlib.ticker import FuncFormatter

from compiler_core.autodiff.artifacts import PRIMAL, TANGENT, JointGraph, Partition, SavedTensor
from compiler_core.session import GraphRecord
from explorer.exploration import Exploration
from explorer.printed import printed
from explorer.render.code import highlight_code
from explorer.render.html import Markup, details, esc, message, plural, table
from explorer.render.plot import figure_to_svg, new_figure, set_title
from explorer.render.svg import dot_to_svg

COLLAPSE_AT = 80  # joint graphs with more nodes are summarised first, the full drawing in a scroll pane
# Beyond this, only the summary is drawn: Graphviz's layout grows much faster than the node count
# (a 2-layer GPT-2's joint graph, 413 nodes, took 18 s on an idle 2-core CPU and over 3 minutes on a
# busy one; the GPT-2 block of the tests, 230 nodes, about a second).
MAX_DRAWN = 300
# Fill by where a node runs after the split (the cut), as in JointGraph.to_dot's palette.
FILLS = {"forward": "#aec7e8", "backward": "#ffbb78", "both": "#aec7e8", PRIMAL: "#e8f0fe", TANGENT: "#fce8e6",
         "": "#f1f3f4", "output": "#e6f4ea"}
SAVED_COLOR, BANNED_COLOR = "#1a1a1a", "#d93025"
NO_TRAINING = ("No training graph: this program was compiled for inference only. "
               "explore(fn, *args, train=True), %%fcompile --train, or python -m explorer report script.py:fn --train "
               "compiles the "
               "forward and the backward, and this tab shows the joint graph, what the forward saves for the "
               "backward and what the backward recomputes.")


@dataclass(frozen=True)
class CurvePoint:
    """One activation budget of the partition's sweep: estimated bytes saved and FLOPs recomputed."""

    budget: float
    saved_bytes: int
    recompute_flops: int
    recomputed: int
    lifted_bans: int
    in_use: bool  # the budget this partition was made with


@dataclass(frozen=True)
class AutogradModel:
    title: str
    joint: Optional[JointGraph]
    partition: Partition
    placement: dict[str, str]  # joint node -> "forward" / "backward" / "both" / "" (or primal, tangent, output)
    curve: tuple[CurvePoint, ...]

    @property
    def monotone(self) -> bool:
        """What budget.py promises: a lower budget never saves more bytes."""
        ordered = sorted(self.curve, key=lambda p: -p.budget)
        return all(b.saved_bytes <= a.saved_bytes for a, b in zip(ordered, ordered[1:]))

    @property
    def budget_on_curve(self) -> bool:
        return any(p.in_use for p in self.curve)

    @cached_property
    def nodes(self) -> dict[str, torch.fx.Node]:
        """The joint graph's nodes by name."""
        return {n.name: n for n in self.joint.graph_module.graph.nodes} if self.joint is not None else {}


def autograd_model(record: GraphRecord, title: str = "") -> Optional[AutogradModel]:
    partition = record.partition
    if partition is None:
        return None
    curve = tuple(CurvePoint(p.budget, p.saved_bytes, p.recompute_flops, p.recomputed, p.lifted_bans,
                             p.budget == partition.budget) for p in partition.sweep)
    return AutogradModel(title or f"graph {record.captured.index}", record.joint, partition,
                         placement(record.joint, partition), curve)


def placement(joint: Optional[JointGraph], partition: Partition) -> dict[str, str]:
    """Where each joint node runs after the split. "both": a forward node the backward recomputes;
    "": in neither graph (a duplicate merged into another node before the cut, or dead code).
    Without the split graphs (AOTAutograd's partition), the joint's own roles."""
    if joint is None:
        return {}
    if partition.forward_graph is None or partition.backward_graph is None:
        return dict(joint.roles)
    computed = ("call_function", "call_method", "call_module", "get_attr")
    fwd = {n.name for n in partition.forward_graph.graph.nodes if n.op in computed}
    bwd = {n.name for n in partition.backward_graph.graph.nodes if n.op in computed}
    out = {}
    for name, role in joint.roles.items():
        if role in (PRIMAL, TANGENT, "output"):
            out[name] = role
        else:
            out[name] = "both" if name in fwd and name in bwd else "forward" if name in fwd else \
                "backward" if name in bwd else ""
    return out


# ---- the tab ------------------------------------------------------------------------------------

def render(exp: Exploration) -> str:
    models = [autograd_model(r, f"graph {r.captured.index}") for r in exp.session.graphs]
    models = [m for m in models if m is not None]
    if not models:
        return f'<p class="fxe-note">{esc(_why_no_training(exp))}</p>'
    parts = ['<p>A training step is traced as one <b>joint graph</b> (forward and backward); our partitioner '
             "cuts it: the forward hands the <b>saved</b> tensors to the backward (drawn with a bold border, "
             "their edges into the backward in red: the cut), the backward <b>recomputes</b> cheap forward nodes "
             "instead of saving them (dashed border), and nodes <b>banned</b> from recompute (red border) are "
             "saved or kept in the forward, for the reason listed.</p>"]
    for model in models:
        parts.append(graph_section(model))
    return "".join(parts)


def _why_no_training(exp: Exploration) -> str:
    if not exp.train:
        return NO_TRAINING
    failed = [r.fallback_reason for r in exp.session.graphs if (r.fallback_reason or "").startswith("AOT tracing")]
    if failed:
        return "No joint graph: the program ran in eager PyTorch: " + "; ".join(failed)
    return ("No joint graph: train=True, but no graph needed a backward (no floating-point input or parameter "
            "requires grad).")


def graph_section(model: AutogradModel) -> str:
    p = model.partition
    parts = [f"<h3>Training {esc(model.title)}: {esc(p.partitioner)}, activation_budget={p.budget:g}</h3>"]
    inputs = p.saved_bytes - p.saved_activation_bytes
    parts.append(table((), [
        ("saved for the backward", f"{plural(len(p.saved), 'tensor')}, {p.saved_bytes:,} bytes"),
        ("… of which activations (alive only because of training)", f"{p.saved_activation_bytes:,} bytes"),
        ("… of which inputs and weight views (held by the caller anyway)", f"{inputs:,} bytes"),
        ("forward nodes recomputed in the backward", len(p.recomputed)),
        ("forward nodes banned from recompute", len(p.banned)),
    ]))
    parts += [message(n, "fxe-note") for n in p.notes]
    parts.append(drawing(model))
    parts.append("<h4>Saved tensors (the cut)</h4>" + saved_table(model))
    if p.saved_symints:
        parts.append(f"<p>Saved sizes (SymInts): {esc(', '.join(p.saved_symints))}</p>")
    parts.append("<h4>Recomputed in the backward</h4>" + recomputed_html(model))
    parts.append("<h4>Banned from recompute, and why</h4>" + banned_table(model))
    parts.append("<h4>Memory against recompute, over activation budgets</h4>" + curve_html(model))
    if model.joint is not None:
        parts.append(details("the joint graph as code", highlight_code(printed(model.joint), "python")))
    parts.append(details("the partition as text", f"<pre>{esc(p.pretty())}</pre>"))
    return "".join(parts)


def _node(model: AutogradModel, name: str) -> Optional[torch.fx.Node]:
    return model.nodes.get(name)


def _op(node: Optional[torch.fx.Node]) -> str:
    if node is None:
        return "-"
    return {"placeholder": "graph input", "output": "output"}.get(node.op) or str(node.target)


def saved_table(model: AutogradModel) -> str:
    p = model.partition
    kinds = {"activation": "activation (kept alive for the backward)",
             "input": "input or weight view (held by the caller anyway)"}
    rows = [(Markup(f"<code>{esc(t.name)}</code>"), _op(_node(model, t.name)), "×".join(map(str, t.shape)) or "scalar",
             t.dtype, f"{t.bytes:,}", kinds.get(t.kind, t.kind), p.banned.get(t.name, ""))
            for t in p.saved]
    rows.append(("total", "", "", "", f"{p.saved_bytes:,}",
                 f"{p.saved_activation_bytes:,} bytes of activations", ""))
    return table(["saved tensor", "computed by", "shape", "dtype", "bytes", "kind", "not recomputed because"], rows,
                 numeric=(4,))


def recomputed_html(model: AutogradModel) -> str:
    p = model.partition
    if not p.recomputed:
        why = " (AOTAutograd's default partition recomputes nothing)" if p.partitioner != "fcompile min-cut" else ""
        return f'<p class="fxe-note">Nothing: the backward reads only saved tensors{esc(why)}.</p>'
    rows = []
    for name in p.recomputed:
        node = _node(model, name)
        value = node.meta.get("val") if node is not None else None
        shape = "×".join(str(s) for s in value.shape) if isinstance(value, torch.Tensor) else ""
        rows.append((Markup(f"<code>{esc(name)}</code>"), _op(node), shape))
    return table(["recomputed node", "op", "shape"], rows)


def banned_table(model: AutogradModel) -> str:
    banned = model.partition.banned
    if not banned:
        return '<p class="fxe-note">No forward node is banned from recompute.</p>'
    saved = {t.name for t in model.partition.saved}
    rows = [(Markup(f"<code>{esc(name)}</code>"), _op(_node(model, name)), "yes" if name in saved else "", reason)
            for name, reason in banned.items()]
    return table(["node", "op", "saved", "reason"], rows)


# ---- the trade-off curve ------------------------------------------------------------------------

def curve_html(model: AutogradModel) -> str:
    p = model.partition
    if not model.curve:
        return ('<p class="fxe-note">No sweep: this partition was not made by our min-cut, so there is no '
                "curve over activation budgets.</p>")
    parts = [f"<p>Each point is one activation budget (the fraction of soft recompute bans kept): x is the FLOPs "
             f"the backward would spend recomputing, y the bytes the forward would save, both estimated on the "
             f"joint graph. <code>cc.compile(fn, activation_budget=…)</code> picks one; this graph was cut at "
             f"{p.budget:g}.</p>"]
    if not model.monotone:
        parts.append('<p class="fxe-bad">The sweep is not monotone: a lower budget saves more bytes than a higher '
                     "one, which the partitioner promises never happens (a bug to report).</p>")
    if not model.budget_on_curve:
        parts.append(f'<p class="fxe-note">The budget in use ({p.budget:g}) is not one of the sweep\'s; the line '
                     f"marks what this partition saves ({p.saved_bytes:,} bytes).</p>")
    parts.append(curve_plot(model))
    rows = [(f"{c.budget:.2f}", f"{c.saved_bytes:,}", f"{c.saved_bytes - p.saved_bytes:+,}", f"{c.recompute_flops:,}",
             c.recomputed, c.lifted_bans, "◀ in use" if c.in_use else "") for c in model.curve]
    parts.append(table(["budget", "saved bytes", "against in use", "recompute FLOPs", "nodes recomputed",
                        "bans lifted", ""], rows, numeric=(1, 2, 3, 4, 5)))
    return "".join(parts)


def curve_plot(model: AutogradModel) -> str:
    """x: recompute FLOPs, y: saved bytes; one marker per sweep entry (group id fxe-sweep-<graph>),
    points that coincide labelled together, the budget in use ringed."""
    p = model.partition
    fig = new_figure(5.6, 3.4)
    ax = fig.add_subplot()
    ordered = sorted(model.curve, key=lambda c: -c.budget)
    xs, ys = [c.recompute_flops for c in ordered], [c.saved_bytes for c in ordered]
    ax.plot(xs, ys, color="#9aa0a6", linewidth=1, zorder=1)
    ax.scatter(xs, ys, color="#1a73e8", s=30, zorder=3, gid=f"fxe-sweep-{_slug(model.title)}")
    for c in model.curve:
        if c.in_use:
            ax.scatter([c.recompute_flops], [c.saved_bytes], s=180, facecolors="none", edgecolors="#f29900",
                       linewidths=2, zorder=4, label=f"in use (activation_budget={p.budget:g})")
    if not model.budget_on_curve:
        ax.axhline(p.saved_bytes, color="#f29900", linestyle="--", linewidth=1.2,
                   label=f"in use (activation_budget={p.budget:g})")
    labels: dict[tuple[int, int], list[str]] = {}
    for c in ordered:
        labels.setdefault((c.recompute_flops, c.saved_bytes), []).append(f"{c.budget:g}")
    for (x, y), budgets in labels.items():
        ax.annotate("budget " + ", ".join(budgets), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7)
    ax.set_xlabel("estimated recompute FLOPs in the backward")
    ax.set_ylabel("bytes saved for the backward")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _size(value)))
    ax.margins(x=0.22, y=0.15)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    set_title(ax, f"{model.title}: memory against recompute")
    return f'<div class="fxe-plot">{figure_to_svg(fig)}</div>'


def _size(nbytes: float) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text)


# ---- the drawings -------------------------------------------------------------------------------

def drawing(model: AutogradModel) -> str:
    joint = model.joint
    if joint is None:
        return '<p class="fxe-note">The joint graph was not recorded (the partition came from AOTAutograd).</p>'
    count = len(joint.roles)
    if count > MAX_DRAWN:
        return (f'<p class="fxe-note">The joint graph has {count:,} nodes: too many to draw in reasonable time (the '
                f"limit is explorer.views.autograd.MAX_DRAWN = {MAX_DRAWN}); the summary is below, and the tables "
                "and the joint graph as code list everything the cut decided.</p>"
                + f'<div class="fxe-graph">{dot_to_svg(summary_dot(model))}</div>')
    full = dot_to_svg(joint_dot(model))
    if count <= COLLAPSE_AT:
        return f'<div class="fxe-graph">{full}</div>'
    # Full size in a scroll pane: shrunk to the page's width, a graph of hundreds of nodes is unreadable.
    full = full.replace('style="max-width:100%;height:auto"', "", 1)
    return (f'<div class="fxe-graph">{dot_to_svg(summary_dot(model))}</div>'
            + details(f"the full joint graph ({count} nodes, scrolls)", f'<div class="fxe-graph">{full}</div>'))


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def joint_dot(model: AutogradModel) -> str:
    """The joint graph in two clusters, the forward graph and the backward graph after the split;
    saved values bold (their edges into the backward red: the cut), recomputed dashed, banned red."""
    joint, p = model.joint, model.partition
    where = model.placement
    saved = {t.name: t for t in p.saved}
    recomputed, banned = set(p.recomputed), dict(p.banned)
    title = (f"{model.title}: joint graph cut by {p.partitioner} (blue: forward graph, orange: backward graph; "
             "bold: saved, dashed: recomputed, red border: banned, grey: merged away)")
    lines = ["digraph joint {",
             f"  label={_dot_str(title)};",
             "  labelloc=t; fontname=Helvetica; fontsize=12; rankdir=TB; nodesep=0.25; ranksep=0.3;",
             '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
             '  edge [color="#5f6368", arrowsize=0.6];']
    clusters: dict[str, list[str]] = {"forward": [], "backward": [], "": []}
    for node in joint.graph_module.graph.nodes:
        place = where.get(node.name, "")
        cluster = "forward" if place in ("forward", "both", PRIMAL) else \
            "backward" if place in ("backward", TANGENT) else ""
        clusters[cluster].append(_node_statement(node, place, saved.get(node.name), node.name in recomputed,
                                                 banned.get(node.name)))
    for name, title in (("forward", "forward graph"), ("backward", "backward graph")):
        if clusters[name]:
            lines.append(f"  subgraph cluster_{name} {{")
            lines.append(f'    label={_dot_str(title)}; style="rounded,dashed"; color="#5f6368";')
            lines += [f"    {s}" for s in clusters[name]]
            lines.append("  }")
    lines += [f"  {s}" for s in clusters[""]]
    bwd_side = {n for n, place in where.items() if place in ("backward", "both", TANGENT)}
    for node in joint.graph_module.graph.nodes:
        for source in node.all_input_nodes:
            attrs = ""
            if source.name in saved and node.name in bwd_side:
                attrs = ' [color="#d93025", penwidth=2.2]'
            elif source.name in recomputed and node.name in bwd_side:
                attrs = " [style=dashed]"
            lines.append(f"  {_dot_str(source.name)} -> {_dot_str(node.name)}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_statement(node: torch.fx.Node, place: str, saved: Optional[SavedTensor], recomputed: bool,
                    ban: Optional[str]) -> str:
    value = node.meta.get("val")
    shape = "×".join(str(s) for s in value.shape) if isinstance(value, torch.Tensor) else ""
    op = "" if node.op in ("placeholder", "output") else str(getattr(node.target, "overloadpacket", node.target))
    marks = []
    if saved is not None:
        marks.append(f"saved {saved.bytes:,} B")
    if recomputed:
        marks.append("recomputed")
    if ban:
        marks.append("banned")
    text = "\n".join(x for x in (node.name, op if op != node.name else "", shape, ", ".join(marks)) if x)
    styles = ["rounded", "filled"] + (["dashed"] if recomputed else []) + (["dotted"] if place == "" else [])
    attrs = [f"label={_dot_str(text)}", f"fillcolor={_dot_str(FILLS.get(place, FILLS['']))}",
             f"style={_dot_str(','.join(styles))}"]
    if node.op == "placeholder":
        attrs.append("shape=ellipse")
    elif node.op == "output":
        attrs.append("shape=doubleoctagon")
    if saved is not None:
        attrs.append("penwidth=3")
    if ban:
        attrs += [f"color={_dot_str(BANNED_COLOR)}", f"tooltip={_dot_str(ban)}"]
    elif saved is not None:
        attrs.append(f"color={_dot_str(SAVED_COLOR)}")
    return f"{_dot_str(node.name)} [{', '.join(attrs)}];"


def summary_dot(model: AutogradModel) -> str:
    """The cut at a glance: inputs -> forward -> saved tensors -> backward <- tangents."""
    joint, p, where = model.joint, model.partition, model.placement
    count = {k: sum(1 for v in where.values() if v == k) for k in ("forward", "backward", "both", "")}
    largest = sorted(p.saved, key=lambda t: -t.bytes)[:8]
    saved_lines = [f"{t.name}: {'×'.join(map(str, t.shape))} {t.bytes:,} B" for t in largest]
    if len(p.saved) > len(largest):
        saved_lines.append(f"… {len(p.saved) - len(largest)} more")
    nodes = {
        "primals": (f"{plural(len(joint.primals), 'primal')}\n(inputs, parameters)", FILLS[PRIMAL], "ellipse"),
        "forward": (f"forward graph\n{count['forward'] + count['both']} joint nodes", FILLS["forward"], "box"),
        "saved": (f"saved: {plural(len(p.saved), 'tensor')}, {p.saved_bytes:,} B\n"
                  f"({p.saved_activation_bytes:,} B activations)\n" + "\n".join(saved_lines), "#ffffff", "box"),
        "backward": (f"backward graph\n{count['backward'] + count['both']} joint nodes\n"
                     f"{count['both']} recomputed from saved values", FILLS["backward"], "box"),
        "tangents": (f"{plural(len(joint.tangents), 'tangent')}\n(gradients of the outputs)", FILLS[TANGENT],
                     "ellipse"),
        "outputs": (plural(joint.num_fwd_outputs, "forward output"), FILLS["output"], "doubleoctagon"),
        "grads": ("gradients", FILLS["output"], "doubleoctagon"),
    }
    if count[""]:
        nodes["merged"] = (f"{count['']} nodes merged away\n(duplicates of others, or unused)", FILLS[""], "box")
    lines = ["digraph cut {",
             f"  label={_dot_str(f'{model.title}: the cut, collapsed')}; labelloc=t; fontname=Helvetica; "
             "fontsize=12; rankdir=TB;",
             '  node [style="rounded,filled", fontname=Helvetica, fontsize=10];',
             "  edge [fontname=Helvetica, fontsize=10];"]
    for name, (label, fill, shape) in nodes.items():
        extra = ", penwidth=3" if name == "saved" else ""
        lines.append(f"  {name} [label={_dot_str(label)}, fillcolor={_dot_str(fill)}, shape={shape}{extra}];")
    lines += ["  primals -> forward;", "  forward -> outputs;", "  forward -> saved;",
              '  saved -> backward [color="#d93025", penwidth=2.2, label="the cut"];',
              "  tangents -> backward;", "  backward -> grads;", "}"]
    return "\n".join(lines) + "\n"
