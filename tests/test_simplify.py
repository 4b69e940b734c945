"""The simplify plan pass (schedule/simplify.py) and the record of every plan pass.

Each rule is exact, so the tests compare bits with eager PyTorch (torch.equal), on inputs with
signed zeros, infinities and NaN, and check that the rewritten expressions are gone from the kernel.
"""

import math

import pytest
import torch

import compiler_core as cc
from compiler_core.ir.index import Index
from compiler_core.ir.values import Cast, Constant, IndexValue, Load, Op, format_value, walk
from compiler_core.schedule import simplify
from compiler_core.schedule.plan_passes import describe_passes
from compiler_core.schedule.simplify import simplify_value

F32, I64 = torch.float32, torch.int64
X = Load("x", Index.var("x0"), F32)
C = Op("lt", (X, Constant(0.5, F32)), torch.bool)


def _const(v, dtype=F32):
    return Constant(v, dtype)


@pytest.mark.parametrize("tree,expected,rule", [
    (Op("mul", (X, _const(1.0)), F32), X, simplify.MUL_ONE),
    (Op("mul", (_const(1), X), F32), X, simplify.MUL_ONE),
    (Op("truediv", (X, _const(1.0)), F32), X, simplify.DIV_ONE),
    (Op("sub", (X, _const(0.0)), F32), X, simplify.SUB_ZERO),
    (Op("add", (X, _const(-0.0)), F32), X, simplify.SUB_ZERO),
    (Op("neg", (Op("neg", (X,), F32),), F32), X, simplify.DOUBLE_NEG),
    (Cast(X, F32), X, simplify.SAME_CAST),
    (Op("where", (C, Op("where", (C, X, _const(2.0)), F32), _const(3.0)), F32),
     Op("where", (C, X, _const(3.0)), F32), simplify.NESTED_WHERE),
    (Op("where", (C, _const(3.0), Op("where", (C, X, _const(2.0)), F32)), F32),
     Op("where", (C, _const(3.0), _const(2.0)), F32), simplify.NESTED_WHERE),
    (Op("mul", (_const(3.0), _const(0.1)), F32), _const((torch.tensor(3.0) * torch.tensor(0.1)).item()), simplify.FOLD),
    (Op("add", (Load("i", Index.var("x0"), I64), _const(0, I64)), I64), Load("i", Index.var("x0"), I64),
     simplify.ADD_ZERO_INT),
    (Op("lt", (IndexValue(Index.of(3), I64), _const(4, I64)), torch.bool), _const(True, torch.bool),
     simplify.CONSTANT_POSITION),
    (Op("lt", (_const(0, I64), _const(1, I64)), torch.bool), _const(True, torch.bool), simplify.FOLD_COMPARE),
    (Op("ge", (IndexValue(Index.of(0), I64), _const(1, I64)), torch.bool), _const(False, torch.bool),
     simplify.CONSTANT_POSITION),
    (Op("logical_and", (C, _const(True, torch.bool)), torch.bool), C, simplify.BOOL_IDENTITY),
    (Op("logical_and", (_const(False, torch.bool), C), torch.bool), _const(False, torch.bool),
     simplify.BOOL_IDENTITY),
    (Op("logical_or", (C, _const(False, torch.bool)), torch.bool), C, simplify.BOOL_IDENTITY),
    (Op("where", (_const(True, torch.bool), X, _const(2.0)), F32), X, simplify.CONSTANT_WHERE),
    (Op("where", (_const(False, torch.bool), X, _const(2.0)), F32), _const(2.0), simplify.CONSTANT_WHERE),
])
def test_each_rule(tree, expected, rule):
    got, counts = simplify_value(tree)
    assert got == expected, format_value(got)
    assert counts[rule] >= 1


@pytest.mark.parametrize("tree", [
    Op("add", (X, _const(0.0)), F32),  # -0.0 + 0.0 is +0.0: not exact
    Op("mul", (X, _const(0.0)), F32),  # inf * 0 is NaN
    Op("sub", (X, _const(-0.0)), F32),  # -0.0 - -0.0 is +0.0
    Op("mul", (Load("b", Index.var("x0"), torch.bfloat16), _const(1.0)), F32),  # a bf16 load computed in fp32
    Op("where", (C, Op("where", (Op("gt", (X, _const(0.0)), torch.bool), X, _const(1.0)), F32), _const(0.0)), F32),
    Op("truediv", (_const(1.0), _const(0.0)), F32),  # folding to inf is left to the op
    Cast(Cast(X, torch.bfloat16), F32),  # a real rounding
])
def test_what_is_not_exact_stays(tree):
    got, counts = simplify_value(tree)
    assert got == tree and not counts


def test_folding_rounds_as_the_op_does():
    got, _ = simplify_value(Op("mul", (_const(3.0), _const(0.1)), F32))
    assert got.value == (torch.tensor(3.0) * torch.tensor(0.1)).item()  # fp32 product, not 0.30000000000000004
    got, _ = simplify_value(Op("add", (_const(2**62, I64), _const(2**62, I64)), I64))
    assert got.value == (torch.tensor(2**62) + torch.tensor(2**62)).item()  # wraps as int64 does


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_functions_of_constants_are_folded_to_eagers_values(backend):
    """A float function whose arguments are all constants (two `full_like`s into atan2) is computed at
    compile time by torch: the Triton printer once wrote a helper call on two Python floats, which
    failed to run. Every folded value must be eager's (the fp32 function of the fp32 constants)."""
    if backend == "triton":
        pytest.importorskip("triton")
    x = torch.randn(16)

    def f(x):
        c = torch.full_like(x, 0.7)
        return (x + torch.atan2(c, torch.full_like(x, -2.0)) + torch.hypot(c, c) + c.exp() * c.sigmoid()
                + torch.pow(c, torch.full_like(x, 1.3)) + c.tan() + torch.copysign(c, torch.full_like(x, -1.0)))

    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x), f(x), rtol=1e-6, atol=1e-6)
    assert compiled.session.stats["kernel_count"] == 1 and compiled.session.stats["fallback_ops"] == []


def _program(x, i):
    a = (x * 1.0) / 1.0 - 0.0
    b = torch.neg(torch.neg(torch.sin(a)))
    c = torch.where(x < 0.5, torch.where(x < 0.5, b, 2.0), 3.0)
    return c.float() * (3.0 * 0.1), (i + 0) * 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_simplified_kernels_give_eagers_bits(backend):
    x = torch.tensor([0.0, -0.0, 1.5, -2.0, math.inf, -math.inf, math.nan, 0.25] * 8)
    i = torch.arange(64) - 30
    compiled = cc.compile(_program, backend=backend)
    for got, expected in zip(compiled(x, i), _program(x, i)):
        assert torch.equal(got.isnan(), expected.isnan())
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(expected))
        # -0.0 stays -0.0 (a NaN's sign bit is no part of its value: sin(-inf) is NaN either way)
        assert torch.equal(torch.signbit(got)[~got.isnan()], torch.signbit(expected)[~expected.isnan()])
    kernels = compiled.session.kernels
    assert any("simplify: " in k.source for k in kernels)
    for k in kernels:
        assert "* 1.0)" not in k.source and "/ 1.0)" not in k.source, k.source


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_every_kernel_records_its_passes(backend):
    compiled = cc.compile(lambda x: ((x * 1.0).sum(0), torch.relu(x)), backend=backend)
    compiled(torch.randn(600, 80))
    for k in compiled.session.kernels:
        names = [r.name for r in k.passes]
        expected = ["built", "merge reductions", "simplify", "bounds", "common subexpressions", "loop order",
                    "index width", "reduction layout"]
        expected += ["reduction split", "online softmax", "welford"] if backend == "triton" else []
        assert names == expected, names
        assert k.passes[-1].after == k.plan.pretty()  # the last record is the plan the source prints
        assert k.passes[0].changed and k.passes[6].changed  # the index width always adds its note
        # one reduction; no gathered position; nothing written twice; row-major stores
        assert not any(k.passes[i].changed for i in (1, 3, 4, 5))
    (reduction,) = [k for k in compiled.session.kernels if k.kind == "reduction"]
    log = describe_passes(reduction.passes)
    assert "== simplify\n   simplify: x * 1 -> x (1x)" in log
    assert "-" in log and "+# index: int32" in log  # the diff of the printed plan
    assert "== reduction layout\n   reduction layout: columns" in log


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_row_summed_twice_is_summed_once_and_the_pass_says_so(backend):
    """A row's mean (a sum, then a division) and its sum are the same reduction of the same values: the
    merge-reductions pass keeps one, and the log shows the plan with both, then with one. (layer_norm's
    mean and variance share their sums by construction now: decomp/moments.py.)"""
    def f(x, w, b):
        return (x - x.mean(-1, keepdim=True)) * w + x.sum(-1, keepdim=True) * b

    torch.manual_seed(0)
    x, w, b = torch.randn(64, 96), torch.randn(96), torch.randn(96)
    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x, w, b), f(x, w, b))
    (kernel,) = compiled.session.kernels
    merge = next(r for r in kernel.passes if r.name == "merge reductions")
    assert merge.changed and "merge reductions:" in kernel.plan.pretty()
    built = next(r for r in kernel.passes if r.name == "built")
    assert built.after.count("= sum(") > kernel.plan.pretty().count("= sum(")  # a sum fewer after the pass


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_an_expression_written_twice_is_one_value_of_the_plan_and_the_pass_says_so(backend):
    """`(x * 2).exp()` twice in the source (two FX nodes, two equal trees once inlined): the common
    subexpressions pass makes them one value of the plan, which both printers compute once, and logs it."""
    def f(x):
        return (x * 2).exp() + (x * 2).exp().sin()

    x = torch.randn(64, 96)
    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x), f(x))
    (kernel,) = compiled.session.kernels
    exps = {id(v) for step in kernel.plan.steps for v in walk(step.value) if isinstance(v, Op) and v.op == "exp"}
    assert len(exps) == 1, kernel.plan.pretty()
    (note,) = [n for n in kernel.plan.notes if n.startswith("common subexpressions: ")]
    assert "1 written more than once" in note and "exp(" in note and "(2 uses)" in note, note
    assert "== common subexpressions\n   common subexpressions: 1 written" in describe_passes(kernel.passes)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_gathered_positions_are_simplified_too(backend):
    # An upsample's coordinates reach its gathers as `to_int64(i) * 1 + 0`: the positions of a load
    # (and its mask) are values the pass rewrites, as SegFormer's loss kernel showed.
    import re

    import torch.nn.functional as F

    def upsampled_loss(logits, labels):
        up = F.interpolate(logits, size=(24, 24), mode="bilinear", align_corners=False)
        return F.cross_entropy(up, labels, ignore_index=255)

    torch.manual_seed(0)
    logits, labels = torch.randn(2, 5, 6, 6), torch.randint(0, 5, (2, 24, 24))
    labels[0, :3] = 255
    compiled = cc.compile(upsampled_loss, backend=backend)
    torch.testing.assert_close(compiled(logits, labels), upsampled_loss(logits, labels))
    positions = [t.value for k in compiled.session.kernels for step in k.plan.steps for value in step.values()
                 for v in walk(value) if isinstance(v, Load) for t in v.indirect]
    assert positions, "the upsample's gathers are in the kernels"
    for position in positions:
        for v in walk(position):
            assert not (isinstance(v, Op) and v.op in ("mul", "add") and any(
                isinstance(a, Constant) and a.value == (1 if v.op == "mul" else 0) for a in v.args)), \
                format_value(position)
    for k in compiled.session.kernels:
        assert not re.search(r"\* 1\)|\+ 0\)", k.source), k.source


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_select_of_a_concatenation_reads_its_piece_directly(backend):
    """`cat([x[..., None], y[..., None]], -1)[..., 0]` (how a complex value's real part is read from its
    pair) is x: the piece a constant position falls in is known when the kernel is printed. Before the
    constant-position rule, Triton's interpreter rejected the `block & (0 < 1)` load mask it made."""

    def fn(x, y, c):
        pair = torch.cat([x.unsqueeze(-1), y.unsqueeze(-1)], -1)
        return torch.cat([torch.where(c, x, y), pair[..., 0] + 1, pair[..., 1] * 2], 1)

    x, y = torch.randn(5, 6), torch.randn(5, 6)
    compiled = cc.compile(fn, backend=backend)
    assert torch.equal(compiled(x, y, x > 0), fn(x, y, x > 0))
    (kernel,) = compiled.session.kernels
    assert "tl.full([]" not in kernel.source, kernel.source  # no position left to compare at run time
    log = describe_passes(kernel.passes)
    assert simplify.CONSTANT_POSITION in log, log


def test_a_constant_position_used_as_a_value_keeps_its_integer_type_on_triton():
    """argmax of a 0-d tensor: its index is the constant position 0 used as an int64 value, beside
    int64's largest value as the min-reduction's identity. Folded into a bare literal it was int32 in
    Triton, and the reduction raised 'Scalar 9223372036854775807 is out of range for type int32'."""
    x = torch.randn(())
    compiled = cc.compile(lambda t: torch.argmax(t) + torch.argmin(t.reshape(1, 1)), backend="triton")
    assert torch.equal(compiled(x), torch.argmax(x) + torch.argmin(x.reshape(1, 1)))

