"""Why (not) fused for two FX nodes, and the Stepper: the pipeline stage by stage with counted changes."""

from __future__ import annotations

import html
import re

import pytest
import torch

from explorer import explore
from explorer.decisions import verdict_of
from explorer.views.stepper import STAGES
from explorer.why import UnknownNode, refusals


def two_reductions_and_a_matmul(x, w):
    a = x.exp() + 1
    rows = a.sum(0, keepdim=True)  # reduces dim 0 ...
    cols = a.sum(1, keepdim=True)  # ... and dim 1 of the same values: two kernels
    where_negative = torch.where(x < 0, rows, cols)  # a `<` in the source line the graphs print
    return where_negative, (a @ w).relu()  # relu reads a only through the matmul


@pytest.fixture(scope="module")
def view():
    return explore(two_reductions_and_a_matmul, torch.randn(6, 7), torch.randn(7, 5), backend="cpp",
                   repeats=0, kernels_for=())


def kernel_of(view, name):
    record = view.session.graphs[0]
    return next(g.name for g in record.schedule.groups if name in g.origins)


def test_a_fused_pair_names_its_kernel(view):
    answer = view.why_fused("exp", "add")
    assert answer.verdict == "same kernel"
    assert answer.kernels_a == answer.kernels_b == (kernel_of(view, "exp"),)
    assert str(answer) == f"exp and add are both in kernel {kernel_of(view, 'exp')}."


def test_reductions_over_other_axes_are_refused_with_the_reason(view):
    answer = view.why_fused("sum_1", "sum_2")
    assert answer.verdict == "refused"
    assert answer.reason.startswith("reduction axis:")
    assert kernel_of(view, "sum_1") != kernel_of(view, "sum_2")
    assert str(answer).startswith(f"sum_1 is in kernel {kernel_of(view, 'sum_1')}, sum_2 in kernel "
                                  f"{kernel_of(view, 'sum_2')}: refused because reduction axis:")


def test_a_matmul_between_means_never_considered(view):
    answer = view.why_fused("add", "relu")
    assert answer.verdict == "never considered"
    assert answer.reason == "relu reads add only through an extern call (mm)"
    assert f"kernel {kernel_of(view, 'add')}" in str(answer) and f"kernel {kernel_of(view, 'relu')}" in str(answer)
    # The matmul itself: an extern call, refused with the scheduler's reason in FX names (not buf4).
    extern = view.why_fused("add", "mm")
    assert extern.verdict == "refused" and extern.reason.startswith("extern: mm is an extern call")
    assert "the extern call extern_aten.mm.default" in str(extern)


def test_an_unknown_name_suggests_close_ones(view):
    with pytest.raises(UnknownNode, match=r"'sum1' is no FX node.*Did you mean sum_1, sum_2\?"):
        view.why_fused("sum1", "exp")


def test_the_fusion_tab_lists_refused_pairs_and_answers_from_dropdowns(view):
    pairs = {(r.a, r.b): r for r in refusals(view.session.graphs[0])}
    assert pairs[("add", "mm")].reason.startswith("extern:")
    assert any(r.reason.startswith("reduction axis:") for r in pairs.values())
    assert "why not in one kernel" in view.sections["Fusion"]
    controls = view.controls
    controls[("Fusion", "why_a")].value = (0, "sum_1")
    controls[("Fusion", "why_b")].value = (0, "sum_2")
    assert html.escape(str(view.why_fused("sum_1", "sum_2"))) in controls[("Fusion", "why")].value


def test_the_decision_log_filters_and_sorts_in_fx_names(view):
    record = view.session.graphs[0]
    log = record.schedule.decisions
    origins = {n.name: n.origins for n in record.loops.nodes}
    rows = view.decisions()
    assert [r.number for r in rows] == list(range(1, len(log) + 1))  # unfiltered: the scheduler's order
    assert [r.verdict for r in rows] == [verdict_of(d) for d in log]
    assert not any("buf" in r.producer + r.consumer for r in rows)  # FX names, not buffer names
    # A node's FX name finds every pair it is on either side of.
    touching = {i for i, d in enumerate(log, 1) if any("sum_1" in origins[n] for n in d.first + d.second)}
    found = view.decisions(0, "sum_1")
    assert touching and touching <= {r.number for r in found}
    assert all("sum_1" in r.producer + r.consumer + r.reason for r in found)
    refused = view.decisions(0, verdict="refused")
    assert refused and [r.number for r in refused] == [i for i, d in enumerate(log, 1) if not d.legal]
    axis = view.decisions(0, "reduction axis", verdict="refused")
    assert axis and all(r.reason.startswith("reduction axis:") for r in axis)
    by_bytes = view.decisions(0, sort="bytes saved")
    assert [r.bytes_saved for r in by_bytes] == sorted((d.bytes_saved for d in log), reverse=True)
    by_verdict = [r.verdict for r in view.decisions(0, sort="verdict")]
    assert by_verdict == sorted(by_verdict, key=["fused", "refused", "legal, not taken"].index)
    with pytest.raises(ValueError, match="verdict"):
        view.decisions(0, verdict="maybe")
    # The widget: a filter and a verdict pick the rows the table shows.
    controls = view.controls
    controls[("Fusion", "decisions_filter")].value = "mm"
    controls[("Fusion", "decisions_verdict")].value = "refused"
    shown = controls[("Fusion", "decisions")].value
    numbers = [int(n) for n in re.findall(r'<tr><td class="num"[^>]*>(\d+)</td>', shown)]
    expected = [r.number for r in view.decisions(0, "mm", verdict="refused")]
    assert expected and numbers == expected and f"{len(expected)} of {len(log)} decisions match" in shown


def test_the_stepper_walks_every_stage_in_order_with_counted_changes(view):
    steps, record, stats = view.steps, view.session.graphs[0], view.session.stats
    assert [s.stage for s in steps] == list(STAGES)
    assert [s.number for s in steps] == list(range(1, len(STAGES) + 1))
    assert all(s.changed and s.text for s in steps)
    changed = {s.stage: s.changed for s in steps}
    assert changed["captured graph"].startswith(f"TorchDynamo captured {record.captured.op_count} ops")
    assert f"{len(record.prims.node_prims)} primitive ops; 1 extern call" in changed["primitives"]
    assert changed["schedule (kernels)"].startswith(f"{len(record.loops.nodes)} loop nodes in "
                                                    f"{stats['kernel_count']} kernels and {stats['extern_calls']} "
                                                    "extern call")
    taken = sum(d.accepted for d in record.schedule.decisions)
    assert f"{taken} fusions taken" in changed["schedule (kernels)"]
    assert f"{record.memory.peak_bytes_planned:,} bytes planned" in changed["memory plan"]
    assert changed["kernel sources"].startswith(f"{stats['kernel_count']} kernels generated for cpp")


def test_the_stepper_widget_steps_back_and_forth(view):
    controls = view.controls
    back, forward, counter = (controls[("Stepper", k)] for k in ("back", "next", "counter"))
    assert counter.value.startswith(f"step 1 of {len(view.steps)}: graph 0: captured graph") and back.disabled
    forward.click()
    forward.click()
    assert counter.value.startswith("step 3 of") and "primitives" in controls[("Stepper", "step")].value
    back.click()
    assert counter.value.startswith("step 2 of")


def test_the_static_stepper_has_every_step_and_escapes_source(view):
    page = view.html()
    stepper = view.sections["Stepper"]
    summaries = re.findall(r"<summary>(.*?)</summary>", stepper)
    assert [html.unescape(s) for s in summaries] == [f"{s.number}. {s.title}: {s.changed}" for s in view.steps]
    assert all(html.escape(f"{s.number}. {s.title}: {s.changed}") in page for s in view.steps)
    assert "x < 0" not in stepper and "&lt;" in stepper  # the source line `x < 0` printed, escaped
