"""The tour notebook: committed without outputs, executes headlessly, exports to static HTML."""

from __future__ import annotations

import base64
import html
import re

import nbformat
import pytest

from explorer.tour import TOUR_NOTEBOOK, run_tour
from explorer.views import VIEWS


def test_tour_is_committed_without_outputs():
    nb = nbformat.read(TOUR_NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    assert "widgets" not in nb.metadata


@pytest.mark.notebook
def test_tour_executes_and_exports(tmp_path):
    out = run_tour(tmp_path / "tour.html", summary=False, timeout=300)
    page = out.read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<(style|svg)\b.*?</\1>", "", page, flags=re.S)))
    assert page.count("data:image/svg+xml;base64,") >= 3  # captured graphs, fusion clusters, timing plots
    assert 'class="fxe-plot"' in page  # the timing plot
    assert 'extern "C"' in text  # a C++ kernel
    assert "@triton.jit" in text  # a Triton kernel
    pictures = "".join(base64.b64decode(d).decode("utf-8")
                       for d in re.findall(r'data:image/svg\+xml;base64,([^"]+)', page))
    assert "Saved tensors (the cut)" in text and 'id="fxe-sweep-graph-0"' in pictures  # the Autograd tab, training
    assert "FcompileError" not in text and "Traceback" not in text
    # Every explorer view in the page carries every tab (what `make demo` promises of build/tour.html).
    views = page.count('class="fxe-head"')
    assert views >= 4  # softmax, layernorm_gelu, the %%fcompile cell and the training MLP
    for title, _ in VIEWS:
        assert len(re.findall(rf'<summary class="fxe-tab-title"[^>]*>{re.escape(title)}</summary>', page)) == views
    # No widget JavaScript from a CDN: the static fallback stands in for the widgets.
    assert "application/vnd.jupyter.widget-view+json" not in page
    assert not re.search(r'<script[^>]+src="(https?:)?//', page)


@pytest.mark.notebook
def test_demo_summary_table_reports_measured_speedups():
    # What `make demo` prints after the page: the standard CPU workloads, measured now.
    from explorer.tour import format_table, summary_rows

    rows = summary_rows(repeats=3)
    table = format_table(rows)
    for name in ("layernorm_gelu", "softmax"):
        assert name in table
    for row in rows:
        assert row["kernels"] == 1
        assert row["speedup"] > 0
    # each row says it in words: faster, slower, as fast, or noisy: rerun
    assert all(any(word in line for word in ("faster", "slower", "as fast", "noisy: rerun"))
               for line in table.splitlines()[2:])
