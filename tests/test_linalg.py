"""Dense linear algebra is a library call by design (LAPACK on the CPU, cuSOLVER on the GPU), like
matmul: not counted as a fallback, while the pointwise work around it is ours, and eager's errors
(a singular matrix) still reach the caller at the same point."""

import pytest
import torch

import compiler_core as cc


def _solve_then_scale(a, b):
    x = torch.linalg.solve(a, b)
    return torch.tanh(x) * 2 + torch.linalg.det(a).unsqueeze(-1).unsqueeze(-1)


def test_linalg_calls_are_library_calls_and_the_values_match():
    torch.manual_seed(0)
    a = torch.randn(3, 4, 4) + 4 * torch.eye(4)
    b = torch.randn(3, 4, 2)
    compiled = cc.compile(_solve_then_scale, backend="cpp")
    torch.testing.assert_close(compiled(a, b), _solve_then_scale(a, b))
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, stats
    assert stats["kernel_count"] >= 1, "the pointwise tail should be a kernel of ours"
    reasons = {n.extern.reason for g in compiled.session.all_records() for n in g.loops.nodes if n.kind == "extern"}
    assert any("LAPACK" in r for r in reasons), reasons


def test_a_singular_matrix_raises_eagers_error():
    def inverse_plus_one(a):
        return torch.linalg.inv(a) + 1

    singular = torch.ones(3, 3)
    with pytest.raises(torch.linalg.LinAlgError) as eager_error:
        inverse_plus_one(singular)
    compiled = cc.compile(inverse_plus_one, backend="cpp")
    torch.testing.assert_close(compiled(torch.eye(3) * 2), inverse_plus_one(torch.eye(3) * 2))
    with pytest.raises(torch.linalg.LinAlgError) as ours:
        compiled(singular)
    assert str(ours.value) == str(eager_error.value)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_lu_unpack_is_our_kernels_and_rebuilds_the_matrix(backend):
    """P replays the factorization's row swaps (pivots chosen by partial pivoting, so most rows move);
    L and U are masks of the packed factor. Tall, wide and batched factors."""
    torch.manual_seed(0)
    for shape in ((6, 6), (2, 7, 4), (3, 4, 6)):
        a = torch.randn(shape)
        lu, pivots = torch.linalg.lu_factor(a)
        compiled = cc.compile(lambda x, p: torch.lu_unpack(x, p), backend=backend)
        got, expected = compiled(lu, pivots), torch.lu_unpack(lu, pivots)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        p, lower, upper = got
        torch.testing.assert_close(p @ lower @ upper, a, atol=1e-5, rtol=1e-5)
        assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]
    only_p = cc.compile(lambda x, p: torch.lu_unpack(x, p, unpack_data=False), backend=backend)(lu, pivots)
    assert only_p[1].shape == (0,) and torch.equal(only_p[0], expected[0])
