"""Kernels view: the generated source of every kernel, for each backend that was asked for, each line
annotated with the FX nodes it computes, and each kernel's FX nodes with the user's Python line.

The widget (explorer/view.py) adds provenance both ways: pick an FX node (click it in the graph
picture, or pick it from a list) and see its kernels with the lines that compute it highlighted
(`node_html`); click a generated line (or pick it) and see its FX nodes and the Python lines they
came from (`line_html`).
"""

from __future__ import annotations

from typing import Optional, Sequence

from compiler_core.codegen.artifacts import KernelSource
from compiler_core.runtime.artifacts import KernelCheck
from compiler_core.schedule.plan_passes import describe_passes
from explorer.exploration import Exploration
from explorer.provenance import NodeOrigin, Provenance, provenance
from explorer.render.clickable import clickable_code, clickable_node
from explorer.render.code import highlight_code
from explorer.render.html import Markup, details, esc, message, plural, table

BACKEND_TITLES = {"cpp": "C++ / OpenMP (CPU)", "triton": "Triton"}
FOLD_ABOVE = 8  # more kernels than this: each folded in a <details>, so the tab is a list, not one long column


def render(exp: Exploration, clickable: bool = False) -> str:
    """The tab's HTML; `clickable`: every kernel line an element a click picks (the widget's body; see
    explorer/render/clickable.py), the static views keep plain highlighted text."""
    parts = []
    prov = provenance(exp)
    backends = list(dict.fromkeys([exp.backend, *exp.kernels, *exp.kernel_notes]))
    if len(backends) > 1:
        links = ", ".join(f"{BACKEND_TITLES.get(b, b)} ({plural(len(exp.kernels.get(b, ())), 'kernel')})"
                          for b in backends)
        parts.append(f'<p class="fxe-note">Backends shown: {esc(links)}. The program ran with '
                     f"{esc(BACKEND_TITLES.get(exp.backend, exp.backend))}; the others were compiled only to "
                     "show their source.</p>")
    for backend in backends:
        parts.append(f"<h3>{esc(BACKEND_TITLES.get(backend, backend))}</h3>")
        if backend == "triton" and not _on_cuda(exp):
            parts.append('<p class="fxe-note">No GPU here: these kernels run in the Triton interpreter '
                         "(slow, for reading and testing).</p>")
        if backend in exp.kernel_notes:
            parts.append(message(exp.kernel_notes[backend]))
        checks = _checks(exp) if backend == exp.backend else {}
        kernels = exp.kernels.get(backend, ())
        if len(kernels) > FOLD_ABOVE:
            parts.append(f'<p class="fxe-note">{plural(len(kernels), "kernel")}: each folded under its name '
                         "(the widget's kernel picker shows one at a time).</p>")
        # Hundreds of folded kernels: Pygments took 1.3 s of a 12-layer GPT-2 training step's views on them.
        # The quick highlighter colours the same keywords, numbers and comments; the picker uses Pygments.
        quick = len(kernels) > FOLD_ABOVE
        for kernel in kernels:
            shown = render_kernel(kernel, checks.get(kernel.name), prov, quick=quick, clickable=clickable)
            parts.append(details(f"{kernel.name}: {kernel_summary(kernel)}", shown) if len(kernels) > FOLD_ABOVE
                         else shown)
        if backend == exp.backend:
            for record in exp.session.all_records():
                if record.wrapper is not None:
                    parts.append(details(f"host program of graph {record.captured.index} (allocates, launches, frees)",
                                         highlight_code(record.wrapper.source, "python")))
    return "".join(parts)


def kernel_summary(kernel: KernelSource) -> str:
    """One line for a folded kernel: its kind, size and what it computes."""
    more = len(kernel.origins) - 6
    origins = ", ".join(kernel.origins[:6]) + (f" and {more} more" if more > 0 else "")
    return f"{kernel.kind}, {plural(len(kernel.source.splitlines()), 'line')}, computes {origins or '-'}"


def render_kernel(kernel: KernelSource, check: Optional[KernelCheck] = None, prov: Optional[Provenance] = None,
                  quick: bool = False, clickable: bool = False) -> str:
    facts = [f"{kernel.kind} kernel", f"computes {', '.join(kernel.origins) or '-'}"]
    if kernel.grid:
        facts.append(f"grid {kernel.grid}")
    if kernel.signature:
        facts.append(f"arguments ({', '.join(kernel.signature)})")
    # Each line's FX nodes in a comment column, folded under the source as it runs: readable in static
    # HTML, where nothing can be clicked.
    annotated = (details(f"{kernel.name} with the FX nodes of each line",
                         highlight_code(kernel.annotated(), kernel.backend, quick=quick))
                 if kernel.line_origins else "")
    # The kernel IR the source was printed from: space, the plan passes' decisions, each pass over memory.
    plan = (details(f"{kernel.name}: kernel plan (the IR both code generators print)",
                    highlight_code(kernel.plan.pretty(), "plain")) if kernel.plan is not None else "")
    return (f"<h4>{esc(kernel.name)}</h4><p class=\"fxe-note\">{esc('; '.join(facts))}</p>"
            + (_check_line(check) if check is not None else "")
            + _source(kernel, kernel.backend, clickable=clickable, quick=quick)
            + annotated + plan + passes_html(kernel) + (_origins_table(kernel, prov) if prov is not None else ""))


def passes_html(kernel: KernelSource) -> str:
    """The rewrite passes over the kernel plan: what each decided, the plan as built, and each pass's
    changes to the printed plan (a diff), so a kernel can be read before and after every pass."""
    if not kernel.passes:
        return ""
    rows = [(record.name, record.summary) for record in kernel.passes[1:]]
    changed = sum(record.changed for record in kernel.passes[1:])
    body = (table(["pass", "what it did"], rows)
            + details("the plan as built, before any pass", highlight_code(kernel.passes[0].after, "plain"))
            + details("what each pass changed in the printed plan (- before, + after)",
                      highlight_code(describe_passes(kernel.passes), "plain")))
    return details(f"{kernel.name}: rewrite passes ({changed} of {len(kernel.passes) - 1} changed the plan)", body)


def _origins_table(kernel: KernelSource, prov: Provenance) -> str:
    """The kernel's FX nodes, the lines that compute them, and the user's line each came from."""
    record = prov.kernel_records.get(kernel.name)
    rows = []
    for name in kernel.origins:
        origin = _origin(prov, record, name)
        lines = ", ".join(map(str, kernel.lines_of(name))) or "-"
        rows.append((Markup(f"<code>{esc(name)}</code>"), origin.target if origin else "-", lines,
                     origin.where if origin else "-"))
    return details(f"{kernel.name}: FX nodes and your source lines",
                   table(["FX node", "op", "kernel lines", "your code"], rows))


def _origin(prov: Provenance, record: Optional[int], name: str) -> Optional[NodeOrigin]:
    try:
        return prov.node(record, name) if record is not None else None
    except KeyError:
        return None


def _source(kernel: KernelSource, backend: str, marked: Sequence[int] = (), clickable: bool = False,
            quick: bool = False) -> str:
    if clickable:
        return clickable_code(kernel.source, kernel.backend, backend, kernel.name, marked, quick=quick)
    return highlight_code(kernel.source, kernel.backend, marked, quick=quick)


def node_html(prov: Provenance, record: int, name: str, clickable: bool = False) -> str:
    """FX node `name` of record `record`: its user line, and each kernel computing it (for every backend
    shown) with those lines highlighted; an extern call says it has no generated source. `clickable`:
    the kernels' lines can be clicked (the widget's answer)."""
    origin = prov.node(record, name)
    parts = [f"<p><code>{esc(origin.node)}</code> ({esc(origin.target)}, {esc(origin.graph)}): "
             f"{esc(origin.where)}</p>"]
    if origin.extern:
        parts.append('<p class="fxe-note">An extern call (a library kernel such as a matmul): no generated source; '
                     "the host program calls it.</p>")
    for backend in prov.kernels:
        for kernel_name, lines in prov.kernels_of(record, name, backend):
            kernel = prov.kernel(backend, kernel_name)
            where = f"lines {', '.join(map(str, lines))}" if lines else "no single line (its values are inlined)"
            parts.append(f"<h4>{esc(kernel_name)} ({esc(BACKEND_TITLES.get(backend, backend))}): {esc(where)}</h4>"
                         + _source(kernel, backend, lines, clickable))
    if not origin.extern and len(parts) == 1:
        parts.append('<p class="fxe-note">No kernel computes it here (a view, or a graph that ran in eager).</p>')
    return "".join(parts)


def line_html(prov: Provenance, backend: str, kernel_name: str, line: int, clickable: bool = False) -> str:
    """Line `line` of a kernel: its FX nodes and the user's line each came from, the line highlighted.
    `clickable`: the FX nodes and the kernel's lines can be clicked (the widget's answer)."""
    found = prov.at(backend, kernel_name, line)
    kernel = prov.kernel(backend, kernel_name)
    rows = [(Markup(clickable_node(o.record, o.node) if clickable else f"<code>{esc(o.node)}</code>"), o.target,
             o.where) for o in found.nodes]
    summary = (f"<p>{esc(kernel_name)} line {line}: <code>{esc(found.code.strip())}</code> computes "
               f"{esc(', '.join(o.node for o in found.nodes) or 'nothing of the graph (loop or setup)')}</p>")
    return (summary + (table(["FX node", "op", "your code"], rows) if rows else "")
            + _source(kernel, backend, [line], clickable))


def _checks(exp: Exploration) -> dict[str, KernelCheck]:
    """The check mode's verdicts (compile(..., check=True)) by kernel name; empty when it was off.
    Forward and backward kernels have distinct names, so one map serves the whole session."""
    return {c.kernel: c for record in exp.session.all_records() for c in record.checks}


def _check_line(check: KernelCheck) -> str:
    if check.note:
        return f'<p class="fxe-note">Not checked against eager PyTorch: {esc(check.note)}</p>'
    if check.ok:
        return (f'<p class="fxe-note">Checked against eager PyTorch on its real inputs: matches '
                f"(max abs error {check.max_abs_error:.3g}).</p>")
    where = f" at {check.source_line}" if check.source_line else ""
    return message(f"Checked against eager PyTorch: WRONG, max abs error {check.max_abs_error:.3g}; first wrong "
                   f"node {check.node or '?'}{where}.")


def _on_cuda(exp: Exploration) -> bool:
    return any(i.device.startswith("cuda") for g in exp.session.graphs for i in g.captured.inputs)
