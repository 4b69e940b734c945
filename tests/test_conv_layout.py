"""Channels-last activations for convolution graphs (decomp/conv_layout.py), which run on request
(`conv_layout="channels_last"`): the rewrite, the propagation through batch norm, pooling and residual
adds, the copies back to the traced layout at the outputs, and the undo path run here on the CPU; a
GPU test checks the missing cuDNN transposes on the H200. And the loop-order pass that lets a
pointwise kernel write a channels-last buffer contiguously.
"""

import copy

import pytest
import torch
import torch.nn as nn

import compiler_core as cc
from compiler_core.decomp.conv_layout import choose_conv_layout
from tests.models.check import named_tensors
from tests.models.zoo import ZOO


def _compiled_outputs(model, inputs: dict, **options):
    compiled = cc.compile(model, **options)
    with torch.no_grad():
        return named_tensors(compiled(**inputs)), compiled.session


@pytest.mark.parametrize("name", ["resnet", "convnext", "vit", "swin"])
def test_zoo_models_in_channels_last_match_eager(name):
    case = ZOO[name].build("small", "cpu", torch.float32, mask=True)
    with torch.no_grad():
        expected = named_tensors(case.model(**case.inputs))
    got, session = _compiled_outputs(case.model, case.inputs, conv_layout="channels_last")
    decision = session.graphs[0].layout
    assert decision.channels_last, decision.pretty()
    assert decision.conversions, "the graph input at least is converted"
    assert session.stats["fallback_graphs"] == 0, session.messages
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, atol=1e-4, rtol=1e-4, msg=key)
        # Callers see the strides eager gives them, whatever layout ran inside.
        assert got[key].stride() == value.stride(), key


class _FlattenNet(nn.Module):
    """Conv, batch norm, ReLU, max-pool, then a flatten of a 4x4 feature map into a classifier: the
    traced `view` cannot be expressed over channels-last strides."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        y = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        y = torch.relu(self.conv2(y) + y)
        return self.fc(y.view(y.shape[0], -1)), y


def test_flatten_after_channels_last_reads_a_contiguous_copy():
    torch.manual_seed(0)
    model = _FlattenNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
    compiled = cc.compile(model, conv_layout="channels_last")
    with torch.no_grad():
        got = compiled(x)
    decision = compiled.session.graphs[0].layout
    assert decision.channels_last, decision.pretty()
    assert any(name.startswith("to_contiguous") for name in decision.conversions), decision.conversions
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
        assert g.stride() == e.stride()


def _traced(model, x):
    """The ATen graph AOTAutograd hands our compiler, with its fake values."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    from compiler_core import _compat

    def backend(gm, example_inputs):
        return _compat.aot_compile(gm, example_inputs, fw_compiler=keep, bw_compiler=keep, decompositions={})

    # A fresh backend each call is a recompile of Dynamo's shared wrapper frame: after 8 of them in one
    # process (earlier test files) Dynamo stops compiling it and no graph would come.
    torch._dynamo.reset()
    torch.compile(model, backend=backend)(x)
    return graphs[0]


def test_the_choices():
    torch.manual_seed(0)
    with torch.no_grad():
        plain = _traced(nn.Sequential(nn.Conv2d(4, 8, 3), nn.ReLU()).eval(), torch.randn(1, 4, 8, 8))
        linear = _traced(nn.Linear(4, 4).eval(), torch.randn(2, 4))
    assert "only on request" in choose_conv_layout(plain, "auto").reason
    with torch.no_grad():
        again = _traced(nn.Sequential(nn.Conv2d(4, 8, 3), nn.ReLU()).eval(), torch.randn(1, 4, 8, 8))
    on_cpu = choose_conv_layout(again, "auto", on_cpu_inference=True)
    assert on_cpu.channels_last and "auto: channels-last on the CPU" in on_cpu.reason
    assert "as_traced" in choose_conv_layout(plain, "as_traced").reason
    assert "no 2-d convolution" in choose_conv_layout(linear, "channels_last").reason
    decision = choose_conv_layout(plain, "channels_last")
    assert decision.channels_last and decision.conversions == ("to_channels_last_0", "to_traced_layout_1")
    with pytest.raises(cc.CompileError, match="conv_layout"):
        cc.compile(nn.Linear(2, 2), conv_layout="nhwc")


def test_a_training_step_in_channels_last_matches_eager():
    """The forward of a training step: its saved activations go back to their traced layout (graph
    outputs), so the backward compiled for that layout reads them right."""
    torch.manual_seed(0)
    model = _FlattenNet().train()
    x = torch.randn(2, 3, 8, 8)
    ours_model = copy.deepcopy(model)
    out, y = model(x)
    (out.square().mean() + y.mean()).backward()
    compiled = cc.compile(ours_model, conv_layout="channels_last")
    out2, y2 = compiled(x)
    (out2.square().mean() + y2.mean()).backward()
    torch.testing.assert_close(out2, out, atol=1e-5, rtol=1e-5)
    for (name, p), p2 in zip(model.named_parameters(), ours_model.parameters()):
        torch.testing.assert_close(p2.grad, p.grad, atol=1e-5, rtol=1e-5, msg=name)
    forward = compiled.session.graphs[0]
    assert forward.layout.channels_last, forward.layout.pretty()
    assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages


def test_a_failed_rewrite_leaves_the_graph_as_traced():
    torch.manual_seed(0)
    with torch.no_grad():
        gm = _traced(nn.Sequential(nn.Conv2d(4, 8, 3), nn.ReLU()).eval(), torch.randn(1, 4, 8, 8))
    before = [(n.name, n.target, n.meta["val"].stride() if isinstance(n.meta.get("val"), torch.Tensor) else None)
              for n in gm.graph.nodes]
    relu = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.relu.default)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    saved_target, relu.target = relu.target, _raises
    decision = choose_conv_layout(gm, "channels_last")
    relu.target = saved_target
    assert not decision.channels_last and "kept as traced" in decision.reason, decision.pretty()
    after = [(n.name, n.target, n.meta["val"].stride() if isinstance(n.meta.get("val"), torch.Tensor) else None)
             for n in gm.graph.nodes]
    assert [a[:2] for a in after] == [b[:2] for b in before]
    assert output.args[0][0] is relu


def _raises(*args, **kwargs):
    raise RuntimeError("no fake value for this op")


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_channels_last_output_is_written_in_memory_order(backend):
    """The loop-order pass (schedule/plan_passes.py): a pointwise kernel storing a channels-last buffer
    iterates with C innermost, so its store index is the flat position itself."""
    def fn(x):
        return (x.sin() * 2 + 1).contiguous(memory_format=torch.channels_last)

    x = torch.randn(2, 16, 5, 7)
    compiled = cc.compile(fn, backend=backend)
    got = compiled(x)
    expected = fn(x)
    torch.testing.assert_close(got, expected)
    assert got.stride() == expected.stride()
    (kernel,) = compiled.session.kernels
    assert any(note.startswith("loop order: x dims [2, 16, 5, 7] run as [2, 5, 7, 16]")
               for note in kernel.plan.notes), kernel.plan.notes
    # Row-major outputs keep their order: no note.
    plain = cc.compile(lambda x: x.sin() * 2 + 1, backend=backend)
    plain(x)
    assert not any(n.startswith("loop order") for k in plain.session.kernels for n in k.plan.notes)


def test_inserted_nodes_never_take_a_name_the_graph_has():
    """Names go through the graph's namespace (the name-collision class of bugs): a graph that already
    holds a node called like the first conversion gets a suffixed one, and still runs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3), nn.ReLU()).eval()
    with torch.no_grad():
        gm = _traced(model, torch.randn(1, 4, 8, 8))
    relu = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.relu.default)
    relu._rename("to_channels_last_0")
    assert relu.name == "to_channels_last_0"
    decision = choose_conv_layout(gm, "channels_last")
    names = [n.name for n in gm.graph.nodes]
    assert len(names) == len(set(names)), names
    assert decision.conversions[0] != "to_channels_last_0" and decision.conversions[0].startswith("to_channels_last")
    gm.graph.lint()
    assert "to_channels_last_0_1 = " in gm.code or decision.conversions[0] + " = " in gm.code


def test_cpu_weights_are_converted_once_per_call_inside_our_kernels():
    """On the CPU, ATen's mkldnn convolution with a channels-last input calls `weight.contiguous(
    channels_last)` at every call when the weight is not: an allocation and an ATen copy per
    convolution. The rewrite gives each such weight a channels-last clone in the graph, which our
    kernels compute (the small ones in one horizontal launch); a 1x1 weight is channels-last already.
    Values stay eager's, and no ATen copy runs in a call any more."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        expected = model(x)
        compiled = cc.compile(model)
        got = compiled(x)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert got.stride() == expected.stride()
    decision = compiled.session.graphs[0].layout
    weights = [n for n in decision.conversions if n.startswith("weight_to_channels_last")]
    assert decision.channels_last and len(weights) == 2, decision.pretty()  # not the 1x1 convolution's
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        again = compiled(x)
    torch.testing.assert_close(again, expected, atol=1e-5, rtol=1e-5)
    copies = [e.key for e in prof.key_averages() if e.key in ("aten::clone", "aten::copy_", "aten::contiguous")]
    assert copies == [], copies
    # The GPU keeps its weights as they are (cuDNN converts them; not measured there yet).
    with torch.no_grad():
        gm = _traced(model, x)
    assert not any(n.startswith("weight") for n in choose_conv_layout(gm, "channels_last").conversions)
