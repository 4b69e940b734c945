"""The scatter family as masked reductions (decomp/scatter_family.py): our kernels, eager's values
(duplicates included), eager's errors for an index out of range, and PyTorch's call above the size cap."""

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp import scatter_family

BACKENDS = ["cpp", "triton"]


def _inputs():
    g = torch.Generator().manual_seed(0)
    x, src = torch.randn(5, 7, generator=g), torch.randn(4, 6, generator=g)
    src[1, 2] = float("nan")
    index = torch.randint(0, 5, (4, 6), generator=g)  # duplicates: several elements land on one row
    rows = torch.tensor([0, 4, 2, 4])
    return x, src, index, rows, torch.randn(4, 7, generator=g)


PROGRAMS = {
    "scatter_add": lambda x, src, index, rows, w: torch.scatter_add(x, 0, index, src),
    "scatter_last_wins": lambda x, src, index, rows, w: torch.scatter(x, 0, index, src),
    "scatter_value": lambda x, src, index, rows, w: torch.scatter(x, 1, index, 2.5),
    **{f"scatter_reduce_{r}_{'self' if inc else 'noself'}":
       (lambda x, src, index, rows, w, r=r, inc=inc: torch.scatter_reduce(x, 0, index, src, r, include_self=inc))
       for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)},
    "index_add": lambda x, src, index, rows, w: x.index_add(0, rows, w, alpha=2),
    "index_copy": lambda x, src, index, rows, w: x.index_copy(0, torch.tensor([3, 0, 1, 4]), w),
    "index_fill": lambda x, src, index, rows, w: x.index_fill(1, torch.tensor([1, 5]), -3.0),
    "index_reduce_mean": lambda x, src, index, rows, w: x.index_reduce(0, rows, w, "mean", include_self=False),
    "put_accumulate": lambda x, src, index, rows, w: x.put(torch.tensor([0, -1, 12, 0]), src[0, :4], accumulate=True),
    "index_put_accumulate": lambda x, src, index, rows, w: x.index_put((torch.tensor([[0, 4], [4, -1]]),),
                                                                        w[:1].expand(2, 2, 7), accumulate=True),
    "masked_scatter": lambda x, src, index, rows, w: x.masked_scatter(x > 0, torch.arange(35.0)),
    "scatter_add_int": lambda x, src, index, rows, w: torch.scatter_add((x * 9).int(), 0, index,
                                                                        (src.nan_to_num() * 9).int()),
    # overwrites into a bool mask (cumprod's backward scatters True); adds into bools stay PyTorch's
    "scatter_value_bool": lambda x, src, index, rows, w: torch.scatter(x > 0, 1, index, True),
    "scatter_bool": lambda x, src, index, rows, w: torch.scatter(x > 0, 0, index, src > 0),
}


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_scatter_family_is_our_kernels_with_eagers_values(name, backend):
    fn, args = PROGRAMS[name], _inputs()
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args), equal_nan=True)
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0 and stats["kernel_count"] >= 1, stats


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_out_of_range_raises_as_in_eager(backend):
    x, src, index, *_ = _inputs()
    bad = index.clone()
    bad[2, 3] = 5
    with pytest.raises((RuntimeError, IndexError)):
        torch.scatter_add(x, 0, bad, src)
    compiled = cc.compile(lambda x, i, s: torch.scatter_add(x, 0, i, s), backend=backend)
    with pytest.raises((RuntimeError, IndexError)):
        compiled(x, bad, src)


def test_above_the_cap_an_overwrite_is_the_store_scatter_a_sum_the_atomic_scatter(monkeypatch):
    monkeypatch.setattr(scatter_family, "SHORT_SCATTER", 100)
    x, src, index, *_ = _inputs()  # 24 elements x 5 positions = 120 > 100
    compiled = cc.compile(lambda x, i, s: torch.scatter(x, 0, i, s) * 2, backend="cpp")
    torch.testing.assert_close(compiled(x, index, src), torch.scatter(x, 0, index, src) * 2, equal_nan=True)
    assert compiled.session.stats["fallback_ops"] == []
    assert "scatter" in [k.kind for k in compiled.session.kernels]  # tests/test_scatter_store.py tests it
    torch._dynamo.reset()
    torch._dynamo.reset()
    compiled = cc.compile(lambda x, i, s: torch.scatter_add(x, 0, i, s) * 2, backend="cpp")
    torch.testing.assert_close(compiled(x, index, src), torch.scatter_add(x, 0, index, src) * 2, equal_nan=True)
    assert compiled.session.stats["fallback_ops"] == []
    kinds = [k.kind for k in compiled.session.kernels]
    assert "scatter" in kinds, kinds  # tests/test_scatter_kernels.py tests the atomic scatter itself


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_and_table_lookup_backwards_are_ours(backend):
    # gather's backward is a scatter_add, a table lookup's (Swin's relative position bias) an
    # index_put with accumulate: both were PyTorch's calls in training graphs.
    g = torch.Generator().manual_seed(1)
    table = torch.randn(13, 3, generator=g, requires_grad=True)
    x = torch.randn(6, 5, generator=g, requires_grad=True)
    lookup = torch.randint(0, 13, (7, 7), generator=g)
    pick = torch.randint(0, 5, (6, 2), generator=g)

    def step(table, x):
        return (table[lookup].sum(-1) * 2).sum() + torch.gather(x, 1, pick).square().sum()

    compiled = cc.compile(step, backend=backend)
    compiled(table, x).backward()
    grads = table.grad.clone(), x.grad.clone()
    table.grad = x.grad = None
    step(table, x).backward()
    torch.testing.assert_close(grads[0], table.grad)
    torch.testing.assert_close(grads[1], x.grad)
    backward = compiled.session.graphs[0].backward
    assert backward is not None and not backward.fell_back
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_is_ours_for_small_tables(backend, padding_idx):
    # a token at padding_idx adds nothing to its row, as in eager
    emb = torch.nn.Embedding(11, 6, padding_idx=padding_idx)
    ids = torch.randint(0, 11, (4, 5), generator=torch.Generator().manual_seed(2))
    ids[0, :3] = 3

    def step(ids):
        return emb(ids).square().sum()

    compiled = cc.compile(step, backend=backend)
    compiled(ids).backward()
    ours, emb.weight.grad = emb.weight.grad.clone(), None
    step(ids).backward()
    torch.testing.assert_close(ours, emb.weight.grad)
    assert compiled.session.stats["fallback_ops"] == []


def test_an_embedding_backward_scaled_by_frequency_stays_pytorchs_call():
    emb = torch.nn.Embedding(11, 6, scale_grad_by_freq=True)
    ids = torch.randint(0, 11, (4, 5), generator=torch.Generator().manual_seed(2))
    compiled = cc.compile(lambda ids: emb(ids).square().sum(), backend="cpp")
    compiled(ids).backward()
    ours, emb.weight.grad = emb.weight.grad.clone(), None
    emb(ids).square().sum().backward()
    torch.testing.assert_close(ours, emb.weight.grad)
    assert compiled.session.stats["fallback_ops"] == ["aten.embedding_dense_backward.default"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size, stride, offset", [((3, 4), (16, 2), 1), ((2, 2, 2), (24, 4, 1), 0)])
def test_as_strided_scatter_writes_the_view_positions(backend, size, stride, offset):
    g = torch.Generator().manual_seed(3)
    x, src = torch.randn(6, 8, generator=g), torch.randn(size, generator=g)
    fn = lambda x, s: torch.as_strided_scatter(x, s, size, stride, offset)  # noqa: E731
    compiled = cc.compile(fn, backend=backend)
    assert torch.equal(compiled(x, src), fn(x, src))
    assert compiled.session.stats["fallback_ops"] == []
    # a strided input is placed by its own strides in eager: PyTorch's call, same values
    wide = torch.randn(6, 16, generator=g)[:, ::2]
    torch._dynamo.reset()
    compiled = cc.compile(fn, backend=backend)
    assert torch.equal(compiled(wide, src), fn(wide, src))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bucketize_and_searchsorted_count_like_the_binary_search(backend):
    g = torch.Generator().manual_seed(4)
    boundaries = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0])  # a repeated boundary: left and right differ
    x = torch.cat([torch.randn(20, generator=g), torch.tensor([0.0, 0.5, -1.0, 2.0, float("nan"), 9.0])])
    rows = torch.sort(torch.randn(3, 6, generator=g), -1).values
    values = torch.randn(3, 4, generator=g)
    sorter = torch.argsort(boundaries.flip(0))
    programs = [
        lambda: torch.bucketize(x, boundaries),
        lambda: torch.bucketize(x, boundaries, right=True, out_int32=True),
        lambda: torch.searchsorted(boundaries, x, side="right"),
        lambda: torch.searchsorted(rows, values),  # one sorted row per row of values
        lambda: torch.searchsorted(boundaries.flip(0), x, sorter=sorter),
    ]
    for fn in programs:
        compiled = cc.compile(fn, backend=backend)
        got, expected = compiled(), fn()
        assert got.dtype == expected.dtype and torch.equal(got, expected), (got, expected)
        assert compiled.session.stats["fallback_ops"] == []
        torch._dynamo.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_diagonal_scatter_and_max_unpool_are_ours(backend):
    g = torch.Generator().manual_seed(5)
    y, diag = torch.randn(2, 4, 5, generator=g), torch.randn(2, 3, generator=g)
    pooled, where = torch.nn.functional.max_pool2d(torch.randn(2, 3, 6, 6, generator=g), 2, return_indices=True)
    programs = [
        (lambda y, d: torch.diagonal_scatter(y, d, 2, 1, 2), (y, diag)),
        (lambda p, i: torch.nn.functional.max_unpool2d(p, i, 2), (pooled, where)),
    ]
    for fn, args in programs:
        compiled = cc.compile(fn, backend=backend)
        assert torch.equal(compiled(*args), fn(*args))
        assert compiled.session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_put_with_two_indices_checks_each_dim(backend):
    x = torch.zeros(3, 4, 2)
    values = torch.arange(6.0).reshape(3, 2)
    rows, cols = torch.tensor([0, 2, 2]), torch.tensor([1, 3, 3])  # a duplicate: accumulated
    fn = lambda x, r, c, v: x.index_put((r, c), v, accumulate=True)  # noqa: E731
    compiled = cc.compile(fn, backend=backend)
    assert torch.equal(compiled(x, rows, cols, values), fn(x, rows, cols, values))
    assert compiled.session.stats["fallback_ops"] == []
    # col 4 would alias row 1's col 0 once linearized: it must raise as in eager, not land there
    bad = torch.tensor([0, 2, 4])
    with pytest.raises((RuntimeError, IndexError)):
        fn(x, rows, bad, values)
    with pytest.raises((RuntimeError, IndexError)):
        compiled(x, rows, bad, values)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_nonzero_static_pads_truncates_and_counts_nan_as_nonzero(backend):
    x = torch.tensor([[0.0, 1.5, 0.0, float("nan")], [2.0, 0.0, -0.0, 3.0], [0.0, 0.0, 0.0, 4.0]])
    for size, fill in ((8, -7), (3, -1), (0, -1)):
        compiled = cc.compile(lambda t, s=size, f=fill: torch.nonzero_static(t, size=s, fill_value=f), backend=backend)
        got, expected = compiled(x), torch.nonzero_static(x, size=size, fill_value=fill)
        assert torch.equal(got, expected), (size, got, expected)
        assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats["fallback_ops"]
    assert torch.equal(torch.nonzero_static(x, size=8, fill_value=-7)[:5],
                       torch.tensor([[0, 1], [0, 3], [1, 0], [1, 3], [2, 3]]))  # -0.0 is zero, NaN is not


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_index_select_of_a_scalar_reads_it_and_checks_the_position(backend):
    compiled = cc.compile(lambda t, i: torch.index_select(t, 0, i), backend=backend)
    x = torch.tensor(5.0)
    assert torch.equal(compiled(x, torch.tensor([0])), torch.tensor(5.0))
    assert compiled.session.stats["fallback_ops"] == []
    with pytest.raises((IndexError, RuntimeError), match="index out of range"):
        compiled(x, torch.tensor([1]))


SCALAR_INDEX = {
    "scatter_add": lambda x, i, s: torch.zeros_like(x).scatter_add(0, i, s) + x,
    "scatter": lambda x, i, s: x.scatter(0, i, s),
    "scatter_value": lambda x, i, s: x.scatter(0, i, 2.5) * s,
    "scatter_reduce_amax": lambda x, i, s: x.scatter_reduce(0, i, s, "amax", include_self=False),
}


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", list(SCALAR_INDEX))
def test_a_zero_dimensional_index_into_a_vector_compiles_and_matches_eager(name, train):
    """Eager takes a 0-d index and source into a 1-d tensor as one element; the masked forms unsqueezed
    past the index's last dimension and AOT tracing raised IndexError, so the graph ran in eager
    (random program 9354, --train: a scatter_add of a sum's scalar). Such a scatter is PyTorch's call
    inside our graph now, and values and gradients match."""
    fn = SCALAR_INDEX[name]
    g = torch.Generator().manual_seed(3)
    x, s = torch.randn(20, generator=g), torch.randn((), generator=g)
    index = torch.tensor(7)
    compiled = cc.compile(lambda x, s: fn(x, (s.abs() * 5).long().clamp(0, 19) + index, s))
    reference = lambda x, s: fn(x, (s.abs() * 5).long().clamp(0, 19) + index, s)  # noqa: E731
    results = []
    for f in (compiled, reference):
        xs, ss = x.clone().requires_grad_(train), s.clone().requires_grad_(train)
        out = f(xs, ss)
        grads = torch.autograd.grad(out.sum(), (xs, ss), allow_unused=True) if train else ()
        results.append((out, grads))
    torch.testing.assert_close(results[0][0], results[1][0])
    for ours, theirs in zip(results[0][1], results[1][1]):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            torch.testing.assert_close(ours, theirs)
    assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages
