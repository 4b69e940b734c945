"""Memory given back early: outputs written over an input that dies in the same kernel (in place), and
graph inputs the host program drops after their last use. Each case checks the values, with the
memory checking mode on (poisoned frees, overlap checks), against eager PyTorch."""

import pytest
import torch

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _only_graph(session):
    (record,) = session.graphs
    return record


def _swish_of_matmul(x, w):
    y = x @ w
    return y * torch.sigmoid(y) + 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_pointwise_kernel_writes_over_the_matmul_it_reads_last(backend):
    x, w = torch.randn(48, 32), torch.randn(32, 40)
    session = cc.explain(_swish_of_matmul, x, w, backend=backend)
    plan = _only_graph(session).memory
    assert len(plan.written_over) == 1, plan.pretty()
    out, donor = plan.written_over[0]
    assert "written over" in plan.pretty()
    # The kernel reads and writes through one pointer: the donor is no parameter of it.
    (kernel,) = session.kernels
    assert donor not in kernel.signature and out in kernel.signature
    got = cc.compile(_swish_of_matmul, backend=backend, debug="memory")(x, w)
    torch.testing.assert_close(got, _swish_of_matmul(x, w))


def _plus_transpose(x, w):
    y = x @ w  # square
    return torch.sin(y) + y.t()


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_write_over_an_input_read_at_other_elements(backend):
    # Element (i, j) of the output needs y[j, i]: written in place, a row would read its new values.
    x, w = torch.randn(40, 40), torch.randn(40, 40)
    plan = _only_graph(cc.explain(_plus_transpose, x, w, backend=backend)).memory
    assert plan.written_over == ()
    got = cc.compile(_plus_transpose, backend=backend, debug="memory")(x, w)
    torch.testing.assert_close(got, _plus_transpose(x, w))


def _scaled_and_row_sums(x, w):
    y = x @ w
    g = y * torch.sigmoid(y)
    return g, g.sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduction_kernel_writes_over_its_input_and_still_sums_the_old_values(backend):
    # The sum re-reads y after g is stored: the same load, served from the value read before the store.
    x, w = torch.randn(24, 16), torch.randn(16, 96)
    plan = _only_graph(cc.explain(_scaled_and_row_sums, x, w, backend=backend)).memory
    assert len(plan.written_over) == 1, plan.pretty()
    got = cc.compile(_scaled_and_row_sums, backend=backend, debug="memory")(x, w)
    for a, b in zip(got, _scaled_and_row_sums(x, w)):
        torch.testing.assert_close(a, b)


def test_check_mode_writes_nothing_in_place_and_keeps_the_arguments():
    # The check mode re-runs each kernel's FX nodes on its inputs after the launch.
    x, w = torch.randn(48, 32), torch.randn(32, 40)
    compiled = cc.compile(_swish_of_matmul, backend="cpp", check=True)
    torch.testing.assert_close(compiled(x, w), _swish_of_matmul(x, w))
    record = _only_graph(compiled.session)
    assert record.memory.written_over == ()
    assert "args.clear()" not in record.wrapper.source


def _mlp_loss(x, w1, w2):
    h = torch.nn.functional.gelu(x @ w1)
    return (h @ w2).square().mean()


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_drops_saved_activations_after_their_last_use(backend):
    x = torch.randn(32, 16)
    w1 = torch.randn(16, 64, requires_grad=True)
    w2 = torch.randn(64, 8, requires_grad=True)
    session = cc.explain(_mlp_loss, x, w1, w2, backend=backend, train=True)
    backward = _only_graph(session).backward
    inputs = {b.name for b in backward.loops.inputs if b.kind == "input"}
    released = {n for _, names in backward.memory.frees for n in names if n in inputs}
    saved = {n for n in inputs if not n.startswith("tangents")}  # the rest are the forward's saved tensors
    assert released & saved, backward.memory.pretty()  # a saved activation is let go before the return
    assert "args.clear()" in backward.wrapper.source
    # ... and the gradients computed after it are right.
    ref = [t.detach().clone().requires_grad_(t.requires_grad) for t in (x, w1, w2)]
    _mlp_loss(*ref).backward()
    compiled = cc.compile(_mlp_loss, backend=backend, debug="memory")
    for _ in range(2):  # the second call runs the cached program with the same host code
        for t in (w1, w2):
            t.grad = None
        compiled(x, w1, w2).backward()
        torch.testing.assert_close(w1.grad, ref[1].grad)
        torch.testing.assert_close(w2.grad, ref[2].grad)


def _matmul_chain(x, w):
    a = torch.mm(x, w)
    b = torch.mm(a.sin(), w)
    c = torch.mm(b.cos(), w)
    return torch.mm(c.exp(), w)


@pytest.mark.parametrize("debug", [None, "memory"])
def test_a_storage_handed_on_in_the_same_layout_is_the_same_tensor_and_values_match(debug):
    """A buffer reusing a dead buffer's storage in the very layout the donor has takes the donor's tensor
    itself (no view made per call); the values must still be eager's, with the memory checking mode too
    (poisoned frees, overlap checks)."""
    torch.manual_seed(0)
    x, w = torch.randn(32, 32) * 0.3, torch.randn(32, 32) * 0.3
    compiled = cc.compile(_matmul_chain, debug=debug)
    torch.testing.assert_close(compiled(x, w), _matmul_chain(x, w), rtol=1e-5, atol=1e-5)
    source = _only_graph(compiled.session).wrapper.source
    same = [line for line in source.splitlines() if "as laid out" in line]
    assert same, source
    assert all("rt." not in line and line.split("=")[1].split("#")[0].strip().startswith("v_") for line in same)
