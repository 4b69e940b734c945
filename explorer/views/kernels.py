"""Kernels view: the generated source of every kernel, for each backend that was asked for."""

from __future__ import annotations

from typing import Optional

from compiler_core.codegen.artifacts import KernelSource
from compiler_core.runtime.artifacts import KernelCheck
from explorer.exploration import Exploration
from explorer.render.code import highlight_code
from explorer.render.html import details, esc, message, plural

BACKEND_TITLES = {"cpp": "C++ / OpenMP (CPU)", "triton": "Triton"}


def render(exp: Exploration) -> str:
    parts = []
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
        for kernel in exp.kernels.get(backend, ()):
            parts.append(render_kernel(kernel, checks.get(kernel.name)))
        if backend == exp.backend:
            for record in exp.session.all_records():
                if record.wrapper is not None:
                    parts.append(details(f"host program of graph {record.captured.index} (allocates, launches, frees)",
                                         highlight_code(record.wrapper.source, "python")))
    return "".join(parts)


def render_kernel(kernel: KernelSource, check: Optional[KernelCheck] = None) -> str:
    facts = [f"{kernel.kind} kernel", f"computes {', '.join(kernel.origins) or '-'}"]
    if kernel.grid:
        facts.append(f"grid {kernel.grid}")
    if kernel.signature:
        facts.append(f"arguments ({', '.join(kernel.signature)})")
    return (f"<h4>{esc(kernel.name)}</h4><p class=\"fxe-note\">{esc('; '.join(facts))}</p>"
            + (_check_line(check) if check is not None else "") + highlight_code(kernel.source, kernel.backend))


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
