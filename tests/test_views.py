"""The explorer's measured views, without a browser: roofline points and ceilings, memory lifetimes,
trustworthy timing (spread, contention, words), the smaller fixes, and the HTML export of all of them."""

from __future__ import annotations

import html
import re

import pytest
import torch

import compiler_core as cc
from explorer import ceilings as ceilings_module
from explorer import explore
from explorer.cell import cell_program
from explorer.measuring import Samples, TimingResult, compare_words, noise_reasons
from explorer.profiling import steps_without_timing
from explorer.views.fusion import fx_names
from explorer.views.memory import memory_model
from explorer.views.roofline import roofline_model


def page_text(markup: str) -> str:
    markup = re.sub(r"<(style|svg)\b.*?</\1>", "", markup, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def softmax(x):
    return torch.softmax(x, -1)


def sin_mm_cos_mm(x, w):
    return (torch.sin(x) @ w).cos() @ w


@pytest.fixture(scope="module")
def mm_view():
    """A measured program with an extern call and a fused kernel: the roofline has both kinds."""
    def mm_gelu(x, w):
        return torch.nn.functional.gelu(x @ w) * 2

    return explore(mm_gelu, torch.randn(64, 96), torch.randn(96, 128), repeats=3, kernels_for=())


# ---- roofline ----

def test_kernel_bytes_and_flops_match_the_tensors():
    x = torch.randn(16, 64)
    steps = steps_without_timing(cc.explain(softmax, x))
    assert len(steps) == 1 and steps[0].kind == "kernel"
    assert steps[0].bytes == 2 * x.numel() * 4  # reads x once, writes the result once
    # amax, sub, exp, sum, div: at least one operation per element and per pass
    assert steps[0].flops >= 3 * x.numel()


def test_roofline_places_our_kernels_and_eager_ops(mm_view):
    model = roofline_model(mm_view.exploration)
    c = model.ceilings
    assert c is not None and c.copy_GBps > 0 and c.matmul_GFLOPs > 0
    ours = {p.name: p for p in model.points if p.side == "ours"}
    eager = [p for p in model.points if p.side == "eager"]
    mm = next(p for p in ours.values() if p.kind == "extern")
    assert mm.flops == 2 * 64 * 96 * 128  # from the real call, by torch's flop formulas
    assert mm.bytes == (64 * 96 + 96 * 128 + 64 * 128) * 4
    assert any(p.kind == "kernel" for p in ours.values())
    assert any(p.name in ("aten::matmul", "aten::mm") and p.flops == 2 * 64 * 96 * 128 for p in eager)
    assert all(p.seconds > 0 and p.intensity > 0 for p in model.points)
    # fusion: our one kernel moves fewer bytes than eager's gelu and mul together
    fused = next(p for p in ours.values() if p.kind == "kernel")
    eager_pointwise = sum(p.bytes for p in eager if p.name in ("aten::gelu", "aten::mul"))
    assert fused.bytes < eager_pointwise


def test_roofline_and_memory_views_render(mm_view):
    text = page_text(mm_view.sections["Roofline"])
    assert "GB/s" in text and "GFLOP/s" in text
    assert "<svg" in mm_view.sections["Roofline"]
    assert "not measured" in page_text(mm_view.sections["Memory"])  # CPU: no allocator peak


def test_ceilings_are_kept_on_disk_by_device(tmp_path, monkeypatch):
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ceilings_module, "_MEASURED", {})
    calls = []

    def fake_measure(device, name, threads, repeats=8):
        calls.append(device)
        return ceilings_module.Ceilings(device, name, threads, 10.0, 100.0, 64, "2026-01-01")

    monkeypatch.setattr(ceilings_module, "measure_ceilings", fake_measure)
    first = ceilings_module.device_ceilings("cpu")
    assert calls == ["cpu"] and not first.from_disk
    assert ceilings_module.device_ceilings("cpu") is first  # once per process
    monkeypatch.setattr(ceilings_module, "_MEASURED", {})  # a new process
    again = ceilings_module.device_ceilings("cpu")
    assert calls == ["cpu"] and again.from_disk and again.copy_GBps == 10.0
    assert again.ridge_intensity == pytest.approx(10.0)


# ---- memory ----

def test_reused_storage_shows_two_buffers_on_one_row():
    x, w = torch.randn(32, 32), torch.randn(32, 32)
    session = cc.explain(sin_mm_cos_mm, x, w)
    model = memory_model(session.graphs[0], "graph 0")
    shared = [row for row in model.rows if len(row.lifetimes) > 1]
    assert len(shared) == 1
    first, second = shared[0].lifetimes
    assert (first.label, second.label) == ("sin", "cos")
    assert second.takes_storage_of == first.buffer and first.last < second.first + 1
    assert model.peak_planned <= model.peak_unplanned
    assert model.peak_planned < model.peak_unplanned  # frees and reuse: never four 4 kB buffers at once
    outputs = [t for row in model.rows for t in row.lifetimes if t.held_to_end]
    assert outputs and all(t.last == len(model.steps) - 1 for t in outputs)
    # the values that came out of the reuse are right
    torch.testing.assert_close(cc.compile(sin_mm_cos_mm)(x, w), sin_mm_cos_mm(x, w))


# ---- trustworthy timing ----

def _samples(name, values):
    return Samples(name, tuple(values))


def test_contention_flags_noisy_samples_not_tight_ones():
    tight = {"eager": _samples("eager", [1.00, 1.01, 0.99, 1.00, 1.02]),
             "ours": _samples("ours", [0.50, 0.51, 0.50, 0.49, 0.50])}
    assert noise_reasons(tight, (0.5, 2), {"eager": 1.0, "ours": 0.5}) == ()
    noisy = {"eager": _samples("eager", [1.0, 45.0, 1.1, 44.0, 1.0, 46.0]), "ours": tight["ours"]}
    reasons = noise_reasons(noisy, (0.5, 2), {})
    assert len(reasons) == 1 and "eager" in reasons[0]
    assert any("load average" in r for r in noise_reasons(tight, (3.5, 2), {}))
    assert any("re-measure" in r for r in noise_reasons(tight, None, {"eager": 1.0, "ours": 1.0}))
    # every sample alike, but eager's threads stalled: one thread ran it far faster
    stalled = {"eager": Samples("eager", (12.0, 12.0, 12.1), threads=2), "ours": tight["ours"]}
    assert noise_reasons(stalled, (1.0, 2), {}, eager_one_thread_s=0.05)
    assert not noise_reasons(tight, (1.0, 2), {}, eager_one_thread_s=1.2)
    result = TimingResult(noisy, "cpu", "time.perf_counter", None, {}, reasons=reasons)
    assert result.noisy and result.headline().startswith("noisy: rerun")
    assert result.short() == "timing noisy: rerun"


def test_slower_is_said_in_words():
    assert compare_words("ours", "eager", 1.0, 2.5) == "ours is 2.50× slower than eager"
    assert compare_words("ours", "eager", 2.0, 1.0) == "ours is 2.00× faster than eager"
    tight = {"eager": _samples("eager", [1.0, 1.0, 1.0]), "ours": _samples("ours", [2.0, 2.0, 2.0])}
    assert "slower" in TimingResult(tight, "cpu", "time.perf_counter").headline()


def test_thread_settings_are_reported_and_differences_named():
    same = {"eager": Samples("eager", (1.0,), threads=2), "ours": Samples("ours", (1.0,), threads=2)}
    assert "2 intra-op thread" in TimingResult(same, "cpu", "t").thread_note()
    other = {**same, "ours": Samples("ours", (1.0,), threads=1)}
    assert "differ" in TimingResult(other, "cpu", "t").thread_note()


def test_timing_view_breaks_ours_down(mm_view):
    exp = mm_view.exploration
    ours = exp.measured.ours
    kinds = [s.kind for s in ours.steps]
    assert "extern" in kinds and "kernel" in kinds
    assert ours.host_s is not None and ours.host_s >= 0
    assert ours.total_s >= ours.kernel_s + ours.extern_s
    text = page_text(mm_view.sections["Timing"])
    assert "host and launch overhead" in text and "IQR" in text
    assert ("noisy: rerun" in text) or ("faster than eager" in text) or ("slower than eager" in text)


# ---- smaller fixes ----

def test_summary_table_has_no_empty_header(mm_view):
    summary = mm_view.sections["Summary"]
    assert "<th></th>" not in summary


def test_cell_function_names_no_helper_value():
    program = cell_program("y = torch.relu(x)\ny * 2", {"x": torch.randn(2), "torch": torch}, "<cell>")
    assert "__fcompile_value" not in program.source
    scope = {"torch": torch, "__fcompile_unset": None}
    exec(program.code, scope)
    gm_names = []

    def backend(gm, inputs):
        gm_names.extend(n.name for n in gm.graph.nodes)
        return gm.forward

    value, (y,) = torch.compile(scope["__fcompile_cell"], backend=backend)(torch.ones(2))
    torch.testing.assert_close(value, torch.ones(2) * 2)
    assert gm_names and not any("fcompile" in n for n in gm_names)


def test_fusion_decisions_and_copies_use_fx_names():
    session = cc.explain(lambda x: torch.nn.functional.layer_norm(x, (8,)) + 1, torch.randn(4, 8))
    record = session.graphs[0]
    names = fx_names(record.loops)
    assert set(names) >= {n.name for n in record.loops.nodes}
    assert all(not v.startswith("buf") for v in names.values())
    view = explore(lambda x: (x.sin(), torch.tensor([1.0, 2.0])), torch.randn(4), repeats=0, kernels_for=())
    fusion = page_text(view.sections["Fusion"])
    assert "copy of a constant" in fusion
    decisions = re.findall(r"<details><summary>\d+ fusion decisions.*?</details>", view.sections["Fusion"], re.S)
    assert all("buf" not in page_text(d) for d in decisions)


# ---- export ----

def test_html_export_has_every_view_and_escapes_names(mm_view, tmp_path):
    view = explore(softmax, torch.randn(8, 16), repeats=2, kernels_for=(), title="<b>soft&max</b>")
    page = view.to_html(tmp_path / "r.html").read_text()
    for title in view.tab_titles:
        assert f">{title}</label>" in page
    assert "&lt;b&gt;soft&amp;max&lt;/b&gt;" in page and "<b>soft&max</b>" not in page
    assert "Rows are storages" in page and "Ceilings of this device" in page
    assert "<script" not in page
