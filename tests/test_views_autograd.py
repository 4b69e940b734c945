"""The Autograd view: on a small MLP and a GPT-2-style block trained through explore(..., train=True),
it lists exactly what the partition saves (with the right bytes), marks what the backward recomputes,
gives every ban's reason, draws one curve point per activation budget of the sweep; inference-only
programs get a one-line note; user-derived names are escaped; the HTML export carries the view."""

from __future__ import annotations

import base64
import dataclasses
import html
import re
from types import MappingProxyType

import pytest
import torch
from test_partitioner import MLP, GPT2Block

from compiler_core.autodiff.artifacts import TANGENT, BudgetPoint, JointGraph
from explorer import explore
from explorer.views.autograd import NO_TRAINING, AutogradModel, autograd_model, graph_section, joint_dot


def expand_pictures(markup: str) -> str:
    """The markup with each picture (an <img> with an SVG data URI, as the views embed them so that
    untrusted notebooks keep them) replaced by its SVG text, so drawings can be searched."""
    def svg(match: re.Match) -> str:
        return base64.b64decode(match.group(1)).decode("utf-8")
    return re.sub(r'<img\b[^>]*src="data:image/svg\+xml;base64,([^"]+)"[^>]*>', svg, markup)


def autograd_html(view) -> str:
    return expand_pictures(view.sections["Autograd"])


def page_text(markup: str) -> str:
    markup = re.sub(r"<(style|svg)\b.*?</\1>", "", markup, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def table_after(heading: str, markup: str) -> list[list[str]]:
    """The body rows (cell texts) of the first table after the <h4> heading."""
    start = re.search(rf"<h4[^>]*>{re.escape(heading)}</h4>", markup).start()
    body = re.search(r"<tbody[^>]*>(.*?)</tbody>", markup[start:], re.S).group(1)
    return [[page_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def joint_svg_nodes(markup: str) -> dict[str, str]:
    """Node name -> its SVG group, from the drawing of the joint graph (not the collapsed summary)."""
    svg = next(s for s in re.findall(r"<svg\b.*?</svg>", markup, re.S) if "joint graph cut by" in s)
    return {html.unescape(name): body for name, body in
            re.findall(r'<g id="node\d+" class="node">\s*<title>(.*?)</title>(.*?)</g>', svg, re.S)}


@pytest.fixture(scope="module")
def mlp_view():
    torch.manual_seed(0)
    return explore(MLP(), torch.randn(8, 32), train=True, repeats=0, kernels_for=())


@pytest.fixture(scope="module")
def gpt2_view():
    torch.manual_seed(0)
    return explore(GPT2Block(), torch.randn(2, 16, 32), train=True, repeats=0, kernels_for=())


@pytest.fixture(params=["mlp", "gpt2_block"])
def view(request, mlp_view, gpt2_view):
    return {"mlp": mlp_view, "gpt2_block": gpt2_view}[request.param]


def test_the_saved_table_lists_exactly_the_saved_tensors_with_their_bytes(view):
    part = view.session.graphs[0].partition
    rows = table_after("Saved tensors (the cut)", autograd_html(view))
    *saved_rows, total = rows
    assert [r[0] for r in saved_rows] == [t.name for t in part.saved]
    for row, t in zip(saved_rows, part.saved):
        assert row[2:5] == ["×".join(map(str, t.shape)), t.dtype, f"{t.bytes:,}"]
        assert row[5].startswith("activation" if t.kind == "activation" else "input or weight view")
    assert total[0] == "total" and total[4] == f"{part.saved_bytes:,}"
    assert total[5] == f"{part.saved_activation_bytes:,} bytes of activations"
    assert 0 < part.saved_activation_bytes < part.saved_bytes  # both kinds occur in these two programs
    # saved values are drawn with a bold border
    nodes = joint_svg_nodes(autograd_html(view))
    assert {name for name, g in nodes.items() if 'stroke-width="3"' in g} == {t.name for t in part.saved}


def test_recomputed_nodes_are_listed_and_drawn_dashed(view):
    part = view.session.graphs[0].partition
    assert part.recomputed  # both programs recompute pointwise work (GELU) in the backward
    rows = table_after("Recomputed in the backward", autograd_html(view))
    assert [r[0] for r in rows] == list(part.recomputed)
    nodes = joint_svg_nodes(autograd_html(view))
    dashed = {name for name, g in nodes.items() if 'stroke-dasharray="5,2"' in g}
    assert dashed == set(part.recomputed)


def test_forward_and_backward_are_drawn_apart_and_the_cuts_edges_are_red(view):
    record = view.session.graphs[0]
    model = autograd_model(record)
    dot = joint_dot(model)
    clusters = dict(re.findall(r"subgraph cluster_(\w+) \{(.*?)\n  \}", dot, re.S))
    members = {name: set(re.findall(r'^ +"([^"]+)" \[', body, re.M)) for name, body in clusters.items()}
    # Every node the split forward graph computes is drawn in the forward cluster, and likewise backward.
    computed = ("call_function", "call_method", "call_module", "get_attr")
    part = record.partition
    joint_nodes = {n.name for n in record.joint.graph_module.graph.nodes}
    # (the backward may hold copies of recomputed nodes for its gradient formulas: not joint nodes)
    forward = {n.name for n in part.forward_graph.graph.nodes if n.op in computed} & joint_nodes
    backward = {n.name for n in part.backward_graph.graph.nodes if n.op in computed} & joint_nodes
    assert forward and backward and forward <= members["forward"] and backward - forward <= members["backward"]
    assert not members["forward"] & members["backward"]
    # The cut: a red edge from each saved tensor into the backward's side, and no other red edge.
    red = set(re.findall(r'^ +"([^"]+)" -> "([^"]+)" \[color="#d93025"', dot, re.M))
    saved = {t.name for t in part.saved}
    assert red and {source for source, _ in red} <= saved
    assert all(target in backward or model.placement.get(target) == TANGENT for _, target in red)
    assert {t for t in saved if t in joint_nodes} <= {source for source, _ in red}


def test_every_banned_node_is_shown_with_its_reason(view):
    part = view.session.graphs[0].partition
    rows = table_after("Banned from recompute, and why", autograd_html(view))
    assert {r[0]: r[3] for r in rows} == dict(part.banned)
    assert any("expensive op" in r[3] for r in rows)


def test_the_curve_has_one_point_per_budget_and_saves_less_as_the_budget_drops(view):
    part = view.session.graphs[0].partition
    markup = autograd_html(view)
    group = re.search(r'<g id="fxe-sweep-graph-0">(.*?)</g>\s*</g>', markup, re.S).group(1)
    assert group.count("<use ") == len(part.sweep) == 5
    model = autograd_model(view.session.graphs[0])
    assert [(c.budget, c.saved_bytes, c.recompute_flops) for c in model.curve] == \
        [(p.budget, p.saved_bytes, p.recompute_flops) for p in part.sweep]
    assert model.monotone and "not monotone" not in page_text(markup)
    saved = [c.saved_bytes for c in model.curve]  # sweep order: budgets 1.0 down to 0.0
    assert saved == sorted(saved, reverse=True) and saved[-1] < saved[0]
    assert [c.budget for c in model.curve if c.in_use] == [1.0]
    rows = table_after("Memory against recompute, over activation budgets", markup)
    assert len(rows) == len(part.sweep) and [r[6] for r in rows].count("◀ in use") == 1
    assert rows[0][1] == f"{part.saved_bytes:,}"  # the sweep's estimate at 1.0 is the split's


def test_a_large_joint_graph_is_summarised_with_the_full_drawing_in_a_scroll_pane(mlp_view, gpt2_view):
    small, large = autograd_html(mlp_view), autograd_html(gpt2_view)
    assert "the cut, collapsed" not in small and "the full joint graph" not in small
    nodes = len(gpt2_view.session.graphs[0].joint.graph_module.graph.nodes)
    assert nodes > 80 and "the cut, collapsed" in large and f"the full joint graph ({nodes} nodes, scrolls)" in large


def test_inference_only_programs_show_the_note():
    view = explore(lambda x: torch.softmax(x, -1), torch.randn(8, 16), repeats=0, kernels_for=())
    assert autograd_html(view) == f'<p class="fxe-note">{html.escape(NO_TRAINING)}</p>'
    assert "train=True" in NO_TRAINING


def test_user_derived_names_and_reasons_are_escaped(mlp_view):
    record = mlp_view.session.graphs[0]
    evil = "add<script>alert(1)</script>"
    graph, env = torch.fx.Graph(), {}
    for node in record.joint.graph_module.graph.nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
    next(n for n in graph.nodes if n.name == "add").name = evil
    gm = torch.fx.GraphModule(record.joint.graph_module, graph)
    roles = {(evil if k == "add" else k): v for k, v in record.joint.roles.items()}
    joint = JointGraph(gm, record.joint.num_fwd_outputs, MappingProxyType(roles))
    part = record.partition
    saved = tuple(dataclasses.replace(t, name=evil) if t.name == "add" else t for t in part.saved)
    banned = MappingProxyType({**part.banned, evil: "because <b>bold</b> & reasons"})
    part = dataclasses.replace(part, saved=saved, banned=banned)
    model = AutogradModel("graph <0>", joint, part, {}, ())
    markup = expand_pictures(graph_section(model))
    assert "<script>" not in markup and "<b>bold</b>" not in markup and "graph <0>" not in markup
    assert "add&lt;script&gt;alert(1)&lt;/script&gt;" in markup and "&lt;b&gt;bold&lt;/b&gt; &amp;" in markup
    assert evil in joint_svg_nodes(markup)  # drawn, its name escaped by Graphviz


def test_a_sweep_that_breaks_its_promise_is_flagged(mlp_view):
    record = mlp_view.session.graphs[0]
    part = dataclasses.replace(record.partition, budget=0.6, sweep=(
        BudgetPoint(1.0, 100, 0, 0, 0), BudgetPoint(0.0, 200, 50, 2, 1)))
    model = autograd_model(dataclasses.replace(record, partition=part))
    text = page_text(graph_section(model))
    assert not model.monotone and "not monotone" in text
    assert "The budget in use (0.6) is not one of the sweep's" in text


def test_html_export_contains_the_view(gpt2_view, tmp_path):
    raw = gpt2_view.to_html(tmp_path / "train.html").read_text()
    page = expand_pictures(raw)
    assert re.search(r"<summary[^>]*>Autograd</summary>", page) and "Saved tensors (the cut)" in page
    assert 'id="fxe-sweep-graph-0"' in page and "joint graph cut by" in page
    text = page_text(page)
    for t in gpt2_view.session.graphs[0].partition.saved:
        assert t.name in text
    assert "<script" not in raw


def test_aotautograds_default_partition_is_shown_without_a_curve(monkeypatch):
    import compiler_core.api

    def refuse(*args, **kwargs):
        raise NotImplementedError("test: no split")

    monkeypatch.setattr(compiler_core.api, "partition_joint", refuse)
    torch.manual_seed(0)
    view = explore(MLP(), torch.randn(8, 32), train=True, repeats=0, kernels_for=())
    part = view.session.graphs[0].partition
    markup = autograd_html(view)
    assert part.partitioner == "AOTAutograd default" and "AOTAutograd default" in page_text(markup)
    assert [r[0] for r in table_after("Saved tensors (the cut)", markup)][:-1] == [t.name for t in part.saved]
    text = page_text(markup)
    assert "No sweep" in text and "our partitioner could not split this graph: NotImplementedError" in text
    assert "joint graph cut by" in markup  # drawn by the joint's own forward/backward roles


def test_a_joint_graph_past_the_drawing_limit_gets_the_summary_only(gpt2_view, monkeypatch):
    # Graphviz took 18 s (over 3 minutes on a busy machine) on a 2-layer GPT-2's 413-node joint graph.
    import explorer.views.autograd as autograd_view

    monkeypatch.setattr(autograd_view, "MAX_DRAWN", 100)
    model = autograd_model(gpt2_view.session.graphs[0])
    markup = expand_pictures(graph_section(model))
    assert "too many to draw in reasonable time" in page_text(markup)
    assert "the cut, collapsed" in markup and "joint graph cut by" not in markup
