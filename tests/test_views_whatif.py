"""The What-if tab: compile the explored program again with other options (fusion off, the other backend,
an activation budget) and compare with this compilation; refuse impossible combinations in one line;
the toggles act only on Recompile. Without a browser: the model, the widget and the static HTML."""

from __future__ import annotations

import html
import re

import pytest
import torch

import compiler_core as cc
from explorer import explore
from explorer.views import whatif
from explorer.views.whatif import WhatIfRefused


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def linear_relu_softmax(x, w, b):
    return torch.relu(torch.nn.functional.linear(x, w, b)).softmax(-1) * 2


ARGS = (torch.randn(8, 16), torch.randn(4, 16), torch.randn(4))


@pytest.fixture(scope="module")
def view():
    return explore(linear_relu_softmax, *ARGS, backend="cpp", repeats=2, kernels_for=())


def row(result, what):
    return next(r for r in result.rows() if r[0] == what)


def test_fusion_off_gives_more_kernels_with_the_same_values(view):
    result = view.what_if(repeats=2, fusion=False)
    before, after = result.before, result.after
    assert (result.before_options.fusion, result.after_options.fusion) == (True, False)
    assert before.kernels == view.session.stats["kernel_count"] == 1
    # Every loop node that computes is a kernel of its own now.
    loops = [n for r in result.session.all_records() for n in r.loops.nodes]
    assert after.kernels == len([n for n in loops if n.kind != "extern"]) > before.kernels
    assert after.extern_calls == before.extern_calls == 1
    assert after.bytes_moved > before.bytes_moved  # intermediates go through memory now
    assert result.matches_eager and result.max_abs_error < 1e-5
    assert row(result, "kernels") == ("kernels", "1", str(after.kernels), f"+{after.kernels - 1}")
    assert row(result, "option fusion") == ("option fusion", "on", "off", "changed")
    assert before.seconds > 0 and after.seconds > 0  # timed beside each other
    # Peaks measured on this device (the CPU: PyTorch's allocator through torch.profiler), at least the output.
    assert before.measured_peak >= 8 * 4 * 4 and after.measured_peak >= 8 * 4 * 4
    assert row(result, "measured peak memory (one call)")[1:3] == (f"{before.measured_peak:,} B",
                                                                   f"{after.measured_peak:,} B")
    # The session of the explored program is untouched.
    assert view.session.stats["kernel_count"] == 1


def test_a_wrong_recompiled_program_is_reported_not_hidden(view, monkeypatch):
    real_compile = cc.compile

    class OffByOne:
        def __init__(self, fn, **options):
            self.compiled = real_compile(fn, **options)
            self.session = self.compiled.session

        def __call__(self, *args):
            out = self.compiled(*args) + 1
            self.session = self.compiled.session
            return out

    monkeypatch.setattr(whatif.cc, "compile", OffByOne)
    result = view.what_if(repeats=0, fusion=False)
    assert not result.matches_eager and result.max_abs_error == pytest.approx(1.0)
    assert "differ from eager PyTorch" in text(whatif.result_html(result))


def test_switching_the_backend_generates_triton_kernels(view):
    pytest.importorskip("triton")
    result = view.what_if(repeats=0, backend="triton")
    assert {k.backend for k in result.session.kernels} == {"triton"}
    assert result.after.kernels == result.before.kernels == 1
    assert result.matches_eager
    assert row(result, "option backend") == ("option backend", "cpp", "triton", "changed")


def test_dynamic_on_compiles_the_symbolic_graph_with_our_kernels(view):
    result = view.what_if(repeats=0, dynamic=True)
    assert result.matches_eager
    assert result.session.stats["fallback_graphs"] == 0 and result.session.kernels, result.session.messages
    assert result.session.graphs[0].sizes  # compiled for the explored sizes (compiler_core/per_size.py)
    assert row(result, "option dynamic") == ("option dynamic", "auto", "on", "changed")


@pytest.mark.parametrize("changes, says", [
    ({"mode": "reduce-overhead"}, "mode reduce-overhead needs a GPU"),
    ({"activation_budget": 0.5}, "explored without training"),
    ({"activation_budget": 2.0}, "must be between 0.0"),
    ({"backend": "cuda"}, "backend='cuda' is not one of"),
    ({"fusoin": False}, "unknown option fusoin"),
])
def test_bad_combinations_are_refused_in_one_line(view, changes, says):
    with pytest.raises(WhatIfRefused, match=re.escape(says)):
        view.what_if(repeats=0, **changes)
    answer = view.what_if_html(repeats=0, **changes)
    assert says in html.unescape(answer) and answer.count("<p") == 1 and "Traceback" not in answer


def test_toggles_apply_only_on_recompile(view, monkeypatch):
    calls = []
    real = whatif.what_if
    monkeypatch.setattr("explorer.view.what_if", lambda exp, **kw: calls.append(kw) or real(exp, **kw))
    controls = view.controls
    controls[("What-if", "fusion")].value = False
    controls[("What-if", "activation_budget")].value = 0.3  # disabled (not training), and nothing compiles
    assert controls[("What-if", "activation_budget")].disabled
    assert calls == [] and controls[("What-if", "result")].value == ""
    controls[("What-if", "activation_budget")].value = 1.0
    controls[("What-if", "recompile")].click()
    assert calls == [{"repeats": 5, "fusion": False}]
    answer = text(controls[("What-if", "result")].value)
    assert "outputs match eager" in answer and re.search(r"kernels\s+1\s+\d+\s+\+\d+", answer)


def test_training_program_takes_an_activation_budget():
    def two_layers(x, w1, w2):
        return (torch.tanh(x @ w1).sin() @ w2).sum(-1)

    view = explore(two_layers, torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 4), backend="cpp",
                   train=True, repeats=0, kernels_for=())
    result = view.what_if(repeats=0, activation_budget=0.0)
    assert result.after_options.activation_budget == 0.0
    assert result.matches_eager  # outputs and the inputs' gradients
    saved = [r.partition.saved_bytes for r in (view.session.graphs[0], result.session.graphs[0])]
    assert saved[1] <= saved[0]


def test_static_tab_says_the_toggles_need_a_live_kernel(view):
    static = text(view.sections["What-if"])
    assert "need a live Python kernel" in static
    for option, value in (("fusion", "on"), ("backend", "cpp"), ("mode", "default"), ("dynamic", "auto")):
        assert re.search(rf"{option}\s+{value}", static)
    assert re.search(r"kernels\s+1\b", static)
    assert "What-if" in view.tab_titles
