"""The explorer's views, its static HTML, its analysis helpers and `python -m explorer report`."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.analysis.dot import fx_graph_to_dot
from compiler_core.analysis.timing import compare_eager, measure
from compiler_core.analysis.traffic import bytes_moved, eager_graph_bytes
from explorer import ExplorerView, explore
from explorer.cell import CellError, cell_program
from explorer.exploration import explore_function
from explorer.render.notebook import WIDGET_VIEW, without_widgets
from explorer.report import ReportError, load_target
from explorer.tour import format_table

REPO_ROOT = Path(__file__).resolve().parent.parent
TABS = ("Capture", "Graph", "Autograd", "Primitives", "Fusion", "Kernels", "Compare", "Memory", "Roofline", "Timing",
        "Summary", "Stepper", "What-if")


def softmax(x):
    return torch.softmax(x, -1)


def layernorm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def page_text(markup: str) -> str:
    """The visible text of HTML (pygments splits source into spans; this joins it back)."""
    markup = re.sub(r"<(style|svg)\b.*?</\1>", "", markup, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


@pytest.fixture(scope="module")
def softmax_view() -> ExplorerView:
    return explore(softmax, torch.randn(16, 64), repeats=3, kernels_for=("cpp", "triton"))


# ---- analysis helpers (compiler_core/analysis) ----

def test_dot_shows_ops_shapes_and_kernel_clusters():
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    names = [n.name for n in gm.graph.nodes]
    dot = fx_graph_to_dot(gm.graph, "tiny", clusters={"relu": "kernel_0", "add": "kernel_0"},
                          colors={"relu": "#aec7e8"})
    assert dot.startswith("digraph G {") and dot.rstrip().endswith("}")
    assert 'label="tiny"' in dot
    assert "subgraph cluster_0" in dot and 'label="kernel_0"' in dot
    assert 'fillcolor="#aec7e8"' in dot
    assert all(f'"{n}"' in dot for n in names)
    assert '"x" -> "relu"' in dot


def test_captured_graph_dot_has_shapes():
    session = cc.explain(softmax, torch.randn(4, 8))
    dot = session.graphs[0].captured.to_dot()
    assert "f32[4, 8]" in dot and "softmax" in dot


def test_measure_and_compare_eager():
    samples = measure(torch.sin, (torch.randn(16),), repeats=4, warmup=1)
    assert len(samples) == 4 and all(s > 0 for s in samples)
    result = compare_eager(torch.sin, torch.cos, (torch.randn(16),), repeats=3, warmup=1)
    assert len(result["eager_s"]) == len(result["ours_s"]) == 3
    assert result["speedup"] == pytest.approx(result["eager_median_s"] / result["ours_median_s"])


def test_eager_bytes_count_every_op_round_trip():
    gm = torch.fx.symbolic_trace(lambda x: torch.sin(x).view(-1) * 2)
    torch.fx.passes.shape_prop.ShapeProp(gm).propagate(torch.randn(4, 8))
    for node in gm.graph.nodes:  # ShapeProp stores tensor_meta; the counter reads "val" like AOT graphs
        node.meta["val"] = torch.empty(node.meta["tensor_meta"].shape) if "tensor_meta" in node.meta else None
    # sin: 128 B in + 128 B out; view: nothing (a view); mul: 128 B in + 128 B out
    assert eager_graph_bytes(gm.graph) == 4 * 128


def test_fused_program_moves_fewer_bytes_than_eager():
    x, w, b = torch.randn(32, 64), torch.randn(64), torch.randn(64)
    traffic = bytes_moved(cc.explain(layernorm_gelu, x, w, b))
    # eager: layer_norm reads x, w, b and writes y; gelu reads y and writes z
    assert traffic["eager_bytes"] == (32 * 64 * 4) * 4 + 64 * 4 * 2
    assert traffic["fused_bytes"] <= traffic["eager_bytes"]
    assert set(traffic) >= {"eager_bytes", "fused_bytes", "ops_fused", "per_graph"}


# ---- explore() and its view ----

def test_explore_has_the_tabs(softmax_view):
    assert softmax_view.tab_titles == TABS
    assert list(softmax_view.sections) == list(TABS)
    tab = softmax_view.tab
    assert len(tab.children) == len(TABS)
    assert tuple(tab.titles) == TABS


def test_mimebundle_carries_widget_and_static_html(softmax_view):
    bundle = softmax_view._repr_mimebundle_()
    assert WIDGET_VIEW in bundle
    static = bundle["text/html"]
    assert "data:image/svg+xml;base64," in static
    text = page_text(static)
    for kernel in softmax_view.session.kernels:
        assert kernel.name in text
    assert "ExplorerView" in bundle["text/plain"]


def test_kernels_tab_shows_both_backends(softmax_view):
    exp = softmax_view.exploration
    assert exp.backend == "cpp"
    text = page_text(softmax_view.sections["Kernels"])
    assert "C++ / OpenMP" in text and "Triton" in text
    for backend in ("cpp", "triton"):
        kernels = exp.kernels.get(backend, ())
        assert kernels or backend in exp.kernel_notes, f"{backend}: neither kernels nor a reason"
        for kernel in kernels:
            assert kernel.backend == backend
            assert kernel.source.strip() in text  # the whole source, highlighted


def test_fusion_and_timing_tabs_draw_pictures(softmax_view):
    picture = 'class="fxe-pic"'
    assert picture in softmax_view.sections["Graph"]
    assert picture in softmax_view.sections["Timing"]  # the matplotlib plot
    record = softmax_view.session.graphs[0]
    if record.schedule is not None:
        assert picture in softmax_view.sections["Fusion"]
        for group in record.schedule.groups:
            assert group.name in page_text(softmax_view.sections["Fusion"])


def test_summary_reports_breaks_with_location():
    def with_print(x):
        y = torch.sin(x)
        print("break")
        return torch.cos(y)

    view = explore(with_print, torch.randn(8), repeats=1, kernels_for=())
    text = page_text(view.sections["Summary"])
    assert view.session.stats["graph_breaks"] >= 1
    assert "test_explorer.py:" in text  # file:line of the break
    assert "bytes moved" in text


def test_to_html_is_standalone(softmax_view, tmp_path):
    path = softmax_view.to_html(tmp_path / "sub" / "softmax.html")
    page = Path(path).read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "data:image/svg+xml;base64," in page and "<svg" not in page
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)  # nothing to fetch
    assert all(k.name in page_text(page) for k in softmax_view.session.kernels)


def test_explore_without_timing():
    view = explore(softmax, torch.randn(4, 8), repeats=0, kernels_for=())
    assert view.exploration.timing is None
    assert "Not timed" in view.sections["Timing"]


# ---- the cell -> function transform behind %%fcompile ----

def test_cell_program_inputs_outputs():
    ns = {"x": torch.randn(2), "n": 3, "torch": torch}
    program = cell_program("y = torch.relu(x)\nn = n + 1\nif False:\n    z = 1\ny * 2", ns, "<cell>")
    assert program.inputs == ("x",)
    assert program.outputs == ("y", "n", "z")
    assert program.carried == ("n",)
    assert program.has_value


@pytest.mark.parametrize("cell, words", [
    ("y = (x", "syntax error"),
    ("y = 3", "reads no tensors"),
    ("return x", "cannot `return`"),
])
def test_cell_program_refuses_with_advice(cell, words):
    with pytest.raises(CellError, match=re.escape(words)):
        cell_program(cell, {"x": torch.randn(2)}, "<cell>")


# ---- static export and reports ----

def test_without_widgets_keeps_static_fallback():
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"widgets": {"state": {}}})
    cell = nbformat.v4.new_code_cell("view")
    cell.outputs = [nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "1"},
                                                                 "text/html": "<b>static</b>"}),
                    nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "2"}})]
    nb.cells.append(cell)
    clean = without_widgets(nb)
    assert "widgets" not in clean.metadata
    assert [dict(o.data) for o in clean.cells[0].outputs] == [{"text/html": "<b>static</b>"}]
    assert WIDGET_VIEW in nb.cells[0].outputs[0].data  # the original is untouched


def test_load_target_errors_say_what_to_do(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("def fn(x):\n    return x\n")
    with pytest.raises(ReportError, match="example_inputs"):
        load_target(f"{script}:fn")
    with pytest.raises(ReportError, match="no function 'missing'"):
        load_target(f"{script}:missing")
    with pytest.raises(ReportError, match="name the function"):
        load_target(str(script))


def test_report_command_writes_standalone_html(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import torch

        def fn(x, y):
            return torch.sigmoid(x) * y + 1

        def example_inputs():
            return torch.randn(8, 32), torch.randn(8, 32)

        if __name__ == "__main__":
            raise SystemExit("the report must not run the script as __main__")
    """))
    out = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "explorer", "report", f"{script}:fn", "--out", str(out),
                           "--repeats", "2", "--kernels-for", "cpp"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = out.read_text()
    assert "data:image/svg+xml;base64," in page and "prog.py:fn" in page and "<script" not in page
    assert "wrote" in proc.stderr
    for title in TABS:  # every view, and nothing fetched from the network
        assert re.search(rf'<summary class="fxe-tab-title"[^>]*>{re.escape(title)}</summary>', page), title
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_report_command_rejects_a_bad_target(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "explorer", "report", f"{tmp_path}/nope.py:fn"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_summary_table_format():
    rows = [{"workload": "softmax", "graphs": 1, "kernels": 1, "ops_fused": 5, "eager_bytes": 50_000_000,
             "fused_bytes": 16_000_000, "speedup": 1.5, "fallback_graphs": 0}]
    table = format_table(rows).splitlines()
    assert table[0].split() == ["workload", "graphs", "kernels", "ops", "fused", "eager", "MB", "fused", "MB",
                                "ours", "against", "eager"]
    assert table[2].split() == ["softmax", "1", "1", "5", "50.0", "16.0", "1.50x", "faster"]
    # Slower is said in words, and a noisy measurement gives no ratio at all.
    slower, noisy = dict(rows[0], speedup=0.8), dict(rows[0], speedup=3.0, noisy=True)
    assert format_table([slower]).splitlines()[2].endswith("1.25x slower")
    last = format_table([noisy]).splitlines()[2]
    assert last.endswith("noisy: rerun") and "3.00" not in last


def test_kernels_view_marks_each_kernel_with_its_check():
    from explorer.views import kernels as kernels_view

    exp = explore_function(lambda x: torch.softmax(x * 2, -1).sin(), [torch.randn(8, 16)], backend="cpp",
                           repeats=0, kernels_for=("cpp",), check=True)
    checks = [c for r in exp.session.all_records() for c in r.checks]
    assert checks and all(c.ok for c in checks)
    html = kernels_view.render(exp)
    assert html.count("Checked against eager PyTorch on its real inputs: matches") == len(exp.kernels["cpp"])
    unchecked = explore_function(lambda x: x.sin(), [torch.randn(4)], backend="cpp", repeats=0, kernels_for=("cpp",))
    assert "Checked against eager" not in kernels_view.render(unchecked)


def test_kernels_tab_shows_each_rewrite_pass(softmax_view):
    # The kernel before and after every pass: what each decided, the plan as built, and the diff.
    text = page_text(softmax_view.sections["Kernels"])
    for kernels in softmax_view.exploration.kernels.values():
        for kernel in kernels:
            assert f"{kernel.name}: rewrite passes" in text
            for record in kernel.passes[1:]:
                assert record.name in text and record.summary in text
    (kernel, *_) = softmax_view.exploration.kernels["cpp"]
    assert "the plan as built, before any pass" in text and kernel.passes[0].after.splitlines()[0] in text
    assert "+# index: int32" in text  # a pass's change, as a diff line


def test_kernels_tab_shows_the_host_program_and_timing_the_compile_time_per_stage(softmax_view):
    session = softmax_view.session
    kernels = page_text(softmax_view.sections["Kernels"])
    for record in session.all_records():
        assert f"host program of graph {record.captured.index}" in kernels
        assert all(line.strip() in kernels for line in record.wrapper.source.splitlines() if line.strip())
    rows = re.findall(r"<tr><td[^>]*>([^<]+)</td><td[^>]*>([\d.]+)</td></tr>",
                      softmax_view.sections["Timing"].split("Compile time per stage", 1)[1])
    stages = dict(rows)
    assert list(stages)[:-1] == list(session.timings) and list(stages)[-1] == "total"
    assert float(stages["total"]) == pytest.approx(sum(session.timings.values()) * 1e3, abs=0.1)


def test_the_timing_view_lists_each_graphs_kernels_compiled_ahead():
    """GPU compiles log `compiled ahead: ...` per graph (runtime/parallel_compile.py); the timing view lists
    those lines by graph so "autotune" in the stage table is explained. Other tuning lines stay out."""
    from types import SimpleNamespace

    from explorer.views.timing import compiled_ahead_lines

    def record(index, part, log):
        return SimpleNamespace(captured=SimpleNamespace(index=index), part=part,
                               artifact=SimpleNamespace(tuning_log=log))

    session = SimpleNamespace(all_records=lambda: [
        record(0, "forward", ("k0: heuristic config {}", "compiled ahead: 13 kernel binaries on 16 threads in 2.15 s")),
        record(0, "backward", ("compiling ahead skipped (KeyError: 'x'); each launch compiles in line",)),
        record(1, "forward", ()), SimpleNamespace(captured=SimpleNamespace(index=2), part="forward", artifact=None)])
    assert compiled_ahead_lines(session) == [
        ("0 (forward)", "compiled ahead: 13 kernel binaries on 16 threads in 2.15 s"),
        ("0 (backward)", "compiling ahead skipped (KeyError: 'x'); each launch compiles in line")]
