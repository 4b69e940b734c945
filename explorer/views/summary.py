"""Summary view: counts, graph breaks with file:line, what fell back to eager and why, bytes moved."""

from __future__ import annotations

from explorer.exploration import Exploration
from explorer.render.html import Markup, details, esc, message, table


def render(exp: Exploration) -> str:
    session, stats = exp.session, exp.session.stats
    parts = [table((), [
        ("backend", exp.backend),
        ("graphs captured", stats["graphs"]),
        ("graph breaks", stats["graph_breaks"]),
        ("recompiles", stats["recompiles"]),
        ("kernels", stats["kernel_count"]),
        ("extern calls (run by PyTorch: matmul, conv, ...)", stats["extern_calls"]),
        ("graphs that fell back to eager", stats["fallback_graphs"]),
        ("ours against eager (medians)", exp.timing.headline() if exp.timing else "not timed"),
    ], numeric=(1,))]
    parts.append("<h3>Memory traffic</h3>" + traffic_html(exp.traffic))
    parts.append("<h3>Graph breaks</h3>" + breaks_html(exp))
    parts.append("<h3>Fallbacks</h3>" + fallbacks_html(exp))
    if session.recompiles:
        parts.append("<h3>Recompiles</h3><ul>"
                     + "".join(f"<li>{esc(r.pretty())}</li>" for r in session.recompiles) + "</ul>")
    return "".join(parts)


def traffic_html(traffic: dict) -> str:
    eager, fused = traffic["eager_bytes"], traffic["fused_bytes"]
    ratio = f" ({eager / fused:.1f}× less)" if fused and eager > fused else ""
    rows = [("eager PyTorch (every op reads its inputs and writes its output)", f"{eager:,}"),
            ("our fused kernels (intermediates stay in registers)", f"{fused:,}")]
    note = (f"<p>{traffic['ops_fused']} loop nodes run inside multi-op kernels; bytes moved by the fused program: "
            f"{esc(_mb(fused))} against {esc(_mb(eager))} in eager{esc(ratio)}.</p>")
    return note + table(["program", "bytes moved"], rows, numeric=(1,))


def breaks_html(exp: Exploration) -> str:
    breaks = exp.session.breaks
    if not breaks:
        return '<p class="fxe-good">None: the whole program was captured in one graph.</p>'
    rows = [(Markup(f"<code>{esc(b.location)}</code>"), b.reason, Markup(f"<code>{esc(b.source_line.strip())}</code>"))
            for b in breaks]
    return ('<p class="fxe-note">At each break TorchDynamo stops the graph, runs that line in Python, and '
            "starts a new graph; moving or removing the line joins the graphs.</p>"
            + table(["where", "why", "line"], rows))


def fallbacks_html(exp: Exploration) -> str:
    session, parts = exp.session, []
    stats = session.stats
    for record in session.all_records():
        if record.fallback_reason:
            body = message(f"Graph {record.captured.index} ran in eager PyTorch: {record.fallback_reason}")
            if record.error_traceback:
                body += details("compiler traceback (for a bug report)", f"<pre>{esc(record.error_traceback)}</pre>")
            parts.append(body)
    if stats["fallback_ops"]:
        parts.append("<p>Ops that ran in eager PyTorch instead of our kernels: "
                     + ", ".join(f"<code>{esc(op)}</code>" for op in stats["fallback_ops"]) + "</p>")
    shown = {r.fallback_reason for r in session.all_records() if r.fallback_reason}
    notes = [m for m in session.messages if not any(reason in m for reason in shown)]
    if notes:
        parts.append("".join(message(m, "fxe-note") for m in notes))
    return "".join(parts) or '<p class="fxe-good">None: every graph ran as our compiled code.</p>'


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB"
