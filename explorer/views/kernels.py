"""Kernels view: the generated source of every kernel, for each backend that was asked for."""

from __future__ import annotations

from compiler_core.codegen.artifacts import KernelSource
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
        for kernel in exp.kernels.get(backend, ()):
            parts.append(render_kernel(kernel))
        if backend == exp.backend:
            for record in exp.session.all_records():
                if record.wrapper is not None:
                    parts.append(details(f"host program of graph {record.captured.index} (allocates, launches, frees)",
                                         highlight_code(record.wrapper.source, "python")))
    return "".join(parts)


def render_kernel(kernel: KernelSource) -> str:
    facts = [f"{kernel.kind} kernel", f"computes {', '.join(kernel.origins) or '-'}"]
    if kernel.grid:
        facts.append(f"grid {kernel.grid}")
    if kernel.signature:
        facts.append(f"arguments ({', '.join(kernel.signature)})")
    return (f"<h4>{esc(kernel.name)}</h4><p class=\"fxe-note\">{esc('; '.join(facts))}</p>"
            + highlight_code(kernel.source, kernel.backend))


def _on_cuda(exp: Exploration) -> bool:
    return any(i.device.startswith("cuda") for g in exp.session.graphs for i in g.captured.inputs)
