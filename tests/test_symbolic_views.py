"""Views of a layout we chose, by index arithmetic (compiler_core/ir/lowering/views.py).

Lowering redoes a view on our own strides where our buffer is laid out differently from torch's
metadata. With symbolic sizes a meta tensor cannot do that, so views.restride does: checked here
against torch's own views of real strided tensors, with plain and with symbolic sizes, and end to end
on a graph whose buffers we lay out differently on purpose."""

from __future__ import annotations

import itertools

import pytest
import sympy
import torch

import compiler_core as cc
from compiler_core.ir.graph import Layout
from compiler_core.ir.lowering import core as lowering_core
from compiler_core.ir.lowering.views import NotAViewOfOurs, restride

aten = torch.ops.aten

# (op, arguments after the tensor): each applied to the layouts below
VIEWS = [
    (aten.slice.Tensor, (3, 1, 4)),
    (aten.slice.Tensor, (2, 0, 3, 2)),
    (aten.slice.Tensor, (-1, -3)),
    (aten.slice.Tensor, (1,)),
    (aten.select.int, (2, 2)),
    (aten.select.int, (-1, -1)),
    (aten.permute.default, ([3, 0, 2, 1],)),
    (aten.transpose.int, (1, -1)),
    (aten.unsqueeze.default, (2,)),
    (aten.unsqueeze.default, (-1,)),
    (aten.squeeze.dim, (1,)),
    (aten.squeeze.default, ()),
    (aten.view.default, ([-1, 5],)),
    (aten.view.default, ([2, 20],)),
    (aten.view.default, ([2, 2, 2, 1, 5],)),
    (aten.view.default, ([1, 2, 4, 5, 1],)),
    (aten.alias.default, ()),
]

SHAPE = (2, 1, 4, 5)


def _layouts():
    """Every dim order of SHAPE laid out densely, plus one with a gap and an offset."""
    for order in itertools.permutations(range(4)):
        stride, running = [0] * 4, 1
        for d in reversed(order):
            stride[d] = running
            running *= SHAPE[d]
        yield Layout(SHAPE, tuple(stride), 0)
    yield Layout(SHAPE, (60, 60, 15, 2), 3)


def _tensor(layout: Layout) -> torch.Tensor:
    return torch.arange(200.0).as_strided(layout.size, layout.stride, layout.offset)


@pytest.mark.parametrize("op,args", VIEWS, ids=[f"{op.__name__}{args}" for op, args in VIEWS])
def test_restride_agrees_with_torch_on_every_layout(op, args):
    checked = 0
    for layout in _layouts():
        try:
            want = op(_tensor(layout), *args)
        except RuntimeError:  # view() of a layout it cannot express: restride must refuse it too
            with pytest.raises(NotAViewOfOurs):
                restride(op, layout, args, tuple(op(torch.empty(SHAPE), *args).shape))
            continue
        try:
            got = restride(op, layout, args, tuple(want.shape))
        except NotAViewOfOurs as exc:
            raise AssertionError(f"restride refused a view torch makes: {layout}") from exc
        assert (got.size, got.stride, got.offset) == (want.shape, want.stride(), want.storage_offset()), layout
        checked += 1
    assert checked >= 2


def test_restride_with_symbolic_sizes_is_the_static_answer_at_every_size():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    layout = Layout((s0, 3, s1), (1, s0 * s1, s0), 0)  # a dim order of our own
    cases = [(aten.slice.Tensor, (2, 1, s1 - 1)), (aten.select.int, (0, 1)), (aten.permute.default, ([2, 1, 0],)),
             (aten.unsqueeze.default, (1,)), (aten.transpose.int, (0, 2))]
    for (op, args), (v0, v1) in itertools.product(cases, [(2, 5), (7, 3)]):
        bind = {s0: v0, s1: v1}
        concrete = Layout(tuple(int(sympy.sympify(s).xreplace(bind)) for s in layout.size),
                          tuple(int(sympy.sympify(s).xreplace(bind)) for s in layout.stride), 0)
        static_args = tuple(int(a.xreplace(bind)) if isinstance(a, sympy.Expr) else a for a in args)
        want = op(_tensor(concrete), *static_args)
        shape = tuple(sympy.sympify(s) for s in _symbolic_shape(op, layout.size, args))
        got = restride(op, layout, args, shape)
        subs = [int(sympy.sympify(x).xreplace(bind)) for x in (*got.stride, got.offset)]
        assert subs == [*want.stride(), want.storage_offset()], (op, args, bind)


def _symbolic_shape(op, size, args):
    size = list(size)
    if op is aten.slice.Tensor:
        dim, start, end = args
        size[dim] = end - start
    elif op is aten.select.int:
        size.pop(args[0])
    elif op is aten.permute.default:
        size = [size[d] for d in args[0]]
    elif op is aten.unsqueeze.default:
        size.insert(args[0], 1)
    elif op is aten.transpose.int:
        size[args[0]], size[args[1]] = size[args[1]], size[args[0]]
    return size


def test_a_symbolic_start_that_may_be_negative_is_refused():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    with pytest.raises(NotAViewOfOurs, match="may be negative"):
        restride(aten.slice.Tensor, Layout((s0, 4), (4, 1)), (0, 3 - s0), (s0, 4))


def _pad_then_slice(mask: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """What SDPA's memory-efficient path does to an attention mask on the GPU: pad the last dim to a
    multiple of 8, slice it back to the sequence length."""
    s = mask.shape[-1]
    padded = torch.nn.functional.pad(mask * 2, (0, (8 - s % 8) % 8))
    return scores + padded[..., :s].transpose(-1, -2).unsqueeze(1)[:, 0]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_views_of_a_buffer_we_lay_out_differently_match_eager(monkeypatch, dynamic):
    """Our padded buffer is stored column-major in its last two dims, unlike torch's metadata: every
    view after it must be redone on our strides, with plain and with symbolic sizes."""
    made = lowering_core.Lowering.new_buffer
    flipped = []

    def column_major(self, node, val):
        buf = made(self, node, val)
        if node.target is not aten.constant_pad_nd.default:
            return buf
        size = buf.layout.size
        stride = (size[1] * size[2], 1, size[1])
        flipped.append(node.name)
        return type(buf)(buf.name, buf.dtype, Layout(size, stride, 0), buf.device, kind=buf.kind)

    monkeypatch.setattr(lowering_core.Lowering, "new_buffer", column_major)
    compiled = cc.compile(_pad_then_slice, dynamic=dynamic)
    for b, s in ((2, 5), (3, 11), (2, 16)):
        mask, scores = torch.randn(b, s, s), torch.randn(b, s, s)
        torch.testing.assert_close(compiled(mask, scores), _pad_then_slice(mask, scores))
    record = compiled.session.graphs[0]
    assert flipped and not record.fell_back, compiled.session.messages
    assert record.symbolic == dynamic, compiled.session.messages
