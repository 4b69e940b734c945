"""A convolution's bias added in the kernel after it (schedule/epilogues.py), as an addmm's is.

On the GPU ATen runs a biased convolution as cuDNN's kernel and then a whole pass adding the bias, so
there the bias moves into the kernel of the convolution's readers. The CPU (oneDNN adds the bias as it
writes) keeps it in the call; these tests turn the split on for the CPU to check the mechanism's values
on both backends here, and a GPU test runs the real path.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.schedule import epilogues


class _ConvGelu(nn.Module):
    def __init__(self, groups: int = 1, keep_conv_output: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, groups=groups)
        self.keep_conv_output = keep_conv_output

    def forward(self, x):
        y = self.conv(x)
        return (F.gelu(y), y) if self.keep_conv_output else F.gelu(y) * 2


def _conv_externs(session):
    return [n for g in session.graphs if g.loops is not None for n in g.loops.nodes
            if n.kind == "extern" and n.extern.target == epilogues.CONVOLUTION]


@pytest.fixture
def split_on_cpu(monkeypatch):
    monkeypatch.setattr(epilogues, "CONV_BIAS_SPLIT_DEVICES", ("cpu", "cuda"))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("groups", [1, 8])
def test_the_bias_add_runs_in_the_kernel_after_the_convolution(split_on_cpu, backend, groups):
    torch.manual_seed(0)
    model = _ConvGelu(groups).eval()
    x = torch.randn(2, 8, 6, 7)
    # As traced (NCHW): the CPU's channels-last choice would add a kernel converting the input.
    compiled = cc.compile(model, backend=backend, conv_layout="as_traced")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    session = compiled.session
    (conv,) = _conv_externs(session)
    assert conv.extern.args[2] is None, "the convolution is called without its bias"
    (graph,) = session.graphs
    split = [d for d in graph.schedule.decisions if d.reason.startswith("epilogue: convolution split")]
    assert len(split) == 1 and split[0].accepted
    assert graph.schedule.kernel_count == 1  # bias add, GELU and the doubling: one kernel
    assert session.stats["fallback_graphs"] == 0


def test_a_convolution_output_kept_for_the_caller_keeps_its_bias(split_on_cpu):
    # Its result must be written anyway: the split would write the product and the sum both.
    torch.manual_seed(0)
    model = _ConvGelu(keep_conv_output=True).eval()
    x = torch.randn(2, 8, 5, 5)
    compiled = cc.compile(model, backend="cpp", conv_layout="as_traced")
    with torch.no_grad():
        for got, want in zip(compiled(x), model(x)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (conv,) = _conv_externs(compiled.session)
    assert conv.extern.args[2] is not None
    (graph,) = compiled.session.graphs
    assert any(d.reason.startswith("extern: convolution keeps its bias") for d in graph.schedule.decisions)


def test_training_through_a_split_convolution_matches_eager(split_on_cpu):
    torch.manual_seed(0)
    model = _ConvGelu()
    reference = _ConvGelu()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 6, 6)
    compiled = cc.compile(model, backend="cpp")
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
    assert any(n.extern.args[2] is None for n in _conv_externs(compiled.session))


def test_the_cpu_keeps_the_bias_in_onednns_call():
    torch.manual_seed(0)
    model = _ConvGelu().eval()
    compiled = cc.compile(model, backend="cpp")
    with torch.no_grad():
        compiled(torch.randn(1, 8, 4, 4))
    (conv,) = _conv_externs(compiled.session)
    assert conv.extern.args[2] is not None
