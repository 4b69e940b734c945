"""torch's references installed above autograd (py_impl(DispatchKey.Autograd)) reach every graph we
trace before our decomposition table is asked, so a wrong one gives a wrong answer with nothing run in
eager. multilabel_margin_loss's was wrong for targets ending in -1 (Inductor's answer too, 2026-12-04):
ours replaces it while we trace (compiler_core/decomp/corrections.py). The other references of that
kind that a compiled model can reach are checked here at their edges against eager: values and
gradients, both backends."""

import pytest
import torch
import torch.nn.functional as F
from torch._C import DispatchKey

import compiler_core as cc

BACKENDS = ["cpp", "triton"]
WEIGHT = torch.rand(5, generator=torch.Generator().manual_seed(3))
EDGES = torch.tensor([[-1.0, -0.5, 0.5, 0.49, float("nan"), 2.0, -0.5000001, 0.0]])
TARGETS = torch.tensor([[3, 0, -1, 1, 2], [-1, 0, 0, 0, 0], [4, 3, 2, 1, 0], [2, 2, -1, 3, 3]])

CASES = {
    "multilabel_margin_none": (lambda x: F.multilabel_margin_loss(x, TARGETS, reduction="none"), (4, 5)),
    "multilabel_margin_mean": (lambda x: F.multilabel_margin_loss(x, TARGETS), (4, 5)),
    "multilabel_margin_sum": (lambda x: F.multilabel_margin_loss(x, TARGETS, reduction="sum"), (4, 5)),
    "multilabel_margin_1d": (lambda x: F.multilabel_margin_loss(x, torch.tensor([4, -1, 1, 1, 1])), (5,)),
    "multi_margin_p2_weight": (lambda x: F.multi_margin_loss(x, torch.tensor([1, 0, 4, 4]), p=2, margin=0.7,
                                                             weight=WEIGHT, reduction="none"), (4, 5)),
    "multi_margin_1d": (lambda x: F.multi_margin_loss(x, torch.tensor(3)), (5,)),
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), None),
    "softshrink": (lambda x: F.softshrink(x, 0.5), None),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_references_above_autograd_match_eager_at_their_edges(backend, name):
    torch._dynamo.reset()
    fn, shape = CASES[name]
    x0 = EDGES.clone() if shape is None else torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    eager_x, our_x = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    expected = fn(eager_x)
    compiled = cc.compile(fn, backend=backend)
    got = compiled(our_x)
    torch.testing.assert_close(got, expected, equal_nan=True)
    weight = torch.linspace(-1, 1, expected.numel()).view(expected.shape)
    (expected * weight).nansum().backward()
    (got * weight).nansum().backward()
    torch.testing.assert_close(our_x.grad, eager_x.grad, equal_nan=True)
    assert compiled.session.stats["fallback_graphs"] == 0


def test_torchs_own_reference_is_back_after_we_compile():
    # Only our tracing sees the correction: torch's kernel is restored (what Inductor runs is unchanged).
    op = torch.ops.aten.multilabel_margin_loss_forward.default
    before = op.py_kernels.get(DispatchKey.Autograd)
    compiled = cc.compile(lambda x: F.multilabel_margin_loss(x, TARGETS))
    compiled(torch.randn(4, 5))
    assert op.py_kernels.get(DispatchKey.Autograd) is before
