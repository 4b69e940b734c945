"""`python -m explorer tour`: run the tour notebook headlessly, export it, summarize the CPU workloads.

    run_tour("build/tour.html")     # executes notebooks/00_tour.ipynb, writes the page, prints a table
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import nbformat

from explorer.exploration import explore_function
from explorer.measuring import compare_words
from explorer.render.notebook import notebook_to_html

REPO_ROOT = Path(__file__).resolve().parent.parent
TOUR_NOTEBOOK = REPO_ROOT / "notebooks" / "00_tour.ipynb"
KERNEL_NAME = "python3"
SUMMARY_WORKLOADS = ("layernorm_gelu", "softmax")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_tour(out: str | Path, notebook: Optional[str | Path] = None, summary: bool = True,
             timeout: int = 600, repeats: int = 10) -> Path:
    notebook = Path(notebook or TOUR_NOTEBOOK)
    if not notebook.is_file():
        raise FileNotFoundError(f"{notebook}: no such notebook (the tour runs from a checkout of the repository)")
    nb = execute_notebook(notebook, timeout=timeout)
    progress("tour: exporting to static HTML")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(notebook_to_html(nb), encoding="utf-8")
    progress(f"tour: wrote {out}")
    if summary:
        print(format_table(summary_rows(repeats=repeats)))
    return out


def execute_notebook(path: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel of the current Python, in the notebook's folder."""
    from nbclient import NotebookClient

    ensure_kernelspec()
    # The kernel inherits our environment: make this checkout importable even when not pip-installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    nb = nbformat.read(path, as_version=4)
    code_cells = sum(1 for c in nb.cells if c.cell_type == "code")
    progress(f"tour: executing {path} ({code_cells} code cells; compiling takes a while)")
    start = time.perf_counter()
    done = [0]

    def on_cell_executed(cell, cell_index, execute_reply) -> None:
        if cell.cell_type == "code":
            done[0] += 1
            progress(f"  cell {done[0]}/{code_cells} done ({time.perf_counter() - start:.1f}s)")

    client = NotebookClient(nb, timeout=timeout, kernel_name=KERNEL_NAME, on_cell_executed=on_cell_executed,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def ensure_kernelspec(name: str = KERNEL_NAME) -> None:
    """Install an ipykernel spec into this environment if Jupyter cannot find one named `name`."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        progress(f"tour: installing the Jupyter kernel spec {name!r} into {sys.prefix}")
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", name], check=True)


def summary_rows(names: Sequence[str] = SUMMARY_WORKLOADS, size: str = "full", repeats: int = 10) -> list[dict]:
    """Graphs, kernels, ops fused, bytes moved and measured speedup of the standard CPU workloads."""
    from compiler_core.bench.workloads import WORKLOADS

    rows = []
    for name in names:
        workload = WORKLOADS[name]
        dims, dtype = workload.shape("cpu", size)
        progress(f"tour: compiling and timing {name} ({'x'.join(map(str, dims))} {str(dtype).replace('torch.', '')})")
        exp = explore_function(workload.fn, workload.make_inputs("cpu", size), kernels_for=(), repeats=repeats,
                               title=name)
        stats = exp.session.stats
        rows.append({"workload": name, "graphs": stats["graphs"], "kernels": stats["kernel_count"],
                     "ops_fused": exp.traffic["ops_fused"], "eager_bytes": exp.traffic["eager_bytes"],
                     "fused_bytes": exp.traffic["fused_bytes"], "speedup": exp.timing.speedup,
                     "noisy": exp.timing.noisy,
                     "fallback_graphs": stats["fallback_graphs"]})
    return rows


def format_table(rows: list[dict]) -> str:
    headers = ("workload", "graphs", "kernels", "ops fused", "eager MB", "fused MB", "ours against eager")
    lines = [[r["workload"], str(r["graphs"]), str(r["kernels"]), str(r["ops_fused"]),
              f"{r['eager_bytes'] / 1e6:.1f}", f"{r['fused_bytes'] / 1e6:.1f}",
              against_eager(r) + (" (fell back)" if r["fallback_graphs"] else "")] for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    fmt = [h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))]
    out = ["  ".join(fmt), "  ".join("-" * w for w in widths)]
    for line in lines:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
    return "\n".join(out)


def against_eager(row: dict) -> str:
    """'1.62x faster', '1.18x slower' or 'as fast (within 2%)' in words, as the Timing tab says it; a
    noisy measurement gives 'noisy: rerun' and no ratio (it cannot support one)."""
    if row.get("noisy"):
        return "noisy: rerun"
    words = compare_words("ours", "eager", row["speedup"], 1.0)  # speedup: eager's time over ours
    return words.removeprefix("ours is ").removesuffix(" than eager").replace(" as eager", "").replace("×", "x")
