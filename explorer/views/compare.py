"""Compare view: our kernels beside the code Inductor (torch.compile) generates for the same program.

    model = compare_model(exp)
    model.rows            # (what, ours, inductor): kernels, extern calls, median time per call
    model.ours[0].name, model.inductor[0].source

Inductor's program comes from its logged output code (explorer/comparing.py); times come from the
same round-robin measurement as the Timing tab, per kernel where the profiler sees the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from explorer.exploration import Exploration
from explorer.render.code import highlight_code
from explorer.render.html import Markup, details, esc, message, plural, table


@dataclass(frozen=True)
class SideKernel:
    name: str
    backend: str
    computes: str  # FX nodes (ours) or Inductor's source nodes
    source: str
    seconds: Optional[float]


@dataclass(frozen=True)
class CompareModel:
    rows: tuple[tuple[str, str, str], ...]  # (what, ours, Inductor)
    ours: tuple[SideKernel, ...]
    inductor: tuple[SideKernel, ...]
    notes: tuple[str, ...]


def compare_model(exp: Exploration) -> Optional[CompareModel]:
    """None when Inductor was not asked for."""
    program = exp.inductor
    if program is None:
        return None
    times = {}
    if exp.measured is not None:
        times = {s.name: s.seconds for s in exp.measured.ours.steps}
    ours = tuple(SideKernel(k.name, k.backend, ", ".join(k.origins), k.source, times.get(k.name))
                 for k in exp.session.kernels)
    theirs = tuple(SideKernel(k.name, k.backend, k.source_nodes or k.aten, k.source, k.seconds)
                   for k in program.kernels)
    rows = [("generated kernels", str(len(ours)), str(len(theirs)) if program.modules else "-"),
            ("extern calls (run by PyTorch)", str(exp.session.stats["extern_calls"]),
             str(len(program.extern_calls)) if program.modules else "-")]
    if exp.timing is not None:
        def median(name: str) -> str:
            if name not in exp.timing.samples:
                return "not timed"
            return f"{exp.timing.median(name) * 1e3:.4g} ms" + (" (noisy: rerun)" if exp.timing.noisy else "")

        rows.append(("median time per call", median("ours"), median("inductor")))
    notes = tuple(n for n in (program.note,) if n)
    return CompareModel(tuple(rows), ours, theirs, notes)


def render(exp: Exploration) -> str:
    model = compare_model(exp)
    if model is None:
        return ('<p class="fxe-note">Not compared. Ask for it with '
                '<code>explore(fn, *args, compare="inductor")</code>, <code>%%fcompile --compare inductor</code> '
                "or <code>python -m explorer report ... --compare inductor</code>: torch.compile (Inductor) then "
                "compiles the same program, and its kernels show here beside ours.</p>")
    parts = [table(["what", "ours", "Inductor"], model.rows, numeric=(1, 2))]
    parts += [message(n, "fxe-note") for n in model.notes]
    if model.inductor or model.ours:
        parts.append('<p class="fxe-note">Kernels in the order each program defines them; long lines scroll inside '
                     "their pane.</p>")
        parts.append('<table style="table-layout:fixed;width:100%"><thead><tr>'
                     f"<th>ours: {esc(plural(len(model.ours), 'kernel'))}</th>"
                     f"<th>Inductor: {esc(plural(len(model.inductor), 'kernel'))}</th></tr></thead><tbody><tr>"
                     f'<td class="fxe-side">{_column(model.ours)}</td>'
                     f'<td class="fxe-side">{_column(model.inductor)}</td></tr></tbody></table>')
    if exp.inductor is not None and exp.inductor.modules:
        whole = "".join(highlight_code(m, "python") for m in exp.inductor.modules)
        parts.append(details(f"Inductor's whole output code ({plural(len(exp.inductor.modules), 'module')}: "
                             "the host program with its kernels)", whole))
    return "".join(parts)


def _column(kernels: tuple[SideKernel, ...]) -> str:
    if not kernels:
        return '<p class="fxe-note">No kernels: every op is an extern call or a view.</p>'
    parts = []
    for k in kernels:
        time = f"; {k.seconds * 1e3:.4g} ms per call" if k.seconds is not None else ""
        parts.append(f"<h4>{esc(k.name)}</h4><p class=\"fxe-note\">{esc(k.backend)}; computes "
                     f"{esc(k.computes or '-')}{esc(time)}</p>" + highlight_code(k.source, k.backend))
    return Markup("".join(parts))
