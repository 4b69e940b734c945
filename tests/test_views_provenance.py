"""Provenance both ways in the Kernels tab: an FX node -> its kernel, the exact generated lines and the
user's Python line; a generated line -> its FX nodes; backward nodes name the forward line they
differentiate. Without a browser: the model, the widget's answers and the static HTML."""

from __future__ import annotations

import html
import re

import pytest
import torch

from explorer import explore
from explorer.provenance import provenance


def sin_mm_softmax(x, w):
    a = torch.sin(x) * 2
    b = a @ w
    return torch.relu(b).softmax(-1)


LINE_SIN = sin_mm_softmax.__code__.co_firstlineno + 1  # a = torch.sin(x) * 2
LINE_MM = LINE_SIN + 1


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def marked_lines(markup: str) -> list[str]:
    """The text of the lines highlight_code marked (pygments puts them in a background span)."""
    return [text(m) for m in re.findall(r'<span style="background-color: #ffffcc">(.*?)\n</span>', markup, re.S)]


@pytest.fixture(scope="module")
def view():
    return explore(sin_mm_softmax, torch.randn(8, 16), torch.randn(16, 4), backend="cpp", train=True,
                   repeats=0, kernels_for=())


def test_forward_and_backward_nodes_map_to_the_users_lines(view):
    prov = view.provenance
    sin = prov.node(0, "sin")
    assert sin.part == "forward" and sin.lineno == LINE_SIN
    assert sin.where == f"line {LINE_SIN} in sin_mm_softmax (test_views_provenance.py): a = torch.sin(x) * 2"
    backward = 1  # session.all_records(): graph 0, then its backward
    cos = prov.node(backward, "cos")  # d sin(x) / dx
    assert cos.part == "backward" and cos.lineno == LINE_SIN
    assert cos.where.startswith(f"from the backward of line {LINE_SIN} in sin_mm_softmax")
    grad_mm = [o for o in prov.nodes if o.record == backward and o.extern]
    assert grad_mm and all(o.lineno == LINE_MM and o.kernels == () for o in grad_mm)


def test_a_backward_node_without_a_stack_trace_finds_its_forward_line_by_seq_nr(view, monkeypatch):
    backward = view.session.graphs[0].backward
    cos = next(n for n in backward.prims.graph_module.graph.nodes if n.name == "cos")
    monkeypatch.delitem(cos.meta, "stack_trace")
    monkeypatch.delitem(cos.meta, "from_node", raising=False)
    origin = provenance(view.exploration).node(1, "cos")
    assert origin.lineno == LINE_SIN and origin.part == "backward"
    monkeypatch.setitem(cos.meta, "seq_nr", -1)  # no forward op with that number: nothing is made up
    assert provenance(view.exploration).node(1, "cos").where == "no source line recorded"


def test_a_node_names_the_exact_lines_that_compute_it(view):
    prov = view.provenance
    kernel_of = {k.name: k for k in view.session.kernels}
    for origin in prov.nodes:
        for name, lines in origin.kernels:
            source = kernel_of[name].source.split("\n")
            assert lines and all(origin.node in kernel_of[name].nodes_at(i) for i in lines)
            if origin.node in ("sin", "cos", "exp"):  # the call itself is among its lines, and nobody else's
                calls = [i for i, line in enumerate(source, 1) if f"fc::{origin.node}_f32(" in line]
                assert calls and set(calls) <= set(lines)


def test_picking_a_backward_node_highlights_its_kernel_lines(view):
    controls = view.controls
    controls[("Kernels", "node")].value = (1, "cos")
    answer = controls[("Kernels", "origin")].value
    cos = view.provenance.node(1, "cos")
    (kernel, lines), = cos.kernels
    assert f"from the backward of line {LINE_SIN}" in text(answer) and kernel in text(answer)
    marked = marked_lines(answer)
    assert len(marked) == len(lines) and any("fc::cos_f32(" in line for line in marked)


def test_picking_a_generated_line_names_its_nodes_and_the_users_line(view):
    controls = view.controls
    line_pick = controls[("Kernels", "line")]
    target = next(v for label, v in line_pick.options if v and "fc::sin_f32(" in label)
    line_pick.value = target
    answer = text(controls[("Kernels", "origin")].value)
    assert f"{target[1]} line {target[2]}" in answer and "computes sin" in answer
    assert f"line {LINE_SIN} in sin_mm_softmax" in answer
    assert [line.strip() for line in marked_lines(controls[("Kernels", "origin")].value)] == [
        view.provenance.at(*target).code.strip()]


def test_static_kernels_tab_annotates_every_line_with_its_nodes(view):
    static = text(view.sections["Kernels"])
    for kernel in view.session.kernels:
        for line, nodes in kernel.line_origins:
            code = kernel.source.split("\n")[line - 1]
            assert re.search(re.escape(code) + r" *// <- " + re.escape(", ".join(nodes)), static)
    assert f"from the backward of line {LINE_SIN} in sin_mm_softmax" in static  # the per-kernel node table


def test_each_kernel_carries_its_plan_and_the_kernels_tab_shows_it():
    # The kernel IR (issue 6 item 1): stored on the kernel it was printed into, shown folded under it.
    import compiler_core as cc
    from explorer import explore

    def softmax_twice(x):
        return torch.softmax(x, -1) * 2

    x = torch.randn(16, 64)
    session = cc.explain(softmax_twice, x)
    (kernel,) = session.kernels
    text = kernel.plan.pretty()
    assert "x=[16], r=[64]" in text and "amax(" in text and "sum(" in text and "# index: int32" in text
    assert kernel.plan.name == kernel.name
    view = explore(softmax_twice, x, repeats=0, kernels_for=())
    assert "kernel plan (the IR both code generators print)" in view.sections["Kernels"]
    torch.testing.assert_close(cc.compile(softmax_twice)(x), softmax_twice(x))


# ---- clicks (explorer/render/clickable.py): what the widget's JavaScript sets, set from Python ------------

def kernel_tab(view):
    controls = view.controls
    return (controls[("Kernels", "picture")], controls[("Kernels", "body")], controls[("Kernels", "origin")],
            controls[("Kernels", "picture_graph")])


def drawn_nodes(markup: str) -> set[str]:
    """The Graphviz node titles of the inline SVG in `markup` (edges read 'a->b', clusters cluster_N)."""
    return {html.unescape(t) for t in re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', markup)}


def test_the_kernels_tab_draws_forward_and_backward_graphs_to_click(view):
    picture, body, _, graph = kernel_tab(view)
    assert [label for label, _ in graph.options] == ["graph 0", "graph 0 (backward)"]
    graph.value = 0  # (an earlier test's pick of a backward node drew the backward)
    assert '<div data-fxe-record="0">' in picture.value and "<img" not in picture.value  # inline SVG
    assert {"sin", "mul", "relu", "exp"} <= drawn_nodes(picture.value)
    graph.value = 1
    assert '<div data-fxe-record="1">' in picture.value and "cos" in drawn_nodes(picture.value)
    # Every line of every kernel is an element a click picks, with its kernel and number.
    for kernel in view.session.kernels:
        numbers = re.findall(rf'data-fxe-kernel="{kernel.name}" data-fxe-line="(\d+)"', body.value)
        assert sorted(set(map(int, numbers))) == list(range(1, len(kernel.source.split("\n")) + 1))


def test_clicking_a_forward_node_shows_its_kernel_lines_and_the_users_line(view):
    picture, body, answer, graph = kernel_tab(view)
    graph.value = 0
    picture.picked_node = {"record": 0, "node": "sin"}
    sin = view.provenance.node(0, "sin")
    (kernel, lines), = sin.kernels
    shown = text(answer.value)
    assert f"line {LINE_SIN} in sin_mm_softmax" in shown and f"{kernel} (C++ / OpenMP (CPU)): lines" in shown
    marked = marked_lines(answer.value)
    assert len(marked) == len(lines) and any("fc::sin_f32(" in line for line in marked)
    # The list follows the click, and the picture and the kernel's source outline the node and its lines.
    assert view.controls[("Kernels", "node")].value == (0, "sin")
    assert set(picture.marked) == set(body.marked) == {"node:0:sin"} | {f"line:cpp:{kernel}:{n}" for n in lines}


def test_clicking_a_backward_node_names_the_forward_line_it_differentiates(view):
    picture, _, answer, graph = kernel_tab(view)
    graph.value = 1
    picture.picked_node = {"record": 1, "node": "cos"}
    (kernel, lines), = view.provenance.node(1, "cos").kernels
    assert f"from the backward of line {LINE_SIN}" in text(answer.value) and kernel in text(answer.value)
    assert any("fc::cos_f32(" in line for line in marked_lines(answer.value))
    picture.picked_node = {"record": 1, "node": "tangents_1"}  # an input: said so, nothing made up
    assert text(answer.value) == "tangents_1: an input of the graph."
    assert view.controls[("Kernels", "node")].label == "(pick an FX node)"  # the list shows its placeholder


def test_clicking_a_source_line_shows_its_nodes_and_then_a_node_of_the_answer(view):
    picture, body, answer, graph = kernel_tab(view)
    backward = view.session.graphs[0].backward.kernels
    kernel = next(k for k in backward if "fc::cos_f32(" in k.source)
    number = next(i for i, code in enumerate(kernel.source.split("\n"), 1) if "fc::cos_f32(" in code)
    body.picked_line = {"backend": "cpp", "kernel": kernel.name, "line": number}
    shown = text(answer.value)
    assert f"{kernel.name} line {number}" in shown and "computes cos" in shown
    assert f"from the backward of line {LINE_SIN} in sin_mm_softmax" in shown
    assert [line.strip() for line in marked_lines(answer.value)] == [kernel.source.split("\n")[number - 1].strip()]
    assert view.controls[("Kernels", "line")].value == ("cpp", kernel.name, number)
    assert f"line:cpp:{kernel.name}:{number}" in picture.marked and "node:1:cos" in picture.marked
    # The answer's FX nodes are clickable too: one of them answers as a click in the picture does.
    assert 'data-fxe-record="1" data-fxe-node="cos"' in answer.value
    answer.picked_node = {"record": 1, "node": "cos"}
    assert "from the backward of line" in text(answer.value) and "): lines" in text(answer.value)
    assert view.controls[("Kernels", "line")].label == "(pick a kernel line)" and body.picked_line is None
    # ... and the same line clicked again answers again (the node's pick cleared the line's).
    body.picked_line = {"backend": "cpp", "kernel": kernel.name, "line": number}
    assert f"{kernel.name} line {number}" in text(answer.value)


def test_picking_from_the_list_draws_that_nodes_graph_and_outlines_it(view):
    picture, _, _, graph = kernel_tab(view)
    graph.value = 0
    view.controls[("Kernels", "node")].value = (1, "cos")
    assert graph.value == 1 and "cos" in drawn_nodes(picture.value)
    assert picture.picked_node == {"record": 1, "node": "cos"} and "node:1:cos" in picture.marked


def test_the_static_views_stay_without_scripts_or_inline_svg(view):
    static = view.html()
    assert "data-fxe-line" not in static and "data-fxe-record" not in static and "<svg" not in static
    assert "<script" not in static


def test_clickable_markup_keeps_every_line_and_the_pictures_size():
    from explorer.render.clickable import clickable_code, inline_svg
    from explorer.render.svg import svg_image

    source = "int a; /* two\nlines */\n\nfloat b;"
    for quick in (False, True):  # Pygments, and our regular expression for long texts
        code = clickable_code(source, "cpp", "cpp", "k_0", quick=quick)
        spans = re.findall(r'<span data-fxe-backend="cpp" data-fxe-kernel="k_0" data-fxe-line="(\d+)">', code)
        assert spans == ["1", "2", "3", "4"] and text(code).rstrip("\n") == source
    picture = svg_image('<svg width="100pt" height="50pt" viewBox="0 0 100 50"><g class="node"><title>a</title>'
                        "</g></svg>", alt="g")
    assert inline_svg(picture, 3) == ('<div data-fxe-record="3"><svg width="133px" viewBox="0 0 100 50">'
                                      '<g class="node"><title>a</title></g></svg></div>')
