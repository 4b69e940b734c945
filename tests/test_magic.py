"""%%fcompile in a fresh IPython InteractiveShell: names, results, docs, short errors, the view."""

from __future__ import annotations

import html

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
    assert len(shown) == 1 and "data:image/svg+xml;base64," in shown[0]["text/html"]
    view = magics(shell).last_view
    assert view.tab_titles == ("Capture", "Graph", "Autograd", "Primitives", "Fusion", "Kernels", "Compare", "Memory",
                               "Roofline", "Timing", "Summary", "Stepper", "What-if")
    assert "__fcompile_value" not in view.sections["Graph"]  # our helper names stay out of the user's graph
    assert "data:image/svg+xml;base64," in view.html()


def test_what_if_recompiles_the_cell_without_touching_the_notebook(shell):
    with capture_output():
        result = shell.run_cell("%%fcompile --repeats 2 --backend cpp\n"
                                "s = torch.softmax(x * 2, -1)\n"
                                "m = s.amax(-1)")
    assert result.success, result.error_in_exec
    before = {name: shell.user_ns[name].clone() for name in ("s", "m")}
    answer = magics(shell).last_view.what_if(repeats=0, fusion=False)
    assert answer.matches_eager and answer.after.kernels > answer.before.kernels
    assert answer.after_options.backend == "cpp" and not answer.after_options.fusion
    for name, value in before.items():  # the recompiled cell ran on copies and wrote nothing back
        torch.testing.assert_close(shell.user_ns[name], value)


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
    assert magics(shell)._compiled == first and len(first) == 1
    torch.testing.assert_close(shell.user_ns["q"], torch.sigmoid(shell.user_ns["x"]) * 3)


def test_an_edit_of_the_compilers_source_compiles_the_cell_again(shell, tmp_path, monkeypatch):
    # An editable install keeps its version number when its files change: the cache key hashes them.
    from explorer import magic

    (tmp_path / "compiler_core").mkdir()
    kernel = tmp_path / "compiler_core" / "codegen.py"
    kernel.write_text("KERNEL = 'old'\n")
    roots = (tmp_path / "compiler_core",)
    before = magic.source_hash(roots)
    assert magic.source_hash(roots) == before  # nothing changed: the same hash (from the files' stats)
    kernel.write_text("KERNEL = 'edited'\n")
    edited = magic.source_hash(roots)
    assert edited != before
    (tmp_path / "compiler_core" / "notes.txt").write_text("not source")
    assert magic.source_hash(roots) == edited
    assert magic.source_hash() == magic.source_hash()  # the real tree: stable between calls

    cell = "%%fcompile --no-view\nq = torch.cos(x) + 1"
    assert shell.run_cell(cell).success
    first = dict(magics(shell)._compiled)
    monkeypatch.setattr(magic, "source_hash", lambda: "edited")
    assert shell.run_cell(cell).success
    compiled = magics(shell)._compiled
    assert len(compiled) == 2 and set(first) < set(compiled)  # compiled again under a new key
    torch.testing.assert_close(shell.user_ns["q"], torch.cos(shell.user_ns["x"]) + 1)


def test_line_magic(shell):
    result = shell.run_cell("%fcompile --no-view --backend cpp w = x * 2 - 1")
    assert result.success, result.error_in_exec
    torch.testing.assert_close(shell.user_ns["w"], shell.user_ns["x"] * 2 - 1)


def test_docs_show_the_cell_magic_and_its_options(shell):
    doc = shell.find_cell_magic("fcompile").__doc__
    assert "%%fcompile" in doc
    for option in ("--backend", "--mode", "--train", "--dynamic", "--compare", "--no-view", "--force", "--debug",
                   "-o VAR", "--repeats", "--kernels-for"):
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
    entry, = magics(shell)._compiled.values()
    compiled = entry.compiled
    breaks = compiled.session.breaks
    assert [(b.filename.startswith("<fcompile cell"), b.lineno) for b in breaks] == [(True, 2)], breaks
    assert compiled.session.recompiles == [] and compiled.session.stats["graphs"] == 1


# ---- options: -o, --force and the cache, --debug, --train, --dynamic, --compare, bad options ----

def test_output_stores_the_session_and_a_rerun_reuses_the_view(shell):
    cell = "%%fcompile --repeats 1 --kernels-for cpp -o sess\nr = torch.tanh(x) * 2"
    with capture_output():
        assert shell.run_cell(cell).success
    session = shell.user_ns["sess"]
    assert session.stats["kernel_count"] >= 1 and session is magics(shell).last_view.session
    first_view = magics(shell).last_view
    shell.run_cell("x = torch.randn(8, 32)")  # new values, same shape: the cached compilation and view
    with capture_output():
        assert shell.run_cell(cell).success
    assert magics(shell).last_view is first_view
    torch.testing.assert_close(shell.user_ns["r"], torch.tanh(shell.user_ns["x"]) * 2)  # but values are new
    with capture_output():
        assert shell.run_cell(cell.replace("-o sess", "-o sess --force")).success
    assert magics(shell).last_view is not first_view  # --force compiles and measures again
    assert shell.user_ns["sess"] is not session


def test_a_new_shape_recompiles_and_the_capture_tab_says_which_guard_failed(shell):
    cell = "%%fcompile --repeats 0 --kernels-for cpp\nr = torch.relu(x) + 1"
    with capture_output():
        assert shell.run_cell(cell).success
        first_view = magics(shell).last_view
        shell.run_cell("x = torch.randn(5, 7)")
        assert shell.run_cell(cell).success
    view = magics(shell).last_view
    assert view is not first_view and view.session.recompiles, "a new shape must recompile (dynamic=False)"
    capture = view.sections["Capture"]
    assert "the guard that failed" in capture
    assert html.escape(view.session.recompiles[0].reason) in capture


def test_debug_shows_the_traceback_and_plain_errors_do_not(shell):
    bad = "q = x @ torch.ones(5, 5)\nq"
    short = shell.run_cell(f"%%fcompile --no-view\n{bad}").error_in_exec
    assert len(short._render_traceback_()) == 1
    with capture_output():
        result = shell.run_cell(f"%%fcompile --no-view --debug\n{bad}")
    lines = result.error_in_exec._render_traceback_()
    assert lines[0].startswith("FcompileError: line 1 of the cell raised RuntimeError")
    assert any("Traceback (most recent call last)" in line for line in lines)


@pytest.mark.parametrize("options, words", [
    ("-o 1x", "give a Python name"),
    ("--repeats -2", "give 0"),
    ("--kernels-for cuda", "unknown backend cuda"),
])
def test_bad_options_give_a_short_error_with_a_hint(shell, options, words):
    result = shell.run_cell(f"%%fcompile --no-view {options}\nz = x + 1")
    assert isinstance(result.error_in_exec, FcompileError) and words in str(result.error_in_exec)
    assert "z" not in shell.user_ns


def test_train_compiles_the_backward_and_fills_gradients(shell):
    shell.run_cell("torch.manual_seed(0)\nlin = torch.nn.Linear(32, 4)")
    with capture_output():
        result = shell.run_cell("%%fcompile --train --repeats 1 --kernels-for cpp -o s\nout = torch.tanh(lin(x))")
    assert result.success, result.error_in_exec
    ns = shell.user_ns
    assert ns["s"].graphs[0].backward is not None  # the backward graph went through our compiler
    expected = torch.nn.Linear(32, 4)
    expected.load_state_dict(ns["lin"].state_dict())
    torch.tanh(expected(ns["x"])).square().mean().backward()
    torch.testing.assert_close(ns["lin"].weight.grad, expected.weight.grad)
    assert magics(shell).last_view.exploration.train


def test_dynamic_compiles_once_for_two_shapes(shell):
    cell = "%%fcompile --no-view --dynamic -o s\nr = torch.sigmoid(x) * 2"
    assert shell.run_cell(cell).success
    shell.run_cell("x = torch.randn(5, 32)")
    assert shell.run_cell(cell).success
    torch.testing.assert_close(shell.user_ns["r"], torch.sigmoid(shell.user_ns["x"]) * 2)
    session = shell.user_ns["s"]
    assert session.recompiles == []
    # Dynamo's one symbolic graph, compiled by us once (symbolic kernels), served the new size
    assert session.stats["fallback_graphs"] == 0 and session.kernels, session.messages
    assert session.graphs[0].symbolic and session.graphs[0].sizes


@pytest.mark.slow
def test_compare_inductor_fills_the_compare_tab(shell):
    with capture_output():
        result = shell.run_cell("%%fcompile --compare inductor --repeats 2 --kernels-for cpp\n"
                                "r = torch.softmax(x * 2, -1)")
    assert result.success, result.error_in_exec
    view = magics(shell).last_view
    program = view.exploration.inductor
    assert program is not None
    if program.modules:  # a C++ compiler is there: Inductor's kernels are shown and it was timed
        assert program.kernels and "inductor" in view.exploration.timing.samples
        assert program.kernels[0].name in view.sections["Compare"]
    else:
        assert program.note in html.unescape(view.sections["Compare"])


def test_config_sets_defaults_that_a_cells_own_option_overrides(shell):
    result = shell.run_cell('%config FcompileMagics.backend = "triton"\n%config FcompileMagics.repeats = 0')
    assert result.success, result.error_in_exec
    assert magics(shell).backend == "triton" and magics(shell).repeats == 0
    with capture_output():
        assert shell.run_cell("%%fcompile -o s1\ny = torch.relu(x) + 1").success
    s1 = shell.user_ns["s1"]
    assert s1.kernels and all(k.backend == "triton" for k in s1.kernels)
    torch.testing.assert_close(shell.user_ns["y"], torch.relu(shell.user_ns["x"]) + 1)
    assert magics(shell).last_view.exploration.timing is None  # repeats 0: not timed
    with capture_output():
        assert shell.run_cell("%%fcompile --backend cpp -o s2\nz = torch.relu(x) * 3").success
    assert all(k.backend == "cpp" for k in shell.user_ns["s2"].kernels)
    torch.testing.assert_close(shell.user_ns["z"], torch.relu(shell.user_ns["x"]) * 3)
    # A setting outside the allowed values is refused (traitlets) and the old one stays.
    with capture_output():
        shell.run_cell('%config FcompileMagics.backend = "cuda"')
    assert magics(shell).backend == "triton"
