"""%%fcompile in a fresh IPython InteractiveShell: names, results, docs, short errors, the view."""

from __future__ import annotations

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from explorer.magic import FcompileError, FcompileMagics


@pytest.fixture()
def shell():
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    shell.run_cell("import torch\nimport torch.nn.functional as F\nx = torch.randn(8, 32)\nn = 3")
    result = shell.run_cell("%load_ext explorer")
    assert result.success
    yield shell
    InteractiveShell.clear_instance()


def magics(shell) -> FcompileMagics:
    return shell.magics_manager.registry["FcompileMagics"]


def test_cell_names_stay_and_value_is_the_result(shell):
    with capture_output() as captured:
        result = shell.run_cell("%%fcompile --repeats 2\n"
                                "h = torch.softmax(x, -1)\n"
                                "n = n + 1\n"
                                "y = h * 2\n"
                                "y.sum()")
    assert result.success, result.error_in_exec
    ns = shell.user_ns
    torch.testing.assert_close(ns["h"], torch.softmax(ns["x"], -1))
    torch.testing.assert_close(ns["y"], ns["h"] * 2)
    assert ns["n"] == 4  # a non-tensor name the cell updates is carried in and written back
    torch.testing.assert_close(result.result, ns["y"].sum())
    # The explorer view is displayed after the cell's value, widget and static HTML together.
    shown = [o.data for o in captured.outputs if "ExplorerView" in o.data.get("text/plain", "")]
    assert len(shown) == 1 and "<svg" in shown[0]["text/html"]
    view = magics(shell).last_view
    assert view.tab_titles == ("Graph", "Autograd", "Fusion", "Kernels", "Memory", "Roofline", "Timing", "Summary")
    assert "__fcompile_value" not in view.sections["Graph"]  # our helper names stay out of the user's graph
    assert "<svg" in view.html()


def test_no_view_and_no_value(shell):
    with capture_output() as captured:
        result = shell.run_cell("%%fcompile --no-view\nz = torch.relu(x) + 1")
    assert result.success, result.error_in_exec
    assert result.result is None
    torch.testing.assert_close(shell.user_ns["z"], torch.relu(shell.user_ns["x"]) + 1)
    assert not captured.outputs


def test_running_a_cell_again_reuses_its_compilation(shell):
    cell = "%%fcompile --no-view\nq = torch.sigmoid(x) * 3"
    assert shell.run_cell(cell).success
    first = dict(magics(shell)._compiled)
    shell.run_cell("x = torch.randn(8, 32)")
    assert shell.run_cell(cell).success
    assert magics(shell)._compiled == first
    torch.testing.assert_close(shell.user_ns["q"], torch.sigmoid(shell.user_ns["x"]) * 3)


def test_line_magic(shell):
    result = shell.run_cell("%fcompile --no-view --backend cpp w = x * 2 - 1")
    assert result.success, result.error_in_exec
    torch.testing.assert_close(shell.user_ns["w"], shell.user_ns["x"] * 2 - 1)


def test_docs_show_the_cell_magic_and_its_options(shell):
    doc = shell.find_cell_magic("fcompile").__doc__
    assert "%%fcompile" in doc
    for option in ("--backend", "--no-view", "--repeats", "--kernels-for"):
        assert option in doc
    with capture_output() as captured:
        shell.run_cell("%%fcompile?")
    assert "--backend" in captured.stdout


@pytest.mark.parametrize("cell, words", [
    ("q = x @ torch.ones(5, 5)\nq", "line 1 of the cell raised RuntimeError"),
    ("q = (x\n", "syntax error"),
    ("q = 3", "reads no tensors"),
    ("# only a comment", "the cell is empty"),
])
def test_bad_cell_gives_a_short_error_and_keeps_the_namespace(shell, cell, words):
    shell.run_cell("q = 'before'")
    before = dict(shell.user_ns)
    with capture_output() as captured:
        result = shell.run_cell(f"%%fcompile --no-view\n{cell}")
    assert not result.success
    error = result.error_in_exec
    assert isinstance(error, FcompileError)
    assert words in str(error)
    lines = error._render_traceback_()
    assert len(lines) == 1 and lines[0].startswith("FcompileError: ")
    assert "Traceback" not in captured.stdout + captured.stderr
    assert shell.user_ns["q"] == "before"
    assert shell.user_ns["x"] is before["x"]


def test_unload_extension(shell):
    assert shell.find_cell_magic("fcompile") is not None
    shell.run_cell("%unload_ext explorer")
    assert shell.find_cell_magic("fcompile") is None
    assert shell.find_line_magic("fcompile") is None


def test_a_training_cell_breaks_only_at_its_backward(shell):
    shell.run_cell("torch.manual_seed(0)\nmodel = torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.GELU())\n"
                   "import copy\nreference = copy.deepcopy(model)")
    result = shell.run_cell("%%fcompile --no-view --backend cpp\n"
                            "loss = model(x).square().mean()\n"
                            "loss.backward()\n"
                            "loss")
    assert result.success, result.error_in_exec
    ns = shell.user_ns
    expected = ns["reference"](ns["x"]).square().mean()
    expected.backward()
    torch.testing.assert_close(result.result, expected)
    for p, q in zip(ns["model"].parameters(), ns["reference"].parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    (_, _, compiled), = magics(shell)._compiled.values()
    breaks = compiled.session.breaks
    assert [(b.filename.startswith("<fcompile cell"), b.lineno) for b in breaks] == [(True, 2)], breaks
    assert compiled.session.recompiles == [] and compiled.session.stats["graphs"] == 1
