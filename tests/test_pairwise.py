"""bilinear (_trilinear), cdist and pdist as broadcast arithmetic and reductions of ours
(compiler_core/decomp/pairwise.py): eager's values on both backends, a zero distance included, and
cdist's matmul route taken where ATen takes it."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.decomp.pairwise import MM_ABOVE_ROWS, PDIST_MAX_ROWS, pair_rows, pairs_at

g = torch.Generator().manual_seed(0)
X1, X2 = torch.randn(2, MM_ABOVE_ROWS + 5, 5, generator=g), torch.randn(2, 7, 5, generator=g)
X2[0, 0] = X1[0, 3]  # a zero distance
ROWS = torch.randn(9, 4, generator=g)
ROWS[5] = ROWS[3]
P_VALUES = [0.0, 1.0, 2.0, 3.0, 0.5, float("inf")]

def _cdist_at(p):
    return lambda a, b: torch.cdist(a, b, p=p)


def _pdist_at(p):
    return lambda x: F.pdist(x, p)


PROGRAMS = {
    "bilinear": (lambda a, b, w, bias: F.bilinear(a, b, w, bias),
                 (torch.randn(4, 3, generator=g), torch.randn(4, 5, generator=g), torch.randn(6, 3, 5, generator=g),
                  torch.randn(6, generator=g))),
    "cdist p=2, matmul route": (lambda a, b: torch.cdist(a, b), (X1, X2)),
    "cdist p=2, direct": (lambda a, b: torch.cdist(a[:, :9], b, compute_mode="donot_use_mm_for_euclid_dist"),
                          (X1, X2)),
    **{f"cdist p={p}": (_cdist_at(p), (X1, X2)) for p in P_VALUES if p != 2},
    **{f"pdist p={p}": (_pdist_at(p), (ROWS,)) for p in P_VALUES},
    "pdist of one row": (lambda x: F.pdist(x[:1]) + 1, (ROWS,)),  # no pairs: an empty result
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_pairwise_products_and_distances_match_eager(name, backend):
    fn, args = PROGRAMS[name]
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, stats
    if "matmul route" in name:
        assert stats["extern_calls"] >= 1  # the one matmul, as ATen's route takes it


def test_pdist_pairs_come_in_atens_order():
    """Pair k's rows, from a square root in float64, are triu_indices' for every size up to 400, and at
    PDIST_MAX_ROWS every row's boundary pairs are."""
    for rows in range(2, 400):
        i, j = pair_rows(rows)
        expected_i, expected_j = torch.triu_indices(rows, rows, 1)
        assert torch.equal(i, expected_i) and torch.equal(j, expected_j), rows
    # At PDIST_MAX_ROWS (134 million pairs, too many to list in a test): every row's first, second and
    # last pair, where a square root rounded the wrong way would first put a pair on the wrong row.
    n = PDIST_MAX_ROWS
    row = torch.arange(n - 1)
    first = row * (2 * n - row - 1) // 2
    last = first + (n - 2 - row)
    assert int(last[-1]) == n * (n - 1) // 2 - 1
    k = torch.cat([first, first[:-1] + 1, last])
    i, j = pairs_at(k.to(torch.float64), n)
    assert torch.equal(i, torch.cat([row, row[:-1], row]))
    assert torch.equal(j, torch.cat([row + 1, row[:-1] + 2, torch.full_like(row, n - 1)]))


def test_cdist_trains_with_atens_backward():
    """Autograd differentiates cdist before our decomposition: the backward is ATen's _cdist_backward
    (an extern call, counted as a fallback op), the gradients eager's, zero distance included."""
    a, b = X1.clone().requires_grad_(), X2.clone().requires_grad_()
    a0, b0 = X1.clone().requires_grad_(), X2.clone().requires_grad_()
    fn = lambda a, b: torch.cdist(a, b, p=3.0).sum()  # noqa: E731
    compiled = cc.compile(fn)
    compiled(a, b).backward()
    fn(a0, b0).backward()
    torch.testing.assert_close(a.grad, a0.grad)
    torch.testing.assert_close(b.grad, b0.grad)
    assert set(compiled.session.stats["fallback_ops"]) == {"aten._cdist_backward.default"}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_triangle_indices_and_dlrm_interactions(backend):
    """tril_indices and triu_indices (torch's references: each pair from its position), rectangular,
    with offsets past either side, empty, and 500,000 pairs; then DLRM's feature interactions: the
    lower triangle of every sample's dot products, gathered at those pairs."""
    shapes = [(4, 7, -2), (7, 4, 2), (5, 5, 10), (5, 5, -10), (0, 3, 0)]
    shapes += [(1000, 1000, 1)] if backend == "cpp" else []  # the Triton interpreter: small ones
    for rows, cols, offset in shapes:
        def pairs(x, rows=rows, cols=cols, offset=offset):
            return torch.tril_indices(rows, cols, offset) + x, torch.triu_indices(rows, cols, offset) - x

        torch._dynamo.reset()
        compiled = cc.compile(pairs, backend=backend)
        zero = torch.zeros((), dtype=torch.int64)
        for got, want in zip(compiled(zero), pairs(zero)):
            assert got.shape == want.shape and torch.equal(got, want), (rows, cols, offset)
        assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats

    def interactions(dense, embedded):
        features = torch.cat([dense.unsqueeze(1), embedded], dim=1)  # [batch, fields, width]
        dots = torch.bmm(features, features.transpose(1, 2))
        li, lj = torch.tril_indices(features.shape[1], features.shape[1], offset=-1)
        return torch.cat([dense, dots[:, li, lj]], dim=1)

    dense, embedded = torch.randn(3, 8), torch.randn(3, 5, 8)
    compiled = cc.compile(interactions, backend=backend)
    torch.testing.assert_close(compiled(dense, embedded), interactions(dense, embedded))
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
