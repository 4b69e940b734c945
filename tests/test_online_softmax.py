"""The online softmax plan pass (schedule/plan_passes.py): a row too long for one block's registers
takes its max and its sum of exponentials in one pass over memory instead of two, on the Triton
backend. The values must stay eager's, edge rows included (-inf, NaN, +inf, a max that keeps growing)."""

import pytest
import torch

import compiler_core as cc
from compiler_core.schedule import plan_passes

WIDE = plan_passes.PERSISTENT_MAX_RBLOCK + 3616  # 20,000: looped over in pieces


def edge_rows(width: int) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(8, width) * 3
    x[1, : width // 4] = float("-inf")  # the first pieces all -inf, then finite values
    x[2, :] = float("-inf")  # a row of -inf: eager's softmax is NaN
    x[3, width // 2] = float("nan")
    x[4, 17] = float("inf")  # eager: NaN
    x[5] = torch.linspace(-50, 80, width)  # the max grows in every piece
    x[6, -1] = 1000.0  # the max arrives in the last piece
    x[7, ::2] = float("-inf")
    return x


def kernels(compiled):
    return [k for g in compiled.session.graphs for k in g.kernels]


def test_softmax_and_log_softmax_of_long_rows_take_one_pass_for_max_and_sum_and_match_eager():
    def f(x):
        return torch.softmax(x, -1), torch.log_softmax(x, -1)

    x = edge_rows(WIDE)
    compiled = cc.compile(f, backend="triton")
    for got, expected in zip(compiled(x), f(x)):
        torch.testing.assert_close(got, expected, equal_nan=True)
    (kernel,) = kernels(compiled)
    notes = [n for n in kernel.plan.notes if n.startswith("online softmax")]
    assert notes and "3 passes over memory -> 2" in notes[0], kernel.plan.notes
    assert kernel.source.count("for roffset in") == 2
    assert [r.name for r in kernel.passes if r.name == "online softmax"], "the pass is missing from the log"
    assert "[online: rescaled as" in kernel.plan.pretty()


def test_cross_entropy_over_a_bf16_vocabulary_matches_eager():
    torch.manual_seed(1)
    logits = (torch.randn(6, WIDE) * 4).to(torch.bfloat16)
    target = torch.randint(0, WIDE, (6,))
    target[2] = -100  # ignored

    def f(logits, target):
        return torch.nn.functional.cross_entropy(logits.float(), target)

    compiled = cc.compile(f, backend="triton")
    torch.testing.assert_close(compiled(logits, target), f(logits, target))
    assert any("online softmax" in n for k in kernels(compiled) for n in k.plan.notes)


@pytest.mark.parametrize("backend,width", [("triton", 4096), ("cpp", WIDE)])
def test_short_rows_and_the_cpp_backend_keep_their_passes(backend, width):
    """A row of 4,096 sits in registers (one pass already); the C++ backend's rows sit in cache."""
    def f(x):
        return torch.softmax(x, -1)

    x = edge_rows(width)
    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x), f(x), equal_nan=True)
    assert not any("online softmax" in n for k in kernels(compiled) for n in k.plan.notes)


def test_a_sum_of_exponentials_around_another_max_is_not_rewritten():
    """sum(exp(x - max(y))) with y another tensor: not the max of the summed value, so not online."""
    def f(x, y):
        return torch.exp(x - y.amax(-1, keepdim=True)).sum(-1)

    torch.manual_seed(2)
    x, y = torch.randn(4, WIDE), torch.randn(4, WIDE)
    compiled = cc.compile(f, backend="triton")
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert not any("online softmax" in n for k in kernels(compiled) for n in k.plan.notes)
