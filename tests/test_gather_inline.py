"""Gathers through pointwise producers (schedule/gather_inline.py): the gather reads the producer's
inputs at the gathered positions, so a tensor of which a few elements are read is not stored whole.
Values, errors for positions out of range, and the cases left stored, on both backends."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.ir.values import Load, walk

BACKENDS = ["cpp", "triton"]


def stored_shapes(compiled, part="forward"):
    """Shapes of the buffers the host programs of `part` allocate."""
    return [tuple(s.buffer.layout.size) for g in compiled.session.all_records() if g.part == part
            for s in g.wrapper.statements if type(s).__name__ == "Allocate"]


def gather_notes(compiled):
    return [d.reason for g in compiled.session.all_records() if g.schedule is not None
            for d in g.schedule.decisions if d.reason.startswith("gather:")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_forward_never_stores_the_log_softmax_and_matches_eager(backend):
    torch.manual_seed(0)
    rows, vocab = 24, 3000
    logits = (torch.randn(rows, vocab) * 3).requires_grad_()
    target = torch.randint(0, vocab, (rows,))
    target[5] = -100  # ignored, as in a padded batch

    def loss(logits, target):
        return F.cross_entropy(logits, target)

    compiled = cc.compile(loss, backend=backend)
    got = compiled(logits, target)
    got.backward()
    grad, logits.grad = logits.grad, None
    expected = loss(logits, target)
    expected.backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(grad, logits.grad)
    assert (rows, vocab) not in stored_shapes(compiled), stored_shapes(compiled)
    notes = gather_notes(compiled)
    assert notes and "is never stored" in notes[0], notes


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_cross_entropy_and_nll_of_log_softmax_match_eager(backend):
    torch.manual_seed(1)
    x, t = torch.randn(3, 7, 500), torch.randint(0, 500, (3, 7))

    def f(x, t):
        logp = torch.log_softmax(x, -1)
        return F.nll_loss(logp.flatten(0, 1), t.flatten(), reduction="none"), F.cross_entropy(x.transpose(1, 2), t)

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(x, t), f(x, t)):
        torch.testing.assert_close(got, expected)
    assert (3, 7, 500) not in stored_shapes(compiled) and (21, 500) not in stored_shapes(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["gather_dim0", "gather_dim1", "take_negative", "index_rows", "embedding"])
def test_gathers_of_pointwise_values_match_eager(case, backend):
    """`take` reads the flattened tensor: its position walks both dimensions (a division and a
    modulo, not one stride), so its producer stays stored; the others read it at the positions."""
    torch.manual_seed(2)
    a, b = torch.randn(6, 9), torch.randn(6, 1)
    cases = {
        "gather_dim0": (lambda a, b, i: torch.gather(a * 2 + b, 0, i), torch.randint(0, 6, (3, 9))),
        "gather_dim1": (lambda a, b, i: torch.gather(torch.exp(a - b), 1, i), torch.randint(0, 9, (6, 4))),
        "take_negative": (lambda a, b, i: torch.take(a.sin() * b, i), torch.tensor([-1, 0, 53, -54, 7])),
        "index_rows": (lambda a, b, i: (a + b)[i], torch.tensor([5, -6, 0, 2])),
        "embedding": (lambda a, b, i: F.embedding(i, (a * b).t().contiguous().t() + 1), torch.tensor([[1, 5], [0, 3]])),
    }
    fn, index = cases[case]
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(a, b, index), fn(a, b, index))
    assert compiled.session.stats["extern_calls"] == 0
    assert bool(gather_notes(compiled)) == (case != "take_negative"), gather_notes(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,index,error", [
    (lambda a, i: torch.gather(a + 1, 0, i), torch.tensor([[6, 0, 0]]), RuntimeError),
    (lambda a, i: torch.gather(a.exp(), 1, i), torch.tensor([[-1], [0]]), RuntimeError),
    (lambda a, i: (a * 3)[i], torch.tensor([0, -7]), IndexError),
], ids=["gather_high", "gather_negative", "index"])
def test_a_position_out_of_range_still_raises_eagers_error(fn, index, error, backend):
    a = torch.randn(6, 3)
    with pytest.raises(error):
        fn(a, index)
    compiled = cc.compile(fn, backend=backend)
    with pytest.raises(error):
        compiled(a, index)
    good = torch.zeros_like(index)
    torch.testing.assert_close(compiled(a, good), fn(a, good))
    assert gather_notes(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producer_read_elsewhere_stays_stored_and_a_position_used_as_a_value_stays_a_read(backend):
    torch.manual_seed(3)
    a, i = torch.randn(5, 8), torch.randint(0, 8, (5, 2))

    def read_twice(a, i):
        y = a * 2 - 1
        return torch.gather(y, 1, i), y.t().contiguous()

    compiled = cc.compile(read_twice, backend=backend)
    for got, expected in zip(compiled(a, i), read_twice(a, i)):
        torch.testing.assert_close(got, expected)
    assert any("still stored for its other readers" in n for n in gather_notes(compiled)), gather_notes(compiled)

    def position_as_value(a, i):
        # `arange(8) < 3` is the column number as a value: recomputed where it is read (index_inline),
        # it is an index value of the where; at the gathered positions it is the position itself
        # compared with 3, so the gather reads only `a` and neither the mask nor y is stored.
        y = torch.where(torch.arange(8) < 3, a, -a)
        return torch.gather(y, 1, i)

    compiled = cc.compile(position_as_value, backend=backend)
    torch.testing.assert_close(compiled(a, i), position_as_value(a, i))
    assert gather_notes(compiled)
    loops = compiled.session.graphs[0].loops
    assert [n.kind for n in loops.nodes] == ["pointwise"], loops.pretty()
    gathered = {v.buffer for n in loops.nodes for v in walk(n.body) if isinstance(v, Load) and v.indirect}
    assert gathered == {loops.inputs[0].name}, (gathered, loops.pretty())

    def negative_positions(a, i):  # index wraps a negative position: the value is the wrapped one
        return torch.where(torch.arange(8) < 3, a, -a)[:, i]

    neg = torch.tensor([-1, 2, -8])
    compiled = cc.compile(negative_positions, backend=backend)
    torch.testing.assert_close(compiled(a, neg), negative_positions(a, neg))
    assert len(compiled.session.graphs[0].loops.nodes) == 1 and gather_notes(compiled)


def test_fusion_off_keeps_every_node():
    a, i = torch.randn(4, 5), torch.tensor([[0, 4]] * 4)
    compiled = cc.compile(lambda a, i: torch.gather(a + 1, 1, i), backend="cpp", fusion=False)
    torch.testing.assert_close(compiled(a, i), torch.gather(a + 1, 1, i))
    assert not gather_notes(compiled)
