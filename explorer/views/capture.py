"""Capture view: what TorchDynamo did with the user's code: where the graph broke and why (with the
user's line), when compiled code was thrown away and recompiled (the guard that failed), the guards
each graph is reused under, and each FX graph as Python.

    model = capture_model(exp.session)
    model.breaks[0].line, model.recompiles[0].failed_guard, model.graphs[0].guards
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler_core.session import CompileSession
from explorer.exploration import Exploration
from explorer.render.code import highlight_code
from explorer.render.html import Markup, details, esc, plural, table


@dataclass(frozen=True)
class BreakRow:
    where: str  # file:line
    reason: str
    line: str  # the user's source line


@dataclass(frozen=True)
class RecompileRow:
    number: int
    failed_guard: str


@dataclass(frozen=True)
class GraphRow:
    index: int
    op_count: int
    inputs: tuple[str, ...]
    guards: tuple[str, ...]
    code: str  # the FX GraphModule as Python
    sizes: str = ""  # captured with symbolic sizes: the concrete ones this record was compiled for
    symbolic: bool = False  # compiled once, kernels taking the sizes as arguments (`sizes`: the example's)
    size_guards: tuple[str, ...] = ()  # conditions on sizes our compiler added to Dynamo's guards


@dataclass(frozen=True)
class CaptureModel:
    breaks: tuple[BreakRow, ...]
    recompiles: tuple[RecompileRow, ...]
    graphs: tuple[GraphRow, ...]


def capture_model(session: CompileSession) -> CaptureModel:
    return CaptureModel(
        breaks=tuple(BreakRow(b.location, b.reason, b.source_line.strip()) for b in session.breaks),
        recompiles=tuple(RecompileRow(i, r.reason) for i, r in enumerate(session.recompiles, 1)),
        graphs=tuple(GraphRow(g.captured.index, g.captured.op_count, tuple(str(i) for i in g.captured.inputs),
                              g.captured.guards, g.captured.graph_module.print_readable(print_output=False),
                              g.sizes, g.symbolic, g.size_guards)
                     for g in session.graphs))


def render(exp: Exploration) -> str:
    model = capture_model(exp.session)
    parts = [f"<p>TorchDynamo captured {plural(len(model.graphs), 'graph')}, with "
             f"{plural(len(model.breaks), 'graph break')} and {plural(len(model.recompiles), 'recompile')}.</p>"]
    parts.append("<h3>Graph breaks</h3>")
    if model.breaks:
        parts.append('<p class="fxe-note">At each break Dynamo ends the graph, runs that line in plain Python, '
                     "and starts a new graph; removing or moving the line joins the graphs.</p>")
        parts.append(table(["where", "why", "your line"],
                           [(Markup(f"<code>{esc(b.where)}</code>"), b.reason, Markup(f"<code>{esc(b.line)}</code>"))
                            for b in model.breaks]))
    else:
        parts.append('<p class="fxe-good">None: the whole program was captured in one graph.</p>')
    parts.append("<h3>Recompiles</h3>")
    if model.recompiles:
        parts.append('<p class="fxe-note">Compiled code is reused only while its guards hold; each row is a call '
                     "where one failed, so the code was captured and compiled again.</p>")
        parts.append(table(["#", "the guard that failed"], [(r.number, Markup(f"<code>{esc(r.failed_guard)}</code>"))
                                                            for r in model.recompiles], numeric=(0,)))
    else:
        parts.append('<p class="fxe-good">None in this session.</p>')
    for graph in model.graphs:
        parts.append(f"<h3>Graph {graph.index}: {plural(graph.op_count, 'op')}</h3>")
        parts.append("<ul>" + "".join(f"<li><code>{esc(i)}</code></li>" for i in graph.inputs) + "</ul>")
        if graph.symbolic:
            added = ("" if not graph.size_guards else " Our compiler added these conditions on them to Dynamo's "
                     "guards (a call that breaks one is compiled again): " +
                     ", ".join(f"<code>{esc(g)}</code>" for g in graph.size_guards) + ".")
            parts.append('<p class="fxe-note">Symbolic sizes (dynamic shapes): Dynamo captured this graph once for '
                         "every size its guards allow, and our kernels take the sizes as arguments: one compilation "
                         f"serves them all. The first call had <code>{esc(graph.sizes)}</code>.{added}</p>")
        elif graph.sizes:
            parts.append('<p class="fxe-note">Symbolic sizes (dynamic shapes): Dynamo captured this graph once for '
                         "every size its guards allow. Our kernels take fixed sizes, so the graph is compiled for "
                         f"each new size when it first comes; the stages shown are for <code>{esc(graph.sizes)}</code>."
                         "</p>")
        guards = (f"<pre>{esc(chr(10).join(graph.guards))}</pre>" if graph.guards
                  else '<p class="fxe-note">Dynamo exposed no guards for this graph.</p>')
        parts.append(details(f"{plural(len(graph.guards), 'guard')} (this graph is reused while all hold)", guards,
                             open_=len(graph.guards) <= 12))
        parts.append(details("the graph as Python (FX GraphModule)", highlight_code(graph.code, "python")))
    return "".join(parts)
