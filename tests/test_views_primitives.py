"""Primitives view: ATen ops before decomposition, the primitive histogram after, extern calls and why."""

import torch

import compiler_core as cc
from explorer import explore
from explorer.views import primitives


def softmax_then_matmul(x, w):
    return torch.softmax(x, -1) @ w


def test_model_follows_softmax_and_matmul_from_capture_to_primitives():
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    session = cc.explain(softmax_then_matmul, x, w)
    model = primitives.primitives_model(session.graphs[0], "graph 0")
    captured = dict(model.captured)
    assert sum(captured.values()) == 2 and any("softmax" in call for call in captured)
    # AOT tracing with our table took softmax apart; the matmul stays whole, as an extern call.
    aten = {op: prim for op, _, prim in model.aten}
    assert aten["aten.exp.default"] == "exp" and aten["aten.mm.default"] == "extern"
    assert not any("softmax" in op for op in aten)
    after = dict(model.after)
    assert after["exp"] == 1 and after["extern"] == 1
    ((node, op, why),) = model.externs
    assert op == "aten.mm.default" and "matmul" in why
    # ... and the compiled program those primitives became is right.
    torch.testing.assert_close(cc.compile(softmax_then_matmul)(x, w), softmax_then_matmul(x, w))


def test_render_covers_forward_and_backward_with_a_chart():
    view = explore(softmax_then_matmul, torch.randn(8, 16), torch.randn(16, 4), train=True, repeats=0,
                   kernels_for=())
    html = view.sections["Primitives"]
    assert html.count("<h3>Primitives of ") == 2  # forward and backward graphs
    assert "backward" in html
    assert html.count("data:image/svg+xml;base64,") == 2  # one histogram each
    assert "why PyTorch runs it" in html and "matmul" in html


def test_complex_rewrite_is_shown_with_what_became_real_ops():
    def rotate_then_spectrum(z, x):
        return torch.view_as_real(torch.view_as_complex(x) * z), torch.fft.rfft(x[..., 0]).abs()

    z, x = torch.randn(4, 8, dtype=torch.complex64), torch.randn(4, 8, 2)
    view = explore(rotate_then_spectrum, z, x, repeats=0, kernels_for=())
    model = primitives.primitives_model(view.exploration.session.graphs[0], "graph 0")
    assert "inputs [1] are viewed as real pairs" in model.complex_summary  # z: Dynamo orders inputs by use
    assert any("aten.mul.Tensor" in r for r in model.complex_rewritten)
    assert any("_fft_r2c" in r and "PyTorch's, on real pairs" in r for r in model.complex_rewritten)
    assert any("FFT on complex values" in why for _, _, why in model.externs)
    html = view.sections["Primitives"]
    assert "Complex tensors: complex values as real pairs" in html and "complex op (node: ATen op)" in html
    for got, expected in zip(cc.compile(rotate_then_spectrum)(z, x), rotate_then_spectrum(z, x)):
        torch.testing.assert_close(got, expected)
