"""Graph view: each FX graph TorchDynamo captured, drawn, with its readable code underneath."""

from __future__ import annotations

from explorer.exploration import Exploration
from explorer.render.code import highlight_code
from explorer.render.html import details, esc, plural
from explorer.render.svg import dot_to_svg


def render(exp: Exploration) -> str:
    session = exp.session
    if not session.graphs:
        return '<p class="fxe-note">Nothing was captured: the program ran no tensor operations.</p>'
    parts = []
    if len(session.graphs) > 1:
        parts.append(f'<p class="fxe-note">Graph breaks split the program into {len(session.graphs)} graphs; '
                     "the Summary tab says where and why.</p>")
    for record in session.graphs:
        captured = record.captured
        inputs = "".join(f"<li><code>{esc(i)}</code></li>" for i in captured.inputs)
        parts.append(f"<h3>Captured graph {captured.index}: {plural(captured.op_count, 'op')}</h3><ul>{inputs}</ul>")
        parts.append(f'<div class="fxe-graph">{dot_to_svg(captured.to_dot())}</div>')
        code = captured.graph_module.print_readable(print_output=False)
        parts.append(details("the graph as Python (FX GraphModule)", highlight_code(code, "python")))
        if captured.guards:
            parts.append(details(f"{len(captured.guards)} guards (when this graph is reused)",
                                 f"<pre>{esc(chr(10).join(captured.guards))}</pre>"))
        if record.prims is not None:
            parts.append(details("after decomposition into primitives (ATen)",
                                 f'<div class="fxe-graph">{dot_to_svg(record.prims.to_dot())}</div>'
                                 + highlight_code(record.prims.pretty(), "python")))
    return "".join(parts)
