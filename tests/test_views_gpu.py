"""The explorer's measured views on a GPU: timing by CUDA events, the roofline under ceilings measured on
the GPU with our Triton kernels and eager's ops placed, the allocator's measured peak. Skipped without
CUDA; run with `python -m pytest -m gpu tests/test_views_gpu.py`."""

from __future__ import annotations

import html
import re

import pytest
import torch
import torch.nn.functional as F

from explorer import explore
from explorer.views.roofline import roofline_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def mm_gelu(x, w):
    return F.gelu(x @ w) * 2


def test_timing_roofline_and_memory_are_measured_on_the_gpu(tmp_path):
    n = 1024
    x, w = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    view = explore(mm_gelu, x, w, repeats=5, kernels_for=())
    exp = view.exploration
    assert exp.backend == "triton" and exp.timing.device == "cuda" and exp.timing.timer == "CUDA events"
    assert exp.timing.median("ours") > 0 and exp.timing.median("eager") > 0
    model = roofline_model(exp)
    c = model.ceilings
    assert c is not None and c.device == "cuda" and c.device_name == torch.cuda.get_device_name()
    assert c.copy_GBps > 100 and c.matmul_GFLOPs > 1000  # any datacenter GPU; far above a CPU's
    ours = {p.kind for p in model.points if p.side == "ours"}
    assert {"kernel", "extern"} <= ours  # our fused GELU kernel and the matmul, each timed on the GPU
    assert any(p.side == "eager" and p.name in ("aten::mm", "aten::matmul") for p in model.points)
    # the allocator's peak: at least the output, alive at the end of the call
    assert exp.measured.peak_bytes >= n * n * 4
    assert "torch.cuda.max_memory_allocated" in text(view.sections["Memory"])
    assert "CUDA events" in text(view.sections["Timing"])
    page = view.to_html(tmp_path / "gpu.html").read_text()
    for title in view.tab_titles:
        assert re.search(rf'<summary class="fxe-tab-title"[^>]*>{re.escape(title)}</summary>', page), title
