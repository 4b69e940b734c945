"""Fusion through views (issue 6, item 3): reshapes, flattens, transposes, permutes, slices and the
like between fused ops are index arithmetic inside one kernel, not a reason for a second kernel;
a Linear keeps one matmul call and its bias add joins the activation after it.  Every count is
checked together with the values (against eager), on both backends."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.compare.inductor import inductor_kernels

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape) + sum(shape)))


# name -> (fn, args, our kernel count).  Inductor makes one kernel for each of these too.
VIEW_PROGRAMS = {
    "reshape": (lambda x: (x + 1).reshape(4, 6).exp(), (_randn(2, 3, 4),), 1),
    "transpose": (lambda x: (x + 1).t().exp(), (_randn(4, 6),), 1),
    "permute_contiguous": (lambda x: (x + 1).permute(2, 0, 1).contiguous() * 2, (_randn(2, 3, 4),), 1),
    "flatten": (lambda x: (x * 2).flatten(1).sigmoid(), (_randn(2, 3, 4),), 1),
    "non_contiguous_input": (lambda x: (x + 1).reshape(4, 6).exp(), (_randn(4, 2, 3).permute(1, 2, 0),), 1),
    "view_is_an_output": (lambda x: ((x + 1).t(), (x + 1).t().exp()), (_randn(4, 6),), 1),
    "unsqueeze_expand": (lambda x: (x + 1).unsqueeze(0).expand(3, 4, 6).exp(), (_randn(4, 6),), 1),
    "squeeze": (lambda x: (x + 1).squeeze(1).exp(), (_randn(4, 1, 6),), 1),
    "slice": (lambda x: (x + 1)[:, 1:3].exp(), (_randn(4, 6),), 1),
    "select": (lambda x: (x + 1)[1].exp() + (x * 2).sum(0), (_randn(4, 6),), 1),
    "view_then_row_sum": (lambda x: (x + 1).view(2, 12).sum(-1), (_randn(2, 3, 4),), 1),
    "row_sum_then_view": (lambda x: x.sum(-1).view(6) * 2, (_randn(2, 3, 4),), 1),
    "softmax_then_view": (lambda x: torch.softmax(x, -1).view(2, 3, 4).exp(), (_randn(6, 4),), 1),
    # Size-1 dims (batch 1): `16*x0 + x1` and `x1` name one row when x0 < 1. They used to refuse
    # fusion ("the rows do not line up"): a batch-1 GPT-2 ran 27 kernels where batch 2 ran 15.
    "batch_one_layer_norm": (lambda x: F.layer_norm(x, (32,)) * 2, (_randn(1, 16, 32),), 1),
    "middle_one_layer_norm": (lambda x: F.layer_norm(x, (32,)) * 2, (_randn(16, 1, 32),), 1),
    "batch_one_softmax": (lambda x, m: torch.softmax(x * 0.5 + m, -1) * 3, (_randn(1, 4, 8, 8), _randn(1, 1, 1, 8)), 1),
}


def _compiled(fn, backend, args):
    compiled = cc.compile(fn, backend=backend, check=True)  # every kernel compared with eager as it runs
    out = compiled(*args)
    record = compiled.session.graphs[0]
    assert not record.fell_back, record.fallback_reason
    return out, compiled.session


def _assert_same(out, expected):
    as_tuple = lambda v: v if isinstance(v, tuple) else (v,)  # noqa: E731
    for a, b in zip(as_tuple(out), as_tuple(expected), strict=True):
        assert a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(VIEW_PROGRAMS))
def test_views_between_ops_fuse_into_one_kernel(name, backend):
    fn, args, kernels = VIEW_PROGRAMS[name]
    out, session = _compiled(fn, backend, args)
    _assert_same(out, fn(*args))
    assert session.stats["kernel_count"] == kernels, session.graphs[0].schedule.pretty()
    assert session.stats["extern_calls"] == 0


@pytest.mark.parametrize("name", ["reshape", "transpose", "permute_contiguous", "flatten", "slice"])
def test_kernel_counts_match_inductor(name):
    # Inductor's count is read from its generated code (kernel names, see compare/inductor.py).
    fn, args, kernels = VIEW_PROGRAMS[name]
    out, names = inductor_kernels(fn, *args)
    torch.testing.assert_close(out, fn(*args))
    assert len(names) == kernels == 1, names


def test_a_reshaped_store_folds_back_to_a_flat_index():
    fn, args, _ = VIEW_PROGRAMS["reshape"]
    _, session = _compiled(fn, "cpp", args)
    source = session.kernels[0].source
    assert "out_ptr0[12*x0 + 4*x1 + x2]" in source and "in_ptr0[12*x0 + 4*x1 + x2]" in source
    assert "%" not in source.split("{", 1)[1]  # no leftover div/mod: the reshape costs nothing


def test_a_view_inside_a_kernel_is_no_buffer():
    fn, args, _ = VIEW_PROGRAMS["permute_contiguous"]
    _, session = _compiled(fn, "cpp", args)
    g = session.graphs[0]
    (group,) = g.schedule.groups
    assert len(group.materialized) == 1 and len(group.internal) == 2
    assert [r.buffer for r in g.memory.live_ranges] == list(group.materialized)
    assert g.wrapper.source.count(" = alloc(") == 1  # the output alone is allocated
    assert g.memory.peak_bytes_planned == 4 * 24
    # The graph output that is a view of an in-kernel value: that value is written, and the output
    # is a view of it (no copy).
    fn, args, _ = VIEW_PROGRAMS["view_is_an_output"]
    torch._dynamo.reset()
    out, session = _compiled(fn, "cpp", args)
    g = session.graphs[0]
    (group,) = g.schedule.groups
    assert len(group.materialized) == 2
    assert out[0].stride() == (1, 6)


# ---- Linear: one matmul call, and its epilogue one kernel ------------------------------------------
def _linear_args(*lead):
    return _randn(*lead, 8), _randn(16, 8), _randn(16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lead", [(6,), (2, 3)], ids=["2d", "3d"])
def test_a_plain_linear_is_one_addmm_and_no_kernel(lead, backend):
    args = _linear_args(*lead)
    out, session = _compiled(F.linear, backend, args)
    _assert_same(out, F.linear(*args))
    assert session.stats["kernel_count"] == 0 and session.stats["extern_calls"] == 1
    (group,) = session.graphs[0].schedule.groups
    assert group.kind == "extern" and "addmm" in group.name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lead", [(6,), (2, 3)], ids=["2d", "3d"])
@pytest.mark.parametrize("act", [F.gelu, F.relu, torch.tanh], ids=["gelu", "relu", "tanh"])
def test_linear_then_activation_is_a_matmul_and_one_kernel(act, lead, backend):
    def fn(x, w, b):
        return act(F.linear(x, w, b))

    args = _linear_args(*lead)
    out, session = _compiled(fn, backend, args)
    _assert_same(out, fn(*args))
    g = session.graphs[0]
    assert [grp.kind for grp in g.schedule.groups] == ["extern", "pointwise"]
    assert g.schedule.groups[0].name == "extern_aten.mm.default"
    assert any(d.reason.startswith("epilogue: addmm split") for d in g.schedule.decisions)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_linear_whose_result_is_kept_stays_one_addmm(backend):
    # The Linear's result is a graph output (as a tensor saved for the backward often is): it is
    # written to memory either way, so splitting the addmm would write the product and the sum both,
    # an extra full-size buffer (the larger peak the GPU training bench measured).
    def fn(x, w, b):
        y = F.linear(x, w, b)
        return y, F.gelu(y)

    args = _linear_args(4)
    out, session = _compiled(fn, backend, args)
    _assert_same(out, fn(*args))
    g = session.graphs[0]
    assert [grp.name for grp in g.schedule.groups][0] == "extern_aten.addmm.default"
    assert any(d.reason.startswith("extern: addmm stays one extern call") for d in g.schedule.decisions)
    assert session.stats["kernel_count"] == 1


def test_linear_gelu_matches_inductors_count():
    def fn(x, w, b):
        return F.gelu(F.linear(x, w, b))

    args = _linear_args(2, 3)
    out, names = inductor_kernels(fn, *args)
    torch.testing.assert_close(out, fn(*args))
    _, session = _compiled(fn, "cpp", args)
    assert session.stats["kernel_count"] == len(names) == 1


class _MLPBlock(nn.Module):
    """A transformer MLP block: pre-norm, Linear+GELU, Linear, residual."""

    def __init__(self, d=8, hidden=32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_mlp_block_forward_and_backward_match_eager(backend):
    torch.manual_seed(0)
    model, reference = _MLPBlock(), _MLPBlock()
    reference.load_state_dict(model.state_dict())
    x = _randn(2, 3, 8).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    compiled = cc.compile(model, backend=backend, check=True)
    out = compiled(x)
    out.square().sum().backward()
    expected = reference(x_ref)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, msg=name)
    forward = compiled.session.graphs[0]
    # layer norm; mm, [bias + GELU]; mm, [bias + residual]
    assert [g.kind for g in forward.schedule.groups] == ["reduction", "extern", "pointwise", "extern", "pointwise"]
    assert not forward.backward.fell_back


# ---- refusals name their reason ---------------------------------------------------------------------
def _refusals(fn, *args):
    _, session = _compiled(fn, "cpp", args)
    return [d.reason for d in session.graphs[0].schedule.decisions if not d.legal]


def test_refusals_name_their_kind():
    axis = _refusals(lambda x: x.sum(0, keepdim=True) + x.sum(1, keepdim=True), _randn(6, 7))
    assert any(r.startswith("reduction axis:") for r in axis), axis

    def sliced_output(x):
        y = x + 1
        return y, y[:, 1:3].exp()

    size = _refusals(sliced_output, _randn(4, 6))
    assert any(r.startswith("size:") and "24 elements" in r for r in size), size

    def around_a_matmul(x, w):
        a = x.exp()
        return a + a @ w

    dependency = _refusals(around_a_matmul, _randn(4, 4), _randn(4, 4))
    assert any(r.startswith("dependency:") for r in dependency), dependency
    assert any(r.startswith("extern:") for r in dependency), dependency


# ---- batch norm in inference ------------------------------------------------------------------------
class _BatchNormBlock(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x, residual):
        return F.relu(self.bn(x) + residual)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_inference_batch_norm_relu_and_residual_are_one_kernel(dtype, backend):
    torch.manual_seed(0)
    model = _BatchNormBlock().eval().to(dtype)
    x, residual = _randn(2, 4, 3, 5).to(dtype), _randn(2, 4, 3, 5).to(dtype)
    compiled = cc.compile(model, backend=backend, check=True)
    with torch.no_grad():
        out = compiled(x, residual)
        expected = model(x, residual)
    torch.testing.assert_close(out, expected)
    session = compiled.session
    assert session.stats["kernel_count"] == 1 and session.stats["extern_calls"] == 0
    assert session.stats["fallback_ops"] == []
    # With gradients on (an eval model inside a training program) the values are still eager's.
    torch._dynamo.reset()
    again = cc.compile(model, backend=backend)
    torch.testing.assert_close(again(x, residual), expected)
