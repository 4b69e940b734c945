"""The overwriting scatter (decomp/store_scatter.py, ir/lowering/scatter.py): scatter, scatter with a
value and index_copy above the dense form's cap (which used to stay PyTorch's call) as a copy of
`self` and one loop of plain stores over the source elements. Values against eager on both backends:
where several elements land on one position the C++ kernel keeps eager CPU's (the last in index
order), the Triton kernel one of them (eager CUDA's rule); eager's error for a position out of range;
and the artifacts that show it."""

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp.scatter_family import SHORT_SCATTER

BACKENDS = ["cpp", "triton"]
ROWS, WIDTH, COUNT = 3000, 32, 2500  # COUNT x WIDTH elements onto ROWS positions: far above the cap


def store_kernels(compiled):
    return [k for k in compiled.session.kernels if k.kind == "scatter"]


def assert_store_scatter(compiled):
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    (kernel,) = store_kernels(compiled)
    assert "atomic" not in kernel.source and "store each element at its position" in kernel.source, kernel.source
    loops = [n for r in compiled.session.all_records() if r.loops is not None for n in r.loops.nodes
             if n.kind == "scatter"]
    assert [n.accumulate for n in loops] == ["overwrite"] and "(overwrite)" in loops[0].pretty()


def inputs(seed=0, duplicates=True, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x, src = torch.randn(ROWS, WIDTH, generator=g).to(dtype), torch.randn(COUNT, WIDTH, generator=g).to(dtype)
    if duplicates:  # about half the positions are hit more than once; row 5 by 200 elements per column
        index = torch.randint(0, ROWS, (COUNT, WIDTH), generator=g)
        index[100:300] = 5
    else:
        index = torch.stack([torch.randperm(ROWS, generator=g)[:COUNT] for _ in range(WIDTH)], 1)
    assert COUNT * WIDTH * ROWS > SHORT_SCATTER
    return x, index, src


def scatter_chain(x, index, src):
    return (x * 2).scatter(0, index, src * 3) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scatter_with_distinct_positions_matches_eager(backend):
    x, index, src = inputs(duplicates=False)
    compiled = cc.compile(scatter_chain, backend=backend)
    assert torch.equal(compiled(x, index, src), scatter_chain(x, index, src))
    assert_store_scatter(compiled)


def test_where_elements_collide_the_cpp_kernel_keeps_the_last_as_eager_cpu():
    x, index, src = inputs()
    compiled = cc.compile(scatter_chain, backend="cpp")
    assert torch.equal(compiled(x, index, src), scatter_chain(x, index, src))
    (kernel,) = store_kernels(compiled)
    assert "omp parallel" not in kernel.source  # one thread, in index order
    # along dim 1 too, on a transposed index
    fn = lambda x, i, s: x.scatter(1, i, s)  # noqa: E731
    x1, i1, s1 = x.t().contiguous(), index.t(), src.t()
    torch._dynamo.reset()
    compiled = cc.compile(fn, backend="cpp")
    assert torch.equal(compiled(x1, i1, s1), fn(x1, i1, s1))


def test_where_elements_collide_the_triton_kernel_keeps_one_of_them():
    x, index, src = inputs()
    compiled = cc.compile(scatter_chain, backend="triton")
    got = compiled(x, index, src)
    # every position holds x*2+1 where nothing landed, else 3*src+1 of some element that landed there
    landed = torch.zeros(ROWS, WIDTH, dtype=torch.bool).scatter(0, index, True)
    assert torch.equal(got[~landed], (x * 2 + 1)[~landed])
    candidates = torch.zeros(ROWS, COUNT, WIDTH, dtype=torch.bool)
    candidates[index, torch.arange(COUNT)[:, None], torch.arange(WIDTH)] = True
    landing = src * 3 + 1  # as the chain computes it: compared exactly
    hit = (got[:, None, :] == landing[None]) & candidates
    assert hit.any(1)[landed].all()
    assert_store_scatter(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_scatter_and_index_copy_and_bf16(backend):
    x, index, src = inputs()
    fill = lambda x, i: x.scatter(0, i, -4.5)  # noqa: E731 - one value: no collision can differ
    compiled = cc.compile(fill, backend=backend)
    assert torch.equal(compiled(x, index), fill(x, index))
    assert_store_scatter(compiled)

    rows = torch.randperm(ROWS, generator=torch.Generator().manual_seed(3))[:COUNT]
    copy = lambda x, i, s: x.index_copy(0, i, s * 2)  # noqa: E731
    torch._dynamo.reset()
    compiled = cc.compile(copy, backend=backend)
    assert torch.equal(compiled(x, rows, src), copy(x, rows, src))
    assert_store_scatter(compiled)

    xb, ib, sb = inputs(duplicates=False, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = cc.compile(scatter_chain, backend=backend)
    assert torch.equal(compiled(xb, ib, sb), scatter_chain(xb, ib, sb))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_position_out_of_range_raises_as_eager(backend):
    x, index, src = inputs(duplicates=False)
    index[7, 3] = ROWS
    with pytest.raises(RuntimeError):
        x.scatter(0, index, src)
    compiled = cc.compile(lambda x, i, s: x.scatter(0, i, s), backend=backend)
    with pytest.raises((RuntimeError, IndexError)):
        compiled(x, index, src)
