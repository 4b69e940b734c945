"""The Welford plan pass (schedule/plan_passes.py): a row too long for one block's registers takes its
sum (the mean) and its sum of squares around the mean in one pass over memory instead of two, on the
Triton backend (layer norm, var, std, var_mean). The values must stay eager's, edge rows included
(NaN, +inf, -inf, a large offset, a constant row, a last piece shorter than the block)."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.schedule import plan_passes

WIDE = plan_passes.PERSISTENT_MAX_RBLOCK + 3616  # 20,000: looped over in pieces, the last one short
INF_ROWS = [3, 4]  # rows of edge_rows holding an inf


def edge_rows(width: int, offset: float = 1000.0) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(8, width) * 3
    x[1] += offset  # a mean far from 0: a sum of squares around 0 would cancel
    x[2, width // 2] = float("nan")
    x[3, 17] = float("inf")  # eager: var NaN
    x[4, -1] = float("-inf")  # in the last, short piece
    x[5] = 0.75  # constant: variance (nearly) 0
    x[6, : width // 2] = 0.0  # half the row empty
    x[7, -1] = 500.0  # an outlier in the last piece
    return x


def kernels(compiled):
    return [k for g in compiled.session.graphs for k in g.kernels]


def welford_notes(compiled) -> list[str]:
    return [n for k in kernels(compiled) for n in k.plan.notes if n.startswith("welford")]


def test_layer_norm_of_long_rows_takes_one_pass_for_mean_and_variance_and_matches_eager():
    torch.manual_seed(1)
    w, b = torch.randn(WIDE), torch.randn(WIDE)

    def f(x, w, b):
        return F.layer_norm(x, (WIDE,), w, b)

    # The outputs carry the mean's own rounding (a plain fp32 sum, this pass leaves it): ~1e-4 for an
    # offset of 1000, before and after; the variance of such a row is checked in the var tests.
    x = edge_rows(WIDE, offset=50.0)
    compiled = cc.compile(f, backend="triton")
    torch.testing.assert_close(compiled(x, w, b), f(x, w, b), equal_nan=True)
    (kernel,) = kernels(compiled)
    notes = welford_notes(compiled)
    assert notes and "3 passes over memory -> 2" in notes[0], kernel.plan.notes
    assert kernel.source.count("for roffset in") == 2  # statistics, then the outputs
    assert [r.name for r in kernel.passes if r.name == "welford"], "the pass is missing from the log"
    assert "[welford: running count, mean and M2 per lane" in kernel.plan.pretty()


@pytest.mark.parametrize("correction", [0, 1])
def test_var_mean_var_and_std_of_long_rows_take_one_pass_and_match_eager(correction):
    def f(x):
        var, mean = torch.var_mean(x, -1, correction=correction)
        return var, mean, torch.var(x, -1, correction=correction), torch.std(x, -1, correction=correction)

    x = edge_rows(WIDE)
    compiled = cc.compile(f, backend="triton")
    got, expected = compiled(x), f(x)
    for k in (0, 2, 3):
        torch.testing.assert_close(got[k], expected[k], equal_nan=True)
    # var_mean's mean of a row holding an inf: eager's Welford gives NaN, our plain sum +-inf (both
    # backends, short rows too: not this pass's doing); the other rows must agree.
    finite = [r for r in range(8) if r not in INF_ROWS]
    torch.testing.assert_close(got[1][finite], expected[1][finite], equal_nan=True)
    assert got[0][INF_ROWS].isnan().all()
    notes = welford_notes(compiled)
    assert notes and "2 passes over memory -> 1" in notes[0], notes
    assert all(k.source.count("for roffset in") == 1 for k in kernels(compiled))


def test_a_row_one_element_longer_than_the_persistent_limit_matches_eager():
    """16,385 elements: eight full pieces and one of a single element; the masked lanes must not count."""
    def f(x):
        return torch.var_mean(x, -1, correction=0)

    width = plan_passes.PERSISTENT_MAX_RBLOCK + 1
    x = edge_rows(width)[[0, 1, 5, 7]]
    compiled = cc.compile(f, backend="triton")
    for got, expected in zip(compiled(x), f(x)):
        torch.testing.assert_close(got, expected)
    assert welford_notes(compiled)


def test_bf16_layer_norm_of_long_rows_matches_eager():
    torch.manual_seed(2)
    x = (torch.randn(4, WIDE) * 2 + 3).to(torch.bfloat16)

    def f(x):
        return F.layer_norm(x, (WIDE,))

    compiled = cc.compile(f, backend="triton")
    torch.testing.assert_close(compiled(x), f(x))
    assert welford_notes(compiled)


def test_a_hand_written_variance_centred_either_way_is_rewritten():
    """((x - m)**2) and ((m - x)**2) with m = x.mean(): the square of the difference, whichever side the
    mean is on; both sums of squares join the mean's pass."""
    def f(x):
        m = x.mean(-1, keepdim=True)
        return ((x - m) ** 2).mean(-1) + ((m - x) ** 2).sum(-1)

    x = edge_rows(WIDE)
    compiled = cc.compile(f, backend="triton")
    torch.testing.assert_close(compiled(x), f(x), equal_nan=True)
    (note,) = welford_notes(compiled)
    assert "2 passes over memory -> 1" in note, note
    (kernel,) = kernels(compiled)
    assert kernel.plan.pretty().count("[welford:") == 2


@pytest.mark.parametrize("backend,width", [("triton", 4096), ("cpp", WIDE)])
def test_short_rows_and_the_cpp_backend_keep_their_passes(backend, width):
    """A row of 4,096 sits in registers (one pass already); the C++ backend's rows sit in cache."""
    def f(x):
        return F.layer_norm(x, (width,))

    x = edge_rows(width, offset=50.0)  # see the first test
    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x), f(x), equal_nan=True)
    assert not welford_notes(compiled)


def test_squares_around_another_tensors_mean_are_not_rewritten():
    """sum((y - mean(x))**2): the squares are not of the values the mean sums, so not Welford's."""
    def f(x, y):
        return ((y - x.mean(-1, keepdim=True)) ** 2).sum(-1)

    torch.manual_seed(3)
    x, y = torch.randn(4, WIDE), torch.randn(4, WIDE)
    compiled = cc.compile(f, backend="triton")
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert not welford_notes(compiled)


def test_split_and_column_reductions_are_not_rewritten(monkeypatch):
    """A split row takes one pass per reduction across programs; a column reduction loops over rows."""
    monkeypatch.setattr(plan_passes, "SPLIT_MIN_ELEMENTS", 1 << 14)

    def rows(x):
        return torch.var(x, -1)

    def columns(x):
        return torch.var(x, 0)

    torch.manual_seed(4)
    for f, x in ((rows, torch.randn(2, WIDE) + 5), (columns, torch.randn(WIDE, 16) + 5)):
        compiled = cc.compile(f, backend="triton")
        torch.testing.assert_close(compiled(x), f(x))
        assert not welford_notes(compiled)
        assert any(k.plan.split > 1 or k.plan.columns for k in kernels(compiled))
