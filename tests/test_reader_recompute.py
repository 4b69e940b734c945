"""Cheap values recomputed by readers in other kernels (schedule/reader_recompute.py): a pointwise value
read by kernels of different iteration spaces (a row reduction and a column reduction) is computed
again in each from the buffers it comes from, not stored as a tensor of its own for them. Values
against eager, the buffers the host program allocates, and the case left stored, on both backends."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


def allocations(compiled, part="forward"):
    """(shape, dtype) of the buffers the host programs of `part` allocate."""
    return [(tuple(s.buffer.layout.size), s.buffer.dtype) for g in compiled.session.all_records() if g.part == part
            for s in g.wrapper.statements if type(s).__name__ == "Allocate"]


def recompute_notes(compiled, part="forward"):
    return [d.reason for g in compiled.session.all_records() if g.part == part and g.schedule is not None
            for d in g.schedule.decisions if d.reason.startswith("recompute:")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_product_read_by_a_row_sum_and_a_column_sum_is_computed_in_both_kernels(backend):
    torch.manual_seed(0)
    x, w = torch.randn(96, 80), torch.randn(80)

    def f(x, w):
        y = x * w  # read along rows and along columns: two kernels
        return y.sum(0), y.sum(1)

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(x, w), f(x, w)):
        torch.testing.assert_close(got, expected)
    assert ((96, 80), torch.float32) not in allocations(compiled), allocations(compiled)
    notes = recompute_notes(compiled)
    assert len(notes) == 1 and "never stored" in notes[0], notes


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_dearer_to_recompute_than_to_load_stays_stored(backend):
    torch.manual_seed(1)
    x, z, u = torch.randn(64, 48), torch.randn(64, 48), torch.randn(64, 48)

    def f(x, z, u):
        y = x * z + u  # three float32 loads an element to recompute, one to load it
        return y.sum(0), y.sum(1)

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(x, z, u), f(x, z, u)):
        torch.testing.assert_close(got, expected)
    assert ((64, 48), torch.float32) in allocations(compiled)
    assert recompute_notes(compiled) == []


def _layer_norm_step(backend, dtype):
    """Layer norm forward and backward compiled: (compiled, loss, gradients, eager's loss, eager's gradients)."""
    torch.manual_seed(2)
    rows, d = 128, 256
    x = torch.randn(rows, d, dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(d, dtype=dtype)).requires_grad_()
    b = (0.1 * torch.randn(d, dtype=dtype)).requires_grad_()
    residual = torch.randn(rows, d, dtype=dtype)

    def f(x, w, b, residual):
        return (F.layer_norm(x, (d,), w, b) * residual).float().square().mean()

    compiled = cc.compile(f, backend=backend)
    got = compiled(x, w, b, residual)
    got.backward()
    grads = [t.grad for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    expected = f(x, w, b, residual)
    expected.backward()
    return compiled, got, grads, expected, [t.grad for t in (x, w, b)]


def stored_bytes(compiled, part):
    return sum(s.buffer.nbytes for g in compiled.session.all_records() if g.part == part
               for s in g.wrapper.statements if type(s).__name__ == "Allocate")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_backward_recomputes_the_normalized_input_and_its_gradients_match_eager(backend, dtype,
                                                                                           monkeypatch):
    """The normalized input (and, in bf16, the weighted gradient) feed the weight's column sums and the
    input gradient's row sums: without the pass they are stored as float32 tensors of the input's size."""
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-4}
    compiled, got, grads, expected, expected_grads = _layer_norm_step(backend, dtype)
    torch.testing.assert_close(got, expected, **tol)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, **tol)
    assert recompute_notes(compiled, "backward"), "no value recomputed in layer norm's backward"

    import compiler_core.schedule.epilogues as epilogues
    monkeypatch.setattr(epilogues, "recompute_for_readers", lambda graph, sched: (graph, ()))
    without, got, grads, _, _ = _layer_norm_step(backend, dtype)
    torch.testing.assert_close(got, expected, **tol)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, **tol)
    saved = stored_bytes(without, "backward") - stored_bytes(compiled, "backward")
    # at least one float32 tensor of the input's size (128 x 256) fewer
    assert saved >= 128 * 256 * 4, (allocations(compiled, "backward"), allocations(without, "backward"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_readers_through_a_cat_and_a_transpose_recompute_the_right_elements(backend):
    """The recomputed value is placed at the element each load asks for: through a cat (a masked load,
    0 where the other input is read) and through a transpose."""
    torch.manual_seed(3)
    x, w, z = torch.randn(40, 24), torch.randn(24), torch.randn(40, 8)

    def f(x, w, z):
        y = x * w
        return y.sum(0), torch.cat([z, y], 1).sum(1), (y.t() * 2).sum(1), (y.t() + 1).sum(0)

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(x, w, z), f(x, w, z)):
        torch.testing.assert_close(got, expected)
    assert ((40, 24), torch.float32) not in allocations(compiled), allocations(compiled)
    assert recompute_notes(compiled)


def test_a_recomputation_under_a_cat_mask_loads_nothing_outside_its_buffers():
    """Where a cat reads its other input, the recomputed value's own loads would point before the
    start of their buffer: each such load must carry the cat's mask (unmasked, the GPU reads out of
    bounds and the C++ kernel reads memory it does not own)."""
    from compiler_core.ir.values import Load, walk
    from compiler_core.schedule.graph_rewrite import loop_ranges

    x, w, z = torch.randn(40, 24), torch.randn(24), torch.randn(40, 8)

    def f(x, w, z):
        y = x * w
        return y.sum(0), torch.cat([z, y], 1).sum(1)

    compiled = cc.compile(f, backend="cpp")
    for got, expected in zip(compiled(x, w, z), f(x, w, z)):
        torch.testing.assert_close(got, expected)
    record = compiled.session.graphs[0]
    assert recompute_notes(compiled)
    spans = record.loops.element_spans
    checked = 0
    for node in record.loops.nodes:
        if node.body is None:
            continue
        for load in (v for v in walk(node.body) if isinstance(v, Load)):
            low, high = load.index.bounds(loop_ranges(node))
            if low < spans[load.buffer][0] or high > spans[load.buffer][1]:
                assert load.mask is not None, f"{node.name} loads {load.buffer} at {load.index} without a mask"
                checked += 1
    assert checked >= 2  # z's and x's reads in the cat's row sum
